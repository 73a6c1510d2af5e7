#pragma once
/// \file
/// \brief The one place that chooses which kernel multiplies AMP's bf16 operands on this CPU, by
/// what the CPU does rather than by its name: AMX's tiles where the CPU has them and Linux grants
/// their state; else VDPBF16PS where this core runs it measurably faster than f32 FMA (Zen 4 runs
/// it at twice FMA's rate: two products a lane; a core that runs it at FMA's instruction rate or
/// below gains nothing from it, and its packing costs more); else the f32 kernel on operands
/// rounded to bf16 as it packs them, which costs what f32 does. So AMP is never slower than f32
/// by the kernel's choice. The choice is made once a process, before the first bf16 GEMM, and
/// can be forced (device::Cpu::use_bf16_kernel) for tests and benchmarks.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>

#include "epl/core/error.hpp"
#include "epl/device/cpu/isa.hpp"
#include "epl/device/cpu/sgemm_amx.hpp"
#include "epl/device/cpu/sgemm_avx2.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

/// The f32 kernel this build's target compiles, the one condition every place that asks reads
/// (the GEMM's dispatch, f32_kernel(), kPackedGemm, bench_gemm): 512, sgemm_avx512.hpp's; 256,
/// sgemm_avx2.hpp's on an AVX2 target without AVX-512; 0, Eigen's product (EPL_EIGEN_SGEMM asks
/// for it).
#if defined(EPL_EIGEN_SGEMM)
#define EPL_SGEMM_F32 0
#elif defined(__AVX512F__)
#define EPL_SGEMM_F32 512
#elif defined(EPL_SGEMM_AVX2)
#define EPL_SGEMM_F32 256
#else
#define EPL_SGEMM_F32 0
#endif
/// Whether f32 GEMMs run epl's packed kernels, which round AMP's operands as they pack them;
/// elsewhere Eigen multiplies rounded copies.
inline constexpr bool kPackedGemm = EPL_SGEMM_F32 != 0;
/// Whether the packed formats for bf16 products are compiled (the target's instruction sets).
#if defined(EPL_SGEMM_BF16) && !defined(EPL_EIGEN_SGEMM)
inline constexpr bool kPackedBF16 = true;
#else
inline constexpr bool kPackedBF16 = false;
#endif
#if defined(EPL_SGEMM_AMX) && !defined(EPL_EIGEN_SGEMM)
inline constexpr bool kPackedAmx = true;
#else
inline constexpr bool kPackedAmx = false;
#endif
/// How much faster than f32 FMA VDPBF16PS must measure to be chosen: its packing costs more.
inline constexpr double kBf16DotMargin = 1.25;

// An instruction's peak is timed on 12 independent chains (enough to hide its latency) in
// assembly: the same loop at every optimization level. The loop was C++ once, and wherever the
// compiler kept its 12 accumulators in memory (-O0, as a check build's examples are compiled, and
// a small program at -O2) both loops measured a store's forwarding latency, not the instructions:
// on an Intel Xeon whose VDPBF16PS runs at half FMA's FLOP rate, that measured 1.2-1.35x against
// the 1.25 margin, and each process chose either kernel
// (a resumed AMP run printed another loss than the run it resumed; #39). The chains start at zero:
// no denormal slows them. EPL_DETAIL_CHAIN is one link of chain n: op of registers 12 and 13 into n.
#define EPL_DETAIL_CHAIN(op, reg, n) op " %%" reg "13, %%" reg "12, %%" reg #n "\n\t"
#define EPL_DETAIL_TWELVE_CHAINS(op, reg)                                                              \
  EPL_DETAIL_CHAIN(op, reg, 0) EPL_DETAIL_CHAIN(op, reg, 1) EPL_DETAIL_CHAIN(op, reg, 2)               \
  EPL_DETAIL_CHAIN(op, reg, 3) EPL_DETAIL_CHAIN(op, reg, 4) EPL_DETAIL_CHAIN(op, reg, 5)               \
  EPL_DETAIL_CHAIN(op, reg, 6) EPL_DETAIL_CHAIN(op, reg, 7) EPL_DETAIL_CHAIN(op, reg, 8)               \
  EPL_DETAIL_CHAIN(op, reg, 9) EPL_DETAIL_CHAIN(op, reg, 10) EPL_DETAIL_CHAIN(op, reg, 11)
