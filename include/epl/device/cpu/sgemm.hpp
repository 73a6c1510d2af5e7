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
#include <span>

#include "epl/core/memory.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {
namespace sgemm {

/// Lanes every packed block has past its end, for a format's whole-vector stores (sgemm_avx2.hpp).
inline constexpr std::int64_t kSlack = 16;

/// Orders the non-temporal stores before it with every store after it (SFENCE).
inline void store_fence() {
#if defined(__SSE__)
  __builtin_ia32_sfence();
#endif
}

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

/// Whether a format walks a packed block's kernel calls a row of C's panels at a time (its op(A)
/// panel held in L1 while op(B)'s panels stream from L2) rather than BLIS's column at a time (op(B)'s
/// panel in L1). AMX's tiles take the first: a 2048 x 4096 x 384 product's kernels ran at 43% of the
/// TDPBF16PS peak against 25%, and the f32 kernel the second (74% of the FMA peak against 61%;
/// bench_gemm --parts, Sapphire Rapids, #39).
template <class Fmt>
inline constexpr bool kRowsFirst = requires { requires Fmt::kRowsFirst; };

/// kernel(ir, jr) for each panel of a packed block of C (mc rows by nc columns), in Fmt's order.
template <class Fmt, class Kernel>
inline void for_each_panel(std::int64_t mc, std::int64_t nc, Kernel&& kernel) {
  if constexpr (kRowsFirst<Fmt>) {
    for (std::int64_t ir = 0; ir < mc; ir += Fmt::kMR)
      for (std::int64_t jr = 0; jr < nc; jr += Fmt::kNR) kernel(ir, jr);
  } else {
    for (std::int64_t jr = 0; jr < nc; jr += Fmt::kNR)
      for (std::int64_t ir = 0; ir < mc; ir += Fmt::kMR) kernel(ir, jr);
  }
}

/// How a kernel call writes its block of C: over it, added to it (a later k block, or beta 1), or
/// over it with non-temporal stores, which write whole cache lines to memory without first reading
/// them for ownership. The driver streams C when its one k block is all a GEMM multiplies (C is not
/// read again) and C is at least kStreamBytes, too large to stay in a core's cache. On Sapphire
/// Rapids, one thread, that took gpt-mini's lm head from 76-81% to 85-87% of the FMA peak and its
/// qkv product from 79-87% to 86-90% (bench_gemm --parts); streaming a C that a later k block reads
/// back measured 3-6% slower (#39). Only the AVX-512 register tiles stream. AMX's tiles write
/// kStream as kOverwrite: streamed through a block on the stack, its lm head ran 10% faster alone
/// but gpt-mini's AMP steps no faster (the next op then reads C from memory); the AVX2 kernel too
/// (unmeasured on its CPUs).
enum class Store { kOverwrite, kAdd, kStream };
inline constexpr std::int64_t kStreamBytes = std::int64_t{4} << 20;

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
  bool streamed = false;
  for (std::int64_t jc = 0; jc < n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, n - jc);
    for (std::int64_t pc = 0; pc < k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, k - pc), steps = (kc + kPer - 1) / kPer;
      // the first k block overwrites C when beta == 0; streamed when it is the only one and C is large
      const Store store = pc > 0 || beta != 0.f ? Store::kAdd : k <= kKC && m * n * 4 >= kStreamBytes ? Store::kStream : Store::kOverwrite;
      streamed = streamed || store == Store::kStream;
      Clock::time_point since = parts ? Clock::now() : Clock::time_point{};
      Fmt::pack_b(tb, b, ldb, pc, kc, jc, nc, bp);
      mark(&Parts::pack_b, since);
      for (std::int64_t ic = 0; ic < m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, m - ic);
        Fmt::pack_a(ta, a, lda, ic, mc, pc, kc, ap);
        mark(&Parts::pack_a, since);
        for_each_panel<Fmt>(mc, nc, [&](std::int64_t ir, std::int64_t jr) {
          Fmt::kernel(steps, ap + ir * steps * kLanes, bp + jr * steps * kLanes, c + (ic + ir) * ldc + jc + jr, ldc,
                      static_cast<int>(std::min<std::int64_t>(kMR, mc - ir)), static_cast<int>(std::min<std::int64_t>(kNR, nc - jr)),
                      alpha, store);
        });
        mark(&Parts::kernels, since);
      }
    }
  }
  if (streamed) store_fence();  // non-temporal stores are weakly ordered: done before C is read elsewhere
}

