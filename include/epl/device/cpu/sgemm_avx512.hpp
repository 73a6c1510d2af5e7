#pragma once
/// \file
/// \brief f32 GEMM for AVX-512: BLIS-style blocking with packed panels and a 14 x 32 register
/// tile (28 zmm accumulators). Eigen 3.4's AVX-512 kernel keeps a 48 x 4 tile (12 accumulators)
/// and reaches 50-75% of this machine's FMA peak on a GPT's GEMM shapes, this one 66-83%
/// (bench_gemm, one and two threads); GEMMs are three quarters of a training step
/// (docs/benchmarks.md). Packing transposes 16 x 16 blocks in registers.
///
/// One driver serves every packed format: F32 (one k per step, FMA; for AMP it rounds op(A) and
/// op(B) to bf16 or f16 as it packs them, so a CPU without a faster bf16 product pays nothing for
/// the rounding), where the target has AVX512-BF16 the BF16 format (packing rounds to bf16 and
/// stores pairs of consecutive k as one 32-bit lane; each step's VDPBF16PS multiplies two k at
/// once into f32 accumulators, twice the f32 kernel's products per instruction; it treats
/// subnormal inputs and results as zero), and AMX's tiles (sgemm_amx.hpp). A format says its
/// register or tile block (kMR x kNR of C), its cache blocks, how it packs, and its kernel.
/// Only compiled where the target has AVX-512F (BW for BF16's packing); blas.hpp takes
/// sgemm_avx2.hpp's kernel on an AVX2 target, and Eigen's elsewhere. The driver is sgemm.hpp's.
#include "epl/device/cpu/sgemm.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace epl {
inline namespace v0 {
namespace detail::cpu {
namespace sgemm {

inline constexpr int kMR = 14, kNR = 32;
// kNC: a packed B block of 3 MiB at k 384; 4096 (6 MiB) measured 3-6% slower on the lm head (docs/benchmarks.md)
inline constexpr std::int64_t kMC = 14 * 36, kNC = 2048;

// Transposes the 16 x 16 block r (r[i] = row i) in registers, so that r[j] holds column j:
// 32-bit then 64-bit interleaves within 128-bit lanes, then two rounds of lane shuffles.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + c], lane L: rows 4g..4g+3 of column 4L + c
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v02 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v13 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 w02 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w13 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v02, w02, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v02, w02, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(v13, w13, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v13, w13, 0xDD);
  }
}

// The mask of the first count lanes of 16 (count <= 0: none).
constexpr __mmask16 first_lanes(std::int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : count <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << count) - 1);
}

/// What packing does to each f32 operand: keep it, or round it to the nearest bf16 or f16
/// (nearest even; NaN stays NaN, as round_through gives) for AMP's products.
struct Keep {
  static __m512 apply(__m512 x) { return x; }
};
struct RoundBF16 {
  static __m512 apply(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i nearest = _mm512_and_si512(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                                             _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    const __m512i nan = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(static_cast<int>(0x80000000u))),
                                        _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(nearest, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), nan));
  }
};
struct RoundF16 {
  static __m512 apply(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
};

// Copies the [rows, kc] block at src (rows <= 16 strided by ld, the rest zero) transposed:
// dst[p * stride + i] = src[i * ld + p] for i < lanes, p < kc.
template <class Round>
inline void pack_transposed(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t kc, float* dst,
                            std::int64_t stride, __mmask16 lanes) {
  __m512 r[16];
  for (std::int64_t p = 0; p < kc; p += 16) {
    const std::int64_t w = std::min<std::int64_t>(16, kc - p);
    const __mmask16 cols = first_lanes(w);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? Round::apply(_mm512_maskz_loadu_ps(cols, src + i * ld + p)) : _mm512_setzero_ps();
    transpose16(r);
    if (w == 16) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + (p + j) * stride, lanes, r[j]);
    } else {
      for (std::int64_t j = 0; j < w; ++j) _mm512_mask_storeu_ps(dst + (p + j) * stride, lanes, r[j]);
    }
  }
}

// Copies rows p < kc of the [kc, width] block at src (rows ld apart) into panels of `panel`
// columns, kc * panel floats apart: dst[(j / panel) * kc * panel + p * panel + j % panel],
// zero past width. Walks each source row once, front to back, for the hardware prefetcher:
// the source rows are often far apart (a weight gradient's rows are a whole activation row).
template <int kPanel, class Round>
inline void pack_rows(const float* src, std::int64_t ld, std::int64_t width, std::int64_t kc, float* dst) {
  constexpr __mmask16 kLanes = first_lanes(kPanel);
  for (std::int64_t p = 0; p < kc; ++p) {
    const float* row = src + p * ld;
    float* out = dst + p * kPanel;
    for (std::int64_t j = 0; j < width; j += kPanel, out += kc * kPanel)
      for (int h = 0; h < kPanel; h += 16) {
        const __mmask16 valid = first_lanes(width - j - h) & kLanes;
        _mm512_mask_storeu_ps(out + h, kLanes, Round::apply(_mm512_maskz_loadu_ps(valid, row + j + h)));
      }
  }
}

