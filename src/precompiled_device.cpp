// epl::precompiled's source for the CPU device: device::Cpu and device::CpuF64, their operations
// and the kernels under them (Eigen, epl's SGEMM, the bf16 kernels), compiled once. It is a source
// of its own so that a parallel build compiles it beside src/precompiled.cpp, which declares the
// device `extern template` as a program does and so parses none of its kernels: the library took
// 106 s as one source of both on an AMD EPYC Zen 3, the device alone 50 s (#38: CI time, and a
// user's first build). Compiled as a program is (EPL_PRECOMPILED: the linked bodies are
// src/precompiled.cpp's).
#define EPL_PRECOMPILED_DEVICE_SOURCE
#include "epl/device/cpu/cpu.hpp"

namespace epl {
inline namespace v0 {
namespace device {
template class BasicCpu<float>;
template class BasicCpu<float, double>;
}  // namespace device
}  // namespace v0
}  // namespace epl
