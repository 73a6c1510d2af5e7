#pragma once
/// \file
/// \brief Single-precision GEMM for AVX-512: BLIS-style blocking with packed panels and a
/// 14 x 32 register tile (28 zmm accumulators). Eigen 3.4's AVX-512 kernel keeps a 48 x 4 tile
/// (12 accumulators) and reaches ~80% of this machine's FMA peak on a GPT's GEMM shapes; this
/// kernel exists because that gap is most of a training step's time (docs/benchmarks.md).
/// Only compiled where the target has AVX-512F; blas.hpp falls back to Eigen elsewhere.
#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace epl::detail::cpu {
inline namespace v0 {
namespace sgemm {

inline constexpr int kMR = 14, kNR = 32;
inline constexpr std::int64_t kKC = 384, kMC = 14 * 36, kNC = 4096;

/// Per-thread packing buffers, 64-byte aligned, grown on demand and reused.
struct Workspace {
  struct Free {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<float, Free> a, b;
  std::size_t a_size = 0, b_size = 0;
  static float* grow(std::unique_ptr<float, Free>& p, std::size_t& size, std::size_t want) {
    if (size < want) {
      p.reset(static_cast<float*>(std::aligned_alloc(64, (want * sizeof(float) + 63) / 64 * 64)));
      size = want;
    }
    return p.get();
  }
  static Workspace& local() {
    static thread_local Workspace w;
    return w;
  }
};

// op(A)[i0 + i, p0 + p] for i < mc, p < kc, into panels of kMR rows: panel r holds, for each p,
// the kMR values of rows r*kMR.. (zero-padded past mc).
inline void pack_a(bool ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0,
                   std::int64_t kc, float* dst) {
  for (std::int64_t ir = 0; ir < mc; ir += kMR) {
    const std::int64_t rows = std::min<std::int64_t>(kMR, mc - ir);
    float* panel = dst + ir * kc;
    if (ta) {  // A stored [k, m]: row p of the panel is contiguous in memory
      for (std::int64_t p = 0; p < kc; ++p) {
        const float* src = a + (p0 + p) * lda + i0 + ir;
        float* out = panel + p * kMR;
        std::int64_t i = 0;
        for (; i < rows; ++i) out[i] = src[i];
        for (; i < kMR; ++i) out[i] = 0.f;
      }
    } else {  // A stored [m, k]: walk each row along k
      for (std::int64_t i = 0; i < rows; ++i) {
        const float* src = a + (i0 + ir + i) * lda + p0;
        for (std::int64_t p = 0; p < kc; ++p) panel[p * kMR + i] = src[p];
      }
      for (std::int64_t i = rows; i < kMR; ++i)
        for (std::int64_t p = 0; p < kc; ++p) panel[p * kMR + i] = 0.f;
    }
  }
}

// op(B)[p0 + p, j0 + j] for p < kc, j < nc, into panels of kNR columns: panel c holds, for
// each p, the kNR values of columns c*kNR.. (zero-padded past nc).
inline void pack_b(bool tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                   std::int64_t nc, float* dst) {
  for (std::int64_t jr = 0; jr < nc; jr += kNR) {
    const std::int64_t cols = std::min<std::int64_t>(kNR, nc - jr);
    float* panel = dst + jr * kc;
    if (!tb) {  // B stored [k, n]: each p is a contiguous run of columns
      for (std::int64_t p = 0; p < kc; ++p) {
        const float* src = b + (p0 + p) * ldb + j0 + jr;
        float* out = panel + p * kNR;
        if (cols == kNR) {
          _mm512_store_ps(out, _mm512_loadu_ps(src));
          _mm512_store_ps(out + 16, _mm512_loadu_ps(src + 16));
        } else {
          std::int64_t j = 0;
          for (; j < cols; ++j) out[j] = src[j];
          for (; j < kNR; ++j) out[j] = 0.f;
        }
      }
    } else {  // B stored [n, k]: walk each column along k
      for (std::int64_t j = 0; j < cols; ++j) {
        const float* src = b + (j0 + jr + j) * ldb + p0;
        for (std::int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = src[p];
      }
      for (std::int64_t j = cols; j < kNR; ++j)
        for (std::int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = 0.f;
    }
  }
}

// C[0:mr, 0:nr] (= or +=) alpha * Apanel * Bpanel over kc. The full tile lives in registers.
inline void kernel(std::int64_t kc, const float* __restrict a, const float* __restrict b, float* c, std::int64_t ldc, int mr,
                   int nr, float alpha, bool accumulate) {
  __m512 acc[kMR][2];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMR;
    b += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (mr == kMR && nr == kNR) {
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      float* row = c + i * ldc;
      __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
      if (accumulate) {
        r0 = _mm512_add_ps(r0, _mm512_loadu_ps(row));
        r1 = _mm512_add_ps(r1, _mm512_loadu_ps(row + 16));
      }
      _mm512_storeu_ps(row, r0);
      _mm512_storeu_ps(row + 16, r1);
    }
    return;
  }
  // edge tile: masked columns, only the valid rows
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    if (i >= mr) break;
    float* row = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
    if (accumulate) {
      r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, row));
      r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, row + 16));
    }
    _mm512_mask_storeu_ps(row, m0, r0);
    _mm512_mask_storeu_ps(row + 16, m1, r1);
  }
}

/// C[m,n] = alpha op(A) op(B) + beta C on the calling thread; row-major, leading dimensions.
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (beta != 0.f && beta != 1.f)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
  if (k == 0) {
    if (beta == 0.f)
      for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.f);
    return;
  }
  auto& ws = Workspace::local();
  const std::int64_t nc_max = std::min(kNC, n), kc_max = std::min(kKC, k), mc_max = std::min(kMC, m);
  float* bp = Workspace::grow(ws.b, ws.b_size, static_cast<std::size_t>((nc_max + kNR - 1) / kNR * kNR * kc_max));
  float* ap = Workspace::grow(ws.a, ws.a_size, static_cast<std::size_t>((mc_max + kMR - 1) / kMR * kMR * kc_max));
  for (std::int64_t jc = 0; jc < n; jc += kNC) {
    const std::int64_t nc = std::min(kNC, n - jc);
    for (std::int64_t pc = 0; pc < k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, k - pc);
      const bool accumulate = pc > 0 || beta != 0.f;  // the first k block overwrites C when beta == 0
      pack_b(tb, b, ldb, pc, kc, jc, nc, bp);
      for (std::int64_t ic = 0; ic < m; ic += kMC) {
        const std::int64_t mc = std::min(kMC, m - ic);
        pack_a(ta, a, lda, ic, mc, pc, kc, ap);
        for (std::int64_t jr = 0; jr < nc; jr += kNR)
          for (std::int64_t ir = 0; ir < mc; ir += kMR)
            kernel(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc,
                   static_cast<int>(std::min<std::int64_t>(kMR, mc - ir)), static_cast<int>(std::min<std::int64_t>(kNR, nc - jr)),
                   alpha, accumulate);
      }
    }
  }
}

}  // namespace sgemm
}  // namespace v0
}  // namespace epl::detail::cpu
#endif
