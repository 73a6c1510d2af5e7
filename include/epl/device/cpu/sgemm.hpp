#pragma once
/// \file
/// \brief The driver every packed f32 GEMM format shares (sgemm_avx512.hpp's register tiles and
/// bf16 pairs, sgemm_amx.hpp's tiles, sgemm_avx2.hpp's 6 x 16 tile): BLIS's loops around a
/// format's kernel, with op(B) packed once per block of columns and k, op(A) once per block of
/// rows, into per-thread buffers. It names no instruction set; a format brings its own.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "epl/core/memory.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {
namespace sgemm {

/// Lanes every packed block has past its end, for a format's whole-vector stores (sgemm_avx2.hpp).
inline constexpr std::int64_t kSlack = 16;

/// Per-thread packing buffers, grown on demand and reused, from detail::host_bytes (huge pages
/// for a block of op(B)). Every format packs 4-byte lanes (a float, or a pair of bf16), counted
/// in `want` lanes.
struct Workspace {
  struct Free {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<void, Free> a, b;
  std::size_t a_size = 0, b_size = 0;
  template <class Lane>
  static Lane* grow(std::unique_ptr<void, Free>& p, std::size_t& size, std::size_t want) {
    static_assert(sizeof(Lane) == 4);
    if (size < want) {
      p.reset(epl::detail::host_bytes(want * sizeof(Lane)));
      if (!p) throw std::bad_alloc();
      size = want;
    }
    return static_cast<Lane*>(p.get());
  }
  static Workspace& local() {
    static thread_local Workspace w;
    return w;
  }
};

/// Seconds a GEMM spent in each part, added up when gemm() is given one (bench_gemm --parts).
struct Parts {
  double pack_b = 0, pack_a = 0, kernels = 0;
};

/// C[m,n] = alpha op(A) op(B) + beta C on the calling thread; row-major, leading dimensions;
/// op(A) and op(B) packed in the format Fmt, which says its blocks (kMR x kNR of C a kernel call,
/// kMC rows, kKC k and kNC columns a packed block; kPerStep k and kLanes lanes a step), how it packs
/// (pack_a, pack_b) and its kernel. `parts`, when given, gets each part's time added.
template <class Fmt>
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc, Parts* parts = nullptr) {
  using Clock = std::chrono::steady_clock;
  auto mark = [&](double Parts::*part, Clock::time_point& since) {
    if (!parts) return;
    const auto now = Clock::now();
    parts->*part += std::chrono::duration<double>(now - since).count();
    since = now;
  };
  using Lane = typename Fmt::Lane;
  if (m == 0 || n == 0) return;
  if (beta != 0.f && beta != 1.f)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
  if (k == 0) {
    if (beta == 0.f)
      for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.f);
    return;
  }
  constexpr std::int64_t kKC = Fmt::kKC, kPer = Fmt::kPerStep, kMR = Fmt::kMR, kNR = Fmt::kNR, kMC = Fmt::kMC, kNC = Fmt::kNC;
  constexpr std::int64_t kLanes = Fmt::kLanes;
  auto& ws = Workspace::local();
  const std::int64_t nc_max = std::min(kNC, n), steps_max = (std::min(kKC, k) + kPer - 1) / kPer, mc_max = std::min(kMC, m);
  // kSlack lanes past each block: a format may store a whole vector past a panel's last lanes
  Lane* bp = Workspace::grow<Lane>(ws.b, ws.b_size, static_cast<std::size_t>((nc_max + kNR - 1) / kNR * kNR * steps_max * kLanes + kSlack));
  Lane* ap = Workspace::grow<Lane>(ws.a, ws.a_size, static_cast<std::size_t>((mc_max + kMR - 1) / kMR * kMR * steps_max * kLanes + kSlack));
  [[maybe_unused]] typename Fmt::Session session;
  for (std::int64_t jc = 0; jc < n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, n - jc);
    for (std::int64_t pc = 0; pc < k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, k - pc), steps = (kc + kPer - 1) / kPer;
      const bool accumulate = pc > 0 || beta != 0.f;  // the first k block overwrites C when beta == 0
      Clock::time_point since = parts ? Clock::now() : Clock::time_point{};
      Fmt::pack_b(tb, b, ldb, pc, kc, jc, nc, bp);
      mark(&Parts::pack_b, since);
      for (std::int64_t ic = 0; ic < m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, m - ic);
        Fmt::pack_a(ta, a, lda, ic, mc, pc, kc, ap);
        mark(&Parts::pack_a, since);
        for (std::int64_t jr = 0; jr < nc; jr += kNR)
          for (std::int64_t ir = 0; ir < mc; ir += kMR)
            Fmt::kernel(steps, ap + ir * steps * kLanes, bp + jr * steps * kLanes, c + (ic + ir) * ldc + jc + jr, ldc,
                        static_cast<int>(std::min<std::int64_t>(kMR, mc - ir)), static_cast<int>(std::min<std::int64_t>(kNR, nc - jr)),
                        alpha, accumulate);
        mark(&Parts::kernels, since);
      }
    }
  }
}

}  // namespace sgemm
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