/// The kernels that keep a kMR x kNR block of C in 28 zmm registers (F32, BF16): Fmt::step
/// multiplies one step of the packed panels into them.
template <class Fmt>
struct RegisterTile {
  static constexpr int kMR = sgemm::kMR, kNR = sgemm::kNR;
  static constexpr std::int64_t kMC = sgemm::kMC, kNC = sgemm::kNC;
  static constexpr std::int64_t kLanes = 1;  // lanes a row of A (a column of B) fills per step
  struct Session {};                         // nothing to set up around a GEMM's kernels

  // C[0:mr, 0:nr] (=, += or = streamed past the caches: Store) alpha * Apanel * Bpanel over `steps`
  // steps of the format.
  template <class Lane>
  static void kernel(std::int64_t steps, const Lane* __restrict a, const Lane* __restrict b, float* c, std::int64_t ldc, int mr,
                     int nr, float alpha, Store store) {
    const bool accumulate = store == Store::kAdd;
    __m512 acc[kMR][2];
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    auto step = [&] {
      Fmt::step(acc, a, b);
      a += kMR;
      b += kNR;
    };
    // The tile of C is usually a cache miss (rows ldc apart, in memory): fetch it for writing
    // one row a step while the first steps run, so it arrives before the stores (unless it is
    // streamed: then its lines are written whole, never read).
    std::int64_t p = 0;
    for (; store != Store::kStream && p < steps && p < mr; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(c + p * ldc), _MM_HINT_ET0);
      _mm_prefetch(reinterpret_cast<const char*>(c + p * ldc + nr - 1), _MM_HINT_ET0);
      step();
    }
    for (; p < steps; ++p) step();
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
        if (store == Store::kStream && reinterpret_cast<std::uintptr_t>(row) % 64 == 0) {  // two whole lines
          _mm512_stream_ps(row, r0);
          _mm512_stream_ps(row + 16, r1);
        } else {
          _mm512_storeu_ps(row, r0);
          _mm512_storeu_ps(row + 16, r1);
        }
      }
      return;
    }
    // edge tile: masked columns, only the valid rows
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16);
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
};

/// The f32 format: a lane is one float, a step one k; each operand passes through Round as it is
/// packed.
template <class Round = Keep>
struct F32 : RegisterTile<F32<Round>> {
  using Lane = float;
  static constexpr std::int64_t kPerStep = 1, kKC = 384;

  // op(A)[i0 + i, p0 + p] for i < mc, p < kc, into panels of kMR rows: panel r holds, for each
  // p, the kMR values of rows r*kMR.. (zero-padded past mc).
  static void pack_a(bool ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0,
                     std::int64_t kc, float* dst) {
    if (ta)  // A stored [k, m]: each p is a contiguous run of rows
      return pack_rows<kMR, Round>(a + p0 * lda + i0, lda, mc, kc, dst);
    for (std::int64_t ir = 0; ir < mc; ir += kMR)  // A stored [m, k]: transpose 16 x 16 blocks
      pack_transposed<Round>(a + (i0 + ir) * lda + p0, lda, std::min<std::int64_t>(kMR, mc - ir), kc, dst + ir * kc, kMR,
                             first_lanes(kMR));
  }
  // op(B)[p0 + p, j0 + j] for p < kc, j < nc, into panels of kNR columns: panel c holds, for
  // each p, the kNR values of columns c*kNR.. (zero-padded past nc).
  static void pack_b(bool tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                     std::int64_t nc, float* dst) {
    if (!tb)  // B stored [k, n]: each p is a contiguous run of columns
      return pack_rows<kNR, Round>(b + p0 * ldb + j0, ldb, nc, kc, dst);
    for (std::int64_t jr = 0; jr < nc; jr += kNR)  // B stored [n, k]: transpose 16 x 16 blocks
      for (std::int64_t h = 0; h < kNR; h += 16)
        pack_transposed<Round>(b + (j0 + jr + h) * ldb + p0, ldb, std::clamp<std::int64_t>(nc - jr - h, 0, 16), kc,
                               dst + jr * kc + h, kNR, 0xFFFF);
  }
  // acc[i][h] += a[i] * b[16h..16h+15] for the kMR rows of one step
  [[gnu::always_inline]] static void step(__m512 (&acc)[kMR][2], const float* __restrict a, const float* __restrict b) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
};

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
/// The bf16 format (AMP): a lane is a pair of bf16, op(X)[., 2q] in its low half and
/// op(X)[., 2q + 1] in its high half (zero past k); a step is two k.
struct BF16 : RegisterTile<BF16> {
  using Lane = std::uint32_t;
  static constexpr std::int64_t kPerStep = 2, kKC = 768;  // the f32 format's panel bytes

