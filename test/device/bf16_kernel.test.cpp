// AMP's bf16 GEMM kernels (device/cpu/bf16_kernel.hpp, sgemm_amx.hpp): each one this CPU runs,
// and AMX's driver, packing and kernel on emulated tiles on any AVX512-BF16 CPU, against a plain
// loop over the rounded operands.
#include <algorithm>
#include <cstring>
#include <optional>

#include "../helpers.hpp"
#include "epl/device/cpu/bf16_kernel.hpp"
#include "gemm_reference.hpp"

using namespace epl;
using device::CpuBf16Kernel;
using test::check_gemm;

namespace {
// Shapes that end inside every block of every kernel: the register kernels' 14 x 32 tiles, 504
// rows and 384 (768) k; AMX's 32 x 32 blocks and their 16-row halves (9, 16, 18 past a whole 32),
// 256 rows, 512 k, 1024 columns; and a C large enough to be streamed (sgemm::Store::kStream).
void check_shapes(bool ta, bool tb, const test::Multiply& multiply = {}) {
  check_gemm<float>(ta, tb, 521, 70, 1601, 0.0, DType::kBF16, multiply);
  check_gemm<float>(ta, tb, 48, 50, 33, 2.0, DType::kBF16, multiply);
  check_gemm<float>(ta, tb, 64, 64, 96, 1.0, DType::kBF16, multiply, 1.0);  // whole blocks, alpha 1: C through the tiles
  check_gemm<float>(ta, tb, 33, 2100, 40, 0.0, DType::kBF16, multiply, 1.0);  // past AMX's blocks of 1024 columns and AVX-512's of 2048
  check_gemm<float>(ta, tb, 1, 1, 1, 2.0, DType::kBF16, multiply);
  // one k block and C of sgemm::kStreamBytes or more (on one thread): C streamed past the caches,
  // rows 64-byte aligned (alpha 1) and not
  check_gemm<float>(ta, tb, 1031, 1040, 32, 0.0, DType::kBF16, multiply, 1.0);
  check_gemm<float>(ta, tb, 1031, 1041, 32, 0.0, DType::kBF16, multiply);
}

// Forces a kernel for this scope.
struct Forced {
  explicit Forced(CpuBf16Kernel k) { device::Cpu::use_bf16_kernel(k); }
  ~Forced() { device::Cpu::use_bf16_kernel(std::nullopt); }
};
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("bf16 kernels: each kernel this CPU runs equals the rounded operands' product, every transpose, 1 and 2 threads") {
  const int before = detail::cpu::threads();
  int ran = 0;
  for (CpuBf16Kernel k : {CpuBf16Kernel::kRoundedF32, CpuBf16Kernel::kAvx512Bf16, CpuBf16Kernel::kAmx}) {
    if (!detail::cpu::bf16_kernel_runs(k)) {
      MESSAGE("the ", std::string(device::name(k)), " kernel cannot run on this CPU or build: not checked here");
      continue;
    }
    ++ran;
    const Forced forced(k);
    CHECK(device::Cpu::bf16_kernel() == k);
    for (int threads : {1, 2}) {
      detail::cpu::set_threads(threads);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const std::string kernel = device::name(k);
          CAPTURE(kernel);
          CAPTURE(threads);
          CAPTURE(ta);
          CAPTURE(tb);
          check_shapes(ta, tb);
        }
    }
  }
  detail::cpu::set_threads(before);
  CHECK(ran >= 1);
}

TEST_CASE("bf16 kernels: AMX's driver, packing and kernel on emulated tiles, every transpose") {
#if defined(EPL_SGEMM_AMX)  // names EmulatedTiles, compiled only for AVX512-BF16 targets
  const auto emulated = [](const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha, double beta, DType) {
    const std::int64_t m = c.dim(0), n = c.dim(1), k = ta ? a.dim(0) : a.dim(1);
    detail::cpu::sgemm::gemm<detail::cpu::sgemm::Amx<detail::cpu::sgemm::EmulatedTiles>>(
        ta, tb, m, n, k, static_cast<float>(alpha), a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), static_cast<float>(beta),
        c.data<float>(), n);
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      check_shapes(ta, tb, emulated);
    }
  // the kernel leaves no tile configured behind it
  CHECK_THROWS_WITH_AS(detail::cpu::sgemm::EmulatedTiles::zero<0>(), doctest::Contains("tile 0 used before LDTILECFG"), Error);