// iters rounds of the 12 chains of `op` on `reg` registers (zmm or ymm), all 14 zeroed first
#define EPL_DETAIL_PEAK_LOOP(op, reg, iters)                                                           \
  do {                                                                                                 \
    long rounds_ = (iters);                                                                            \
    __asm__ volatile(                                                                                  \
        "vxorps %%xmm0, %%xmm0, %%xmm0\n\tvxorps %%xmm1, %%xmm1, %%xmm1\n\t"                           \
        "vxorps %%xmm2, %%xmm2, %%xmm2\n\tvxorps %%xmm3, %%xmm3, %%xmm3\n\t"                           \
        "vxorps %%xmm4, %%xmm4, %%xmm4\n\tvxorps %%xmm5, %%xmm5, %%xmm5\n\t"                           \
        "vxorps %%xmm6, %%xmm6, %%xmm6\n\tvxorps %%xmm7, %%xmm7, %%xmm7\n\t"                           \
        "vxorps %%xmm8, %%xmm8, %%xmm8\n\tvxorps %%xmm9, %%xmm9, %%xmm9\n\t"                           \
        "vxorps %%xmm10, %%xmm10, %%xmm10\n\tvxorps %%xmm11, %%xmm11, %%xmm11\n\t"                     \
        "vxorps %%xmm12, %%xmm12, %%xmm12\n\tvxorps %%xmm13, %%xmm13, %%xmm13\n\t"                     \
        "1:\n\t" EPL_DETAIL_TWELVE_CHAINS(op, reg) "dec %0\n\tjnz 1b\n\t"                                \
        : "+r"(rounds_)                                                                                \
        :                                                                                              \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",     \
          "xmm11", "xmm12", "xmm13", "cc");                                                            \
  } while (false)

/// GFLOP/s of `loop()`, which issues 12 x iters instructions worth `flop` each.
template <class Loop>
double peak_gflops(long iters, double flop, Loop&& loop) {
  const auto t0 = std::chrono::steady_clock::now();
  loop();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 12.0 * flop * static_cast<double>(iters) / std::max(s, 1e-9) / 1e9;
}
/// f32 FMA's peak on this core: 16 lanes (AVX-512) or 8 (AVX2), 2 FLOP each; 0 without FMA.
inline double fma_gflops(long iters) {
  iters = std::max(iters, 1L);
#if defined(__AVX512F__)
  return peak_gflops(iters, 16 * 2.0, [&] { EPL_DETAIL_PEAK_LOOP("vfmadd231ps", "zmm", iters); });
#elif defined(__FMA__)
  return peak_gflops(iters, 8 * 2.0, [&] { EPL_DETAIL_PEAK_LOOP("vfmadd231ps", "ymm", iters); });
#else
  return 0;
#endif
}
/// VDPBF16PS's peak on this core: 16 lanes, each two products and two sums; 0 if not compiled.
inline double dpbf16_gflops(long iters) {
  iters = std::max(iters, 1L);
#if defined(__AVX512BF16__)
  return peak_gflops(iters, 16 * 4.0, [&] { EPL_DETAIL_PEAK_LOOP("vdpbf16ps", "zmm", iters); });
#else
  return 0;
#endif
}
#undef EPL_DETAIL_PEAK_LOOP
#undef EPL_DETAIL_TWELVE_CHAINS
#undef EPL_DETAIL_CHAIN
/// TDPBF16PS's peak on this core in the AMX kernel's pattern (four C tiles from two A and two B
/// tiles), 16 x 16 x 32 products and sums each; 0 where AMX cannot run.
inline double amx_gflops(long iters) {
#if defined(EPL_SGEMM_AMX)
  if (!isa().amx_bf16) return 0;
  using T = sgemm::Tiles;
  alignas(64) static const std::uint8_t inputs[1024] = {};
  T::configure(sgemm::whole_tiles());
  T::zero<0>(), T::zero<1>(), T::zero<2>(), T::zero<3>();
  T::load<4>(inputs, 64), T::load<5>(inputs, 64), T::load<6>(inputs, 64), T::load<7>(inputs, 64);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    T::dot<0, 4, 6>();
    T::dot<1, 4, 7>();
    T::dot<2, 5, 6>();
    T::dot<3, 5, 7>();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  T::release();
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iters) / std::max(s, 1e-9) / 1e9;
#else
  (void)iters;
  return 0;
#endif
}

/// \brief What chose the bf16 kernel: the kernel and, where the choice was timed, both peaks.
struct Bf16Choice {
  device::CpuBf16Kernel kernel = device::CpuBf16Kernel::kRoundedF32;
  double fma_gflops = 0, dpbf16_gflops = 0;  ///< this core's peaks as measured for the choice (0: not timed)
  double dpbf16_over_fma = 0;                 ///< the median of their ratios, which decided
};

/// Whether this build and this CPU can run the kernel.
inline bool bf16_kernel_runs(device::CpuBf16Kernel k) {
  using K = device::CpuBf16Kernel;
  if (k == K::kAmx) return kPackedAmx && isa().amx_bf16;
  if (k == K::kAvx512Bf16) return kPackedBF16;  // compiled for AVX512-BF16: this CPU has it
  return true;
}

inline Bf16Choice choose_bf16_kernel() {
  using K = device::CpuBf16Kernel;
  if (bf16_kernel_runs(K::kAmx)) return {K::kAmx};
  if (!bf16_kernel_runs(K::kAvx512Bf16)) return {K::kRoundedF32};
  // Alternate the two loops (the first pair warms the vector units up and is dropped) and take
  // the median of 5 ratios; ~1 ms in all. Twice FMA's rate on Zen 4, so the margin is wide.
  std::array<double, 5> ratio{}, fma{}, dot{};
  fma_gflops(20'000), dpbf16_gflops(20'000);
  for (std::size_t i = 0; i < ratio.size(); ++i) {
    fma[i] = fma_gflops(20'000);
    dot[i] = dpbf16_gflops(20'000);
    ratio[i] = dot[i] / std::max(fma[i], 1e-9);
  }
  std::sort(ratio.begin(), ratio.end()), std::sort(fma.begin(), fma.end()), std::sort(dot.begin(), dot.end());
  return {ratio[2] >= kBf16DotMargin ? K::kAvx512Bf16 : K::kRoundedF32, fma[2], dot[2], ratio[2]};
}

/// \brief The kernel chosen for this process (timed once, on first use) and its figures.
inline const Bf16Choice& bf16_choice() {
  static const Bf16Choice chosen = choose_bf16_kernel();
  return chosen;
}
// -1: the choice; else the forced kernel
inline std::atomic<int>& bf16_forced() {
  static std::atomic<int> forced{-1};
  return forced;
}
/// \brief The kernel AMP's bf16 GEMMs use now.
inline device::CpuBf16Kernel bf16_kernel() {
  const int forced = bf16_forced().load(std::memory_order_relaxed);
  return forced < 0 ? bf16_choice().kernel : static_cast<device::CpuBf16Kernel>(forced);
}
/// \brief Forces the kernel (nullopt: back to the choice); one this CPU or build cannot run is an
/// error naming what it lacks.
inline void use_bf16_kernel(std::optional<device::CpuBf16Kernel> k) {
  using K = device::CpuBf16Kernel;
  if (k) {
    EPL_CHECK(*k == K::kRoundedF32 || *k == K::kAvx512Bf16 || *k == K::kAmx, "use_bf16_kernel: ", static_cast<int>(*k),
              " is not a CpuBf16Kernel; use kRoundedF32, kAvx512Bf16 or kAmx (or std::nullopt for the measured choice)");
    EPL_CHECK(*k != K::kAmx || bf16_kernel_runs(*k), "the AMX bf16 kernel cannot run here: ",
              !kPackedAmx ? "this program was not compiled for AVX512-BF16 (link epl::native or build with -march=native on an AMX CPU)"
              : !isa().amx_hardware           ? "this CPU has no AMX-BF16, or its OS does not enable the tile state"
                                              : concat("Linux refused the tile state (arch_prctl: ", std::strerror(isa().amx_refused),
                                                       "; a thread's alternate signal stack too small for AMX's signal frame refuses it)"));
    EPL_CHECK(*k != K::kAvx512Bf16 || bf16_kernel_runs(*k),
              "the AVX512-BF16 kernel cannot run here: this program was not compiled for AVX512-BF16 (link epl::native or build with "
              "-march=native on a CPU that has it)");
  }
  bf16_forced().store(k ? static_cast<int>(*k) : -1, std::memory_order_relaxed);
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