  // 32 floats rounded to bf16, as 16 pairs: lane i = (lo[i], hi[i]) for two rows of k, or
  // lane i = (x[2i], x[2i + 1]) for one run of k (lo = x[0..15], hi = x[16..31]).
  static __m512i pairs_across(__m512 lo, __m512 hi) {
    // cvtne2ps puts lo's 16 bf16 in the low half and hi's in the high half; interleave them
    const __m512i halves = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                           20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(order, halves);
  }
  static __m512 pairs_along(__m512 lo, __m512 hi) {
    return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));  // already in k order
  }

  // Rows i < rows (<= 16, ld apart, the rest zero) run along k: dst[q * stride + i] = the pair q
  // of row i for q < ceil(kc / 2), i < lanes. Converts 16 x 32 floats, then transposes 16 x 16 pairs.
  static void pack_along(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t kc, Lane* dst, std::int64_t stride,
                         __mmask16 lanes) {
    __m512 r[16];
    for (std::int64_t p = 0; p < kc; p += 32) {
      const __mmask16 lo = first_lanes(kc - p), hi = first_lanes(kc - p - 16);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? pairs_along(_mm512_maskz_loadu_ps(lo, src + i * ld + p), _mm512_maskz_loadu_ps(hi, src + i * ld + p + 16))
                        : _mm512_setzero_ps();
      transpose16(r);
      const std::int64_t q0 = p / 2, pairs = std::min<std::int64_t>(16, (kc - p + 1) / 2);
      for (std::int64_t j = 0; j < pairs; ++j) _mm512_mask_storeu_ps(dst + (q0 + j) * stride, lanes, r[j]);
    }
  }
  // Rows p < kc of the [kc, width] block at src (rows ld apart) hold k: rows 2q and 2q + 1 make
  // pair q, into panels of kPanel columns: dst[(j / kPanel) * ceil(kc / 2) * kPanel + q * kPanel + j % kPanel].
  template <int kPanel>
  static void pack_across(const float* src, std::int64_t ld, std::int64_t width, std::int64_t kc, Lane* dst) {
    constexpr __mmask16 kLanes = first_lanes(kPanel);
    const std::int64_t steps = (kc + 1) / 2;
    for (std::int64_t q = 0; q < steps; ++q) {
      const float* even = src + 2 * q * ld;
      const float* odd = 2 * q + 1 < kc ? even + ld : nullptr;
      Lane* out = dst + q * kPanel;
      for (std::int64_t j = 0; j < width; j += kPanel, out += steps * kPanel)
        for (int h = 0; h < kPanel; h += 16) {
          const __mmask16 valid = first_lanes(width - j - h) & kLanes;
          const __m512 lo = _mm512_maskz_loadu_ps(valid, even + j + h);
          const __m512 hi = odd ? _mm512_maskz_loadu_ps(valid, odd + j + h) : _mm512_setzero_ps();
          _mm512_mask_storeu_epi32(out + h, kLanes, pairs_across(lo, hi));
        }
    }
  }
  static void pack_a(bool ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0,
                     std::int64_t kc, Lane* dst) {
    const std::int64_t steps = (kc + 1) / 2;
    if (ta) return pack_across<kMR>(a + p0 * lda + i0, lda, mc, kc, dst);
    for (std::int64_t ir = 0; ir < mc; ir += kMR)
      pack_along(a + (i0 + ir) * lda + p0, lda, std::min<std::int64_t>(kMR, mc - ir), kc, dst + ir * steps, kMR, first_lanes(kMR));
  }
  static void pack_b(bool tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                     std::int64_t nc, Lane* dst) {
    const std::int64_t steps = (kc + 1) / 2;
    if (!tb) return pack_across<kNR>(b + p0 * ldb + j0, ldb, nc, kc, dst);
    for (std::int64_t jr = 0; jr < nc; jr += kNR)
      for (std::int64_t h = 0; h < kNR; h += 16)
        pack_along(b + (j0 + jr + h) * ldb + p0, ldb, std::clamp<std::int64_t>(nc - jr - h, 0, 16), kc, dst + jr * steps + h, kNR,
                   0xFFFF);
  }
  // acc[i][h] += the dot products of row i's pair with the 16 pairs of columns 16h.. of one step
  [[gnu::always_inline]] static void step(__m512 (&acc)[kMR][2], const Lane* __restrict a, const Lane* __restrict b) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b)), b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 16));
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512bh ai = reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(a + i)));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
};
#define EPL_SGEMM_BF16 1  // the BF16 format is compiled (others name it only then)
#endif

}  // namespace sgemm
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
#endif