#else
  MESSAGE("this build has no AVX512-BF16 (-march=native on such a CPU): AMX's packing is not compiled");
  CHECK(!detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAmx));
#endif
}

TEST_CASE("bf16 kernels: AMX where it runs, else VDPBF16PS only where it measures faster than f32 FMA") {
  const auto& choice = detail::cpu::bf16_choice();
  MESSAGE("this CPU: ", std::string(device::name(choice.kernel)), " (FMA ", choice.fma_gflops, " GFLOP/s, VDPBF16PS ", choice.dpbf16_gflops, ")");
  // a CPU whose AMX this process was refused is a failure to see, not a kernel quietly not run
  const std::string refused = std::strerror(detail::cpu::isa().amx_refused);  // INFO reads it at a failure, by reference
  INFO("Linux refused AMX's tile state: ", refused);
  CHECK(detail::cpu::isa().amx_refused == 0);
  if (detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAmx)) {
    CHECK(choice.kernel == CpuBf16Kernel::kAmx);
  } else if (detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAvx512Bf16)) {
    REQUIRE(choice.fma_gflops > 0);  // the choice was timed
    CHECK((choice.kernel == CpuBf16Kernel::kAvx512Bf16) == (choice.dpbf16_over_fma >= detail::cpu::kBf16DotMargin));
    CHECK(choice.dpbf16_over_fma > 0.1);  // both loops ran
    CHECK(choice.dpbf16_over_fma < 10);
  } else {
    CHECK(choice.kernel == CpuBf16Kernel::kRoundedF32);
  }
  CHECK(device::Cpu::bf16_kernel() == choice.kernel);
}

// The choice is timed once a process; a process that chose another kernel than its neighbour
// trained to other losses (a resumed AMP run against the run it resumed). This binary compiles at
// -O0, where the timed loops once measured memory instead of the instructions and their ratio sat
// on the margin: 20 timings here must make one choice.
TEST_CASE("bf16 kernels: the timed choice is the same every time, at -O0 too") {
  const auto first = detail::cpu::choose_bf16_kernel();
  double lo = first.dpbf16_over_fma, hi = first.dpbf16_over_fma;
  for (int i = 0; i < 20; ++i) {
    const auto again = detail::cpu::choose_bf16_kernel();
    lo = std::min(lo, again.dpbf16_over_fma), hi = std::max(hi, again.dpbf16_over_fma);
    INFO("timing ", i, ": VDPBF16PS / FMA ", again.dpbf16_over_fma, " (first ", first.dpbf16_over_fma, ")");
    CHECK(again.kernel == first.kernel);
  }
  MESSAGE("VDPBF16PS / FMA over 21 timings: ", lo, " to ", hi, " (the margin: ", detail::cpu::kBf16DotMargin, ")");
  if (detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAvx512Bf16) && !detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAmx))
    CHECK(first.fma_gflops > 0);
}

TEST_CASE("bf16 kernels: forcing one this CPU or build cannot run names what it lacks") {
  if (!detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAmx))
    CHECK_THROWS_WITH_AS(device::Cpu::use_bf16_kernel(CpuBf16Kernel::kAmx), doctest::Contains("the AMX bf16 kernel cannot run here"), Error);
  if (!detail::cpu::bf16_kernel_runs(CpuBf16Kernel::kAvx512Bf16))
    CHECK_THROWS_WITH_AS(device::Cpu::use_bf16_kernel(CpuBf16Kernel::kAvx512Bf16),
                         doctest::Contains("not compiled for AVX512-BF16 (link epl::native"), Error);
  CHECK_THROWS_WITH_AS(device::Cpu::use_bf16_kernel(static_cast<CpuBf16Kernel>(7)),
                       doctest::Contains("use_bf16_kernel: 7 is not a CpuBf16Kernel; use kRoundedF32, kAvx512Bf16 or kAmx"), Error);
  const auto chosen = device::Cpu::bf16_kernel();
  device::Cpu::use_bf16_kernel(CpuBf16Kernel::kRoundedF32);  // runs everywhere
  CHECK(device::Cpu::bf16_kernel() == CpuBf16Kernel::kRoundedF32);
  device::Cpu::use_bf16_kernel(std::nullopt);
  CHECK(device::Cpu::bf16_kernel() == chosen);
}
}