/// Rows [r0, r1) of a product's C, over op(A)'s columns and op(B)'s rows [k0, k1), into C's
/// columns [0, n1): one block of a causal product (gemm_batched's device::Triangle).
struct RowBlock {
  std::int64_t r0, r1, k0, k1, n1;
};

/// gemm() of several row blocks of one product (C[m, n] = alpha op(A) op(B) + beta C), sharing
/// op(B): it is packed once for all of them, where it fits one packed block (k <= kKC, n <= kNC),
/// each block's rows fit one (r1 - r0 <= kMC) and its k0 and k1 bound whole steps of the format
/// (k1 may be k); a block then multiplies a run of each packed panel's steps. Each entry sums the
/// same products in the same order as the block's own gemm() would. Otherwise each block is its
/// own gemm(). Causal attention's blocks of 64 rows over 256 columns packed op(B) four times over,
/// a quarter of q k^T's time (sgemm::Parts of one head's products).
template <class Fmt>
inline void gemm_row_blocks(bool ta, bool tb, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t lda,
                            const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc, std::span<const RowBlock> blocks) {
  using Lane = typename Fmt::Lane;
  constexpr std::int64_t kPer = Fmt::kPerStep, kMR = Fmt::kMR, kNR = Fmt::kNR, kLanes = Fmt::kLanes;
  auto alone = [&](const RowBlock& r) {
    gemm<Fmt>(ta, tb, r.r1 - r.r0, r.n1, r.k1 - r.k0, alpha, ta ? a + r.k0 * lda + r.r0 : a + r.r0 * lda + r.k0, lda,
              tb ? b + r.k0 : b + r.k0 * ldb, ldb, beta, c + r.r0 * ldc, ldc);
  };
  auto fits = [&](const RowBlock& r) {
    const bool whole_steps = r.k0 % kPer == 0 && (r.k1 % kPer == 0 || r.k1 == k);
    return r.r1 - r.r0 <= Fmt::kMC && whole_steps && r.k0 <= r.k1 && r.k1 <= k && r.n1 <= n;
  };
  const bool shared = blocks.size() > 1 && k > 0 && k <= Fmt::kKC && n <= Fmt::kNC && std::all_of(blocks.begin(), blocks.end(), fits);
  if (!shared) {
    for (const RowBlock& r : blocks) alone(r);
    return;
  }
  std::int64_t rows_max = 0;
  for (const RowBlock& r : blocks) rows_max = std::max(rows_max, r.r1 - r.r0);
  auto& ws = Workspace::local();
  const std::int64_t steps_all = (k + kPer - 1) / kPer;
  Lane* bp = Workspace::grow<Lane>(ws.b, ws.b_size, static_cast<std::size_t>((n + kNR - 1) / kNR * kNR * steps_all * kLanes + kSlack));
  const auto a_lanes = (rows_max + kMR - 1) / kMR * kMR * steps_all * kLanes + kSlack;
  Lane* ap = Workspace::grow<Lane>(ws.a, ws.a_size, static_cast<std::size_t>(a_lanes));
  [[maybe_unused]] typename Fmt::Session session;
  Fmt::pack_b(tb, b, ldb, 0, k, 0, n, bp);
  for (const RowBlock& r : blocks) {
    const std::int64_t mc = r.r1 - r.r0, kc = r.k1 - r.k0, steps = (kc + kPer - 1) / kPer;
    if (mc <= 0 || r.n1 <= 0) continue;
    if (kc == 0) {  // nothing to multiply: gemm() leaves or clears C as beta says
      alone(r);
      continue;
    }
    if (beta != 0.f && beta != 1.f)
      for (std::int64_t i = r.r0; i < r.r1; ++i)
        for (std::int64_t j = 0; j < r.n1; ++j) c[i * ldc + j] *= beta;
    Fmt::pack_a(ta, a, lda, r.r0, mc, r.k0, kc, ap);
    const Lane* b_from = bp + r.k0 / kPer * kNR * kLanes;  // each panel's steps from k0 on
    for_each_panel<Fmt>(mc, r.n1, [&](std::int64_t ir, std::int64_t jr) {
      Fmt::kernel(steps, ap + ir * steps * kLanes, b_from + jr * steps_all * kLanes, c + (r.r0 + ir) * ldc + jr, ldc,
                  static_cast<int>(std::min<std::int64_t>(kMR, mc - ir)), static_cast<int>(std::min<std::int64_t>(kNR, r.n1 - jr)),
                  alpha, beta != 0.f ? Store::kAdd : Store::kOverwrite);
    });
  }
}

}  // namespace sgemm
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
