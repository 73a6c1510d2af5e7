// The CUDA tests as one translation unit, as CMake's unity build makes of the CPU tests' targets
// (CMake before 3.31 builds no unity source for CUDA, and Debian 12 has 3.25). The three files
// instantiate the same Trainer, executor and device code; compiled apart they took 21 + 73 + 98 s
// of CI's build (AMD EPYC Zen 3, #38). Each keeps its names in a namespace of its own.
#include "cuda.test.cu"
#include "multirank.test.cu"
#include "trainer.test.cu"
