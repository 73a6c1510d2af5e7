// Compiled, not run, once per instruction set a user's flags may give (test/CMakeLists.txt): the
// CPU device's GEMMs under every AMP dtype instantiate each path's code, whichever of the packed
// kernels (f32, AVX512-BF16, AMX) that target compiles, down to Eigen's alone. Only the CPU
// device's header: no other header reads the instruction-set macros (the umbrella cost each of
// the five builds a third of its time; #38).
#include <epl/device/cpu/cpu.hpp>

void every_gemm_path(const epl::device::Cpu& cpu, const epl::Tensor& a, const epl::Tensor& c) {
  for (auto inputs : {epl::DType::kF32, epl::DType::kBF16, epl::DType::kF16}) {
    cpu.gemm(a, false, a, true, c, 1, 0, inputs);
    cpu.gemm_batched(a, false, a, true, c, 1, 0, inputs);
  }
  epl::device::Cpu::use_bf16_kernel(epl::device::Cpu::bf16_kernel());
}
