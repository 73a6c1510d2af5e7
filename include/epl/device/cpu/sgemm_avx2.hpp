#pragma once
/// \file
/// \brief f32 GEMM for AVX2 with FMA3 (and F16C, x86-64-v3): sgemm.hpp's packed blocks around a
/// 6 x 16 register tile, 12 ymm accumulators, the two columns' vectors and one broadcast row
/// value in the 16 registers AVX2 has (BLIS's Haswell shape). Before it, an AVX2 target (AMD
/// Zen 3) multiplied through Eigen's product at 44% of its FMA peak (#39). Packing transposes
/// 8 x 8 blocks in registers, and for AMP rounds op(A) and op(B) to bf16 or f16 as it packs them,
/// as sgemm_avx512.hpp's F32 format does, so AMP costs what f32 does on a CPU without a faster
/// bf16 product. Compiled wherever the target has AVX2, FMA and F16C (also beside AVX-512, where
/// the tests check it); blas.hpp uses it where AVX-512 is not compiled.
#include "epl/device/cpu/sgemm.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace epl {
inline namespace v0 {
namespace detail::cpu {
namespace sgemm::avx2 {

/// The lanes i < count of 8 as an AVX2 load/store mask (count <= 0: none).
inline __m256i first_lanes(std::int64_t count) {
  const int n = static_cast<int>(std::clamp<std::int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// What packing does to each f32 operand: keep it, or round it to the nearest bf16 or f16
/// (nearest even; NaN stays NaN, with its sign), as sgemm_avx512.hpp's do on 16 lanes.
struct Keep {
  static __m256 apply(__m256 x) { return x; }
};
struct RoundBF16 {
  static __m256 apply(__m256 x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i nearest = _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                                             _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    const __m256i nan = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(static_cast<int>(0x80000000u))),
                                        _mm256_set1_epi32(0x7fc00000));
    return _mm256_blendv_ps(_mm256_castsi256_ps(nearest), _mm256_castsi256_ps(nan), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
};
struct RoundF16 {
  static __m256 apply(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
};

// Transposes the 8 x 8 block r (r[i] = row i) in registers, so that r[j] holds column j: pairs of
// rows interleaved, then pairs of pairs within 128-bit halves, then the halves swapped.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  // s[4g + c], half h: rows 4g..4g+3 of column c + 4h
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {
    s[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    s[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    s[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    s[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
}

// Copies the [rows, kc] block at src (rows <= 8 strided by ld, the rest zero) transposed:
// dst[p * stride + i] = src[i * ld + p] for i < 8, p < kc, whole vectors: with stride 6 (A's
// panels) lanes 6 and 7 land on the next column's first two, stored next, or past the block's
// end, into the workspace's slack (sgemm.hpp). AMD's Zen runs a masked store (VMASKMOVPS) as
// microcode, tens of cycles, so packing stores whole vectors.
template <class Round>
inline void pack_transposed(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t kc, float* dst, std::int64_t stride) {
  __m256 r[8];
  for (std::int64_t p = 0; p < kc; p += 8) {
    const std::int64_t w = std::min<std::int64_t>(8, kc - p);
    const __m256i cols = first_lanes(w);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      r[i] = i >= rows ? _mm256_setzero_ps()
                       : Round::apply(w == 8 ? _mm256_loadu_ps(src + i * ld + p) : _mm256_maskload_ps(src + i * ld + p, cols));
    transpose8(r);
    for (std::int64_t j = 0; j < w; ++j) _mm256_storeu_ps(dst + (p + j) * stride, r[j]);
  }
}

// Copies rows p < kc of the [kc, width] block at src (rows ld apart) into panels of kPanel
// columns, kc * kPanel floats apart: dst[(j / kPanel) * kc * kPanel + p * kPanel + j % kPanel],
// zero past width. The panels are 6 or 16 KiB apart at kc = 256, so they share one or two sets
// of the L1. A 16-wide panel's row is a whole line: each row of src is walked once, front to
// back. A 6-wide panel's row is not, and storing it to each panel in turn evicted the line the
// last row left half written (on Zen 3, packing A took 7-8% of mlp dW's GEMM, 5% after): eight
// rows go to a panel before the next panel's, filling its lines whole. A 6-wide panel's row is
// stored as a whole vector, its last two lanes on the next row's first two (stored next, or in
// the next eight rows' pass), but for the panel's last row, whose overrun would land on the next
// panel.
template <int kPanel, class Round>
inline void pack_rows(const float* src, std::int64_t ld, std::int64_t width, std::int64_t kc, float* dst) {
  constexpr std::int64_t kRows = kPanel * sizeof(float) < 64 ? 8 : 1;  // rows a panel gets at a time
  for (std::int64_t p0 = 0; p0 < kc; p0 += kRows) {
    const std::int64_t rows = std::min(kRows, kc - p0);
    float* panel = dst + p0 * kPanel;
    for (std::int64_t j = 0; j < width; j += kPanel, panel += kc * kPanel)
      for (std::int64_t p = 0; p < rows; ++p) {
        const float* row = src + (p0 + p) * ld + j;
        float* out = panel + p * kPanel;
        const bool last = p0 + p + 1 == kc;
        for (int h = 0; h < kPanel; h += 8) {
          const std::int64_t left = width - j - h;
          const __m256 v = Round::apply(left >= 8 ? _mm256_loadu_ps(row + h) : _mm256_maskload_ps(row + h, first_lanes(left)));
          if (kPanel - h >= 8 || !last) _mm256_storeu_ps(out + h, v);
          else _mm256_maskstore_ps(out + h, first_lanes(kPanel - h), v);
        }
      }
  }
}

/// The f32 format: a 6 x 16 block of C in 12 ymm registers, a lane one float, a step one k; each
/// operand passes through Round as it is packed. Blocks as BLIS's Haswell sgemm: 256 k keep a
/// step's A and B panels (6 + 16 floats a k, 22 KiB) in a 32 KiB L1, 168 rows of A in L2.
template <class Round = Keep>
struct F32 {
  using Lane = float;
  static constexpr int kMR = 6, kNR = 16;
  static constexpr std::int64_t kPerStep = 1, kLanes = 1, kKC = 256, kMC = 6 * 28, kNC = 4080;
  struct Session {};  // nothing to set up around a GEMM's kernels

  // op(A)[i0 + i, p0 + p] for i < mc, p < kc, into panels of kMR rows (zero-padded past mc).
  static void pack_a(bool ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0, std::int64_t kc,
                     float* dst) {
    if (ta)  // A stored [k, m]: each p is a contiguous run of rows
      return pack_rows<kMR, Round>(a + p0 * lda + i0, lda, mc, kc, dst);
    for (std::int64_t ir = 0; ir < mc; ir += kMR)  // A stored [m, k]: transpose 8 x 8 blocks
      pack_transposed<Round>(a + (i0 + ir) * lda + p0, lda, std::min<std::int64_t>(kMR, mc - ir), kc, dst + ir * kc, kMR);
  }
  // op(B)[p0 + p, j0 + j] for p < kc, j < nc, into panels of kNR columns (zero-padded past nc).
  static void pack_b(bool tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0, std::int64_t nc,
                     float* dst) {
    if (!tb)  // B stored [k, n]: each p is a contiguous run of columns
      return pack_rows<kNR, Round>(b + p0 * ldb + j0, ldb, nc, kc, dst);
    for (std::int64_t jr = 0; jr < nc; jr += kNR)  // B stored [n, k]: transpose 8 x 8 blocks
      for (std::int64_t h = 0; h < kNR; h += 8)
        pack_transposed<Round>(b + (j0 + jr + h) * ldb + p0, ldb, std::clamp<std::int64_t>(nc - jr - h, 0, 8), kc, dst + jr * kc + h,
                               kNR);
  }

  // C[0:mr, 0:nr] (= or +=) alpha * Apanel * Bpanel over `steps` steps.
  template <class L>
  static void kernel(std::int64_t steps, const L* __restrict a, const L* __restrict b, float* c, std::int64_t ldc, int mr, int nr,
                     float alpha, Store store) {
    const bool accumulate = store == Store::kAdd;  // kStream: written as kOverwrite
    __m256 acc[kMR][2];
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    auto step = [&] {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
      for (int i = 0; i < kMR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i);
        acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      }
      a += kMR;
      b += kNR;
    };
    // the tile of C is usually a cache miss: fetch a row for writing each of the first steps
    std::int64_t p = 0;
    for (; p < steps && p < mr; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(c + p * ldc), _MM_HINT_ET0);
      _mm_prefetch(reinterpret_cast<const char*>(c + p * ldc + nr - 1), _MM_HINT_ET0);
      step();
    }
    for (; p < steps; ++p) step();
    const __m256 va = _mm256_set1_ps(alpha);
    if (mr == kMR && nr == kNR) {
#pragma GCC unroll 6
      for (int i = 0; i < kMR; ++i) {
        float* row = c + i * ldc;
        __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
        if (accumulate) {
          r0 = _mm256_add_ps(r0, _mm256_loadu_ps(row));
          r1 = _mm256_add_ps(r1, _mm256_loadu_ps(row + 8));
        }
        _mm256_storeu_ps(row, r0);
        _mm256_storeu_ps(row + 8, r1);
      }
      return;
    }
    // edge tile: masked columns, only the valid rows
    const __m256i m0 = first_lanes(nr), m1 = first_lanes(nr - 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      if (i >= mr) break;
      float* row = c + i * ldc;
      __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
      if (accumulate) {
        r0 = _mm256_add_ps(r0, _mm256_maskload_ps(row, m0));
        r1 = _mm256_add_ps(r1, _mm256_maskload_ps(row + 8, m1));
      }
      _mm256_maskstore_ps(row, m0, r0);
      _mm256_maskstore_ps(row + 8, m1, r1);
    }
  }
};

}  // namespace sgemm::avx2
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
#define EPL_SGEMM_AVX2 1  // the AVX2 format is compiled (others name it only then)
#endif
