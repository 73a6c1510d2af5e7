#pragma once
// A CPU's physical limit for the benchmarks that compare against it: the rate of the instruction
// a GEMM multiplies with, on every thread at once.
#include <epl/device/cpu/bf16_kernel.hpp>

namespace bench {
/// The instruction a GEMM multiplies with: f32 FMA (also AMP's rounded-f32 kernel), VDPBF16PS, AMX.
enum class Peak { kFma, kDpbf16, kAmx };
inline Peak peak_of(epl::device::CpuBf16Kernel k) {
  using K = epl::device::CpuBf16Kernel;
  return k == K::kAmx ? Peak::kAmx : k == K::kAvx512Bf16 ? Peak::kDpbf16 : Peak::kFma;
}
/// The instruction's register-resident loop (bf16_kernel.hpp's) on `threads` threads at once, in
/// GFLOP/s. Time it beside what it bounds: these machines' speed drifts by tens of percent
/// within a minute.
inline double peak_gflops(int threads, Peak kind) {
  double total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : total)
#endif
  total += kind == Peak::kFma      ? epl::detail::cpu::fma_gflops(2'000'000)
           : kind == Peak::kDpbf16 ? epl::detail::cpu::dpbf16_gflops(2'000'000)
                                   : epl::detail::cpu::amx_gflops(100'000);
  (void)threads;
  return total;
}
}  // namespace bench
