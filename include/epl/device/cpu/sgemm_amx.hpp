#pragma once
/// \file
/// \brief The bf16 GEMM format for Intel's AMX: sgemm_avx512.hpp's driver with a 32 x 32 block
/// of C held in four tiles and TDPBF16PS, which multiplies a 16 x 32 bf16 tile by a 32 x 16 one
/// into 16 x 16 f32 sums, 16 times the products of one AVX-512 FMA.
///
/// Tile registers: tmm0-3 are C (rows 0-15 and 16-31 by columns 0-15 and 16-31), tmm4-5 the two
/// 16-row halves of A's 32 rows, tmm6-7 the two 16-column halves of B's 32 columns; all 16 rows
/// of 64 bytes. Packing rounds op(A) and op(B) to bf16 (nearest even, as the BF16 format does)
/// straight into the tiles' layouts, so a tile is one contiguous KiB: A's rows hold 32 k each;
/// B's rows hold, for 16 columns, the pairs (k, k + 1) TDPBF16PS expects ("VNNI" order).
///
/// The tile operations are a type, so the same driver, packing and kernel run on the hardware
/// (`Tiles`, inline assembly, no compiler flag needed) and, in the tests of any AVX512-BF16 CPU,
/// on `EmulatedTiles`, which does what Intel's manual says each instruction does.
#include "epl/core/error.hpp"
#include "epl/device/cpu/sgemm_avx512.hpp"

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__x86_64__)
#include <cmath>
#include <cstring>

namespace epl {
inline namespace v0 {
namespace detail::cpu {
namespace sgemm {

/// LDTILECFG's 64 bytes: palette 1, each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);
/// Eight tiles of 16 rows by 64 bytes: every tile this format uses is whole (packing pads).
inline TileConfig whole_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}

/// AMX's tile instructions, written as assembly so that no compiler flag is needed (the CPU is
/// checked at run time: isa().amx_bf16). The tile numbers are immediates.
struct Tiles {
  static void configure(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }
  static void release() { __asm__ volatile("tilerelease" ::); }
  template <int T>
  [[gnu::always_inline]] static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  [[gnu::always_inline]] static void load(const void* p, std::int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  [[gnu::always_inline]] static void store(void* p, std::int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  /// C += A B: tile C is [16, 16] f32, A [16, 32] bf16, B [16, 16] pairs of bf16.
  template <int C, int A, int B>
  [[gnu::always_inline]] static void dot() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

/// The same operations on memory, per thread, as the Intel SDM's pseudo-code defines them
/// (TDPBF16PS: bf16 inputs with denormals as zero, each pair's two products added to the f32 sum
/// in turn). A kernel that uses a tile it did not configure is an error here, not a fault.
struct EmulatedTiles {
  struct State {
    bool configured = false;
    TileConfig config;
    alignas(64) std::uint8_t tile[8][16][64] = {};
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
  static void configure(const TileConfig& c) {
    state().config = c;
    state().configured = true;
  }
  static void release() { state() = State{}; }
  static std::uint8_t (&checked(int t))[16][64] {
    EPL_CHECK(state().configured && state().config.palette == 1, "internal: tile ", t, " used before LDTILECFG");
    return state().tile[t];
  }
  template <int T>
  static void zero() {
    std::memset(checked(T), 0, sizeof(State::tile[0]));
  }
  template <int T>
  static void load(const void* p, std::int64_t stride) {
    auto& t = checked(T);
    for (int r = 0; r < state().config.rows[T]; ++r)
      std::memcpy(t[r], static_cast<const std::uint8_t*>(p) + r * stride, state().config.colsb[T]);
  }
  template <int T>
  static void store(void* p, std::int64_t stride) {
    auto& t = checked(T);
    for (int r = 0; r < state().config.rows[T]; ++r)
      std::memcpy(static_cast<std::uint8_t*>(p) + r * stride, t[r], state().config.colsb[T]);
  }
  static float widen(std::uint16_t h) {  // bf16 to f32, denormals as zero
    const std::uint32_t bits = (h & 0x7f80u) == 0 ? std::uint32_t{h & 0x8000u} << 16 : std::uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  template <int C, int A, int B>
  static void dot() {
    auto &c = checked(C), &a = checked(A), &b = checked(B);
    const auto& cfg = state().config;
    for (int m = 0; m < cfg.rows[C]; ++m)
      for (int k = 0; k < cfg.colsb[A] / 4; ++k)
        for (int n = 0; n < cfg.colsb[C] / 4; ++n) {
          std::uint16_t a2[2], b2[2];
          float sum;
          std::memcpy(a2, a[m] + 4 * k, 4);
          std::memcpy(b2, b[k] + 4 * n, 4);
          std::memcpy(&sum, c[m] + 4 * n, 4);
          sum = std::fma(widen(a2[0]), widen(b2[0]), sum);
          sum = std::fma(widen(a2[1]), widen(b2[1]), sum);
          std::memcpy(c[m] + 4 * n, &sum, 4);
        }
  }
};

/// The AMX format: a lane is a pair of bf16, a step 32 k; each row of A (column of B) fills 16
/// lanes a step. A panel of 32 rows holds, per step, its two 16-row tiles one after the other.
template <class TileOps = Tiles>
struct Amx {
  using Lane = std::uint32_t;
  static constexpr int kMR = 32, kNR = 32;
  static constexpr std::int64_t kPerStep = 32, kLanes = 16, kKC = 512, kMC = 256, kNC = 1024;
  static constexpr std::int64_t kTile = 256;  // lanes in one tile: 16 rows of 64 bytes
  static constexpr bool kRowsFirst = true;     // sgemm::kRowsFirst: op(A)'s panel stays in L1

  /// The tiles are configured for one GEMM on this thread, and released after it (so a thread
  /// that stops multiplying does not carry 8 KiB of tile state through every context switch).
  struct Session {
    Session() { TileOps::configure(whole_tiles()); }
    ~Session() { TileOps::release(); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
  };

  // op(A)[i0 + i, p0 + p] into panels of 32 rows: lane (q, h, r, l) = the pair of k 32q + 2l,
  // 32q + 2l + 1 of row 16h + r, at q * 512 + h * 256 + r * 16 + l; zero past mc and kc.
  static void pack_a(bool ta, const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t p0,
                     std::int64_t kc, Lane* dst) {
    if (ta)
      by_steps(mc, kc, dst, [&](std::int64_t ir, std::int64_t rows, std::int64_t p, Lane* tile) {
        transposed_rows_step(a + (p0 + p) * lda + i0 + ir, lda, rows, kc - p, tile);
      });
    else
      by_halves(mc, kc, dst, [&](std::int64_t ir, std::int64_t rows, Lane* half) { pack_rows_along(a + (i0 + ir) * lda + p0, lda, rows, kc, half); });
  }
  // op(B)[p0 + p, j0 + j] into panels of 32 columns: lane (q, h, r, l) = the pair of k 32q + 2r,
  // 32q + 2r + 1 of column 16h + l, at q * 512 + h * 256 + r * 16 + l; zero past nc and kc.
  static void pack_b(bool tb, const float* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                     std::int64_t nc, Lane* dst) {
    if (tb)
      by_halves(nc, kc, dst, [&](std::int64_t jr, std::int64_t cols, Lane* half) { pack_columns_along(b + (j0 + jr) * ldb + p0, ldb, cols, kc, half); });
    else
      by_steps(nc, kc, dst, [&](std::int64_t jr, std::int64_t cols, std::int64_t p, Lane* tile) {
        columns_across_step(b + (p0 + p) * ldb + j0 + jr, ldb, cols, kc - p, tile);
      });
  }

  // C[0:mr, 0:nr] (= or +=) alpha * Apanel * Bpanel over `steps` steps. A whole block with alpha 1
  // goes between C and the tiles directly; any other through a block on the stack.
  static void kernel(std::int64_t steps, const Lane* a, const Lane* b, float* c, std::int64_t ldc, int mr, int nr, float alpha,
                     Store store) {
    const bool accumulate = store == Store::kAdd;  // kStream: written as kOverwrite
    const bool direct = mr == kMR && nr == kNR && alpha == 1.f;
    const std::int64_t stride = ldc * 4;
    if (direct && accumulate) {
      TileOps::template load<0>(c, stride);
      TileOps::template load<1>(c + 16, stride);
      TileOps::template load<2>(c + 16 * ldc, stride);
      TileOps::template load<3>(c + 16 * ldc + 16, stride);
    } else {
      TileOps::template zero<0>();
      TileOps::template zero<1>();
      TileOps::template zero<2>();
      TileOps::template zero<3>();
    }
    for (std::int64_t q = 0; q < steps; ++q, a += 2 * kTile, b += 2 * kTile) {
      TileOps::template load<4>(a, 64);
      TileOps::template load<5>(a + kTile, 64);
      TileOps::template load<6>(b, 64);
      TileOps::template load<7>(b + kTile, 64);
      TileOps::template dot<0, 4, 6>();
      TileOps::template dot<1, 4, 7>();
      TileOps::template dot<2, 5, 6>();
      TileOps::template dot<3, 5, 7>();
    }
    if (direct) {
      TileOps::template store<0>(c, stride);
      TileOps::template store<1>(c + 16, stride);
      TileOps::template store<2>(c + 16 * ldc, stride);
      TileOps::template store<3>(c + 16 * ldc + 16, stride);
      return;
    }
    alignas(64) float block[kMR][kNR];
    TileOps::template store<0>(&block[0][0], kNR * 4);
    TileOps::template store<1>(&block[0][16], kNR * 4);
    TileOps::template store<2>(&block[16][0], kNR * 4);
    TileOps::template store<3>(&block[16][16], kNR * 4);
    const __m512 va = _mm512_set1_ps(alpha);
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16);
    for (int i = 0; i < mr; ++i) {
      float* row = c + i * ldc;
      __m512 r0 = _mm512_mul_ps(va, _mm512_load_ps(&block[i][0])), r1 = _mm512_mul_ps(va, _mm512_load_ps(&block[i][16]));
      if (accumulate) {
        r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, row));
        r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, row + 16));
      }
      _mm512_mask_storeu_ps(row, m0, r0);
      _mm512_mask_storeu_ps(row + 16, m1, r1);
    }
  }

 private:
  // pack(first, count, half) for each 16 rows (columns) of `width` and the tiles of its half of a
  // 32-wide panel, all its steps; then zeros for the half a last panel lacks.
  template <class Pack>
  static void by_halves(std::int64_t width, std::int64_t kc, Lane* dst, Pack&& pack) {
    static_assert(kMR == kNR);
    const std::int64_t steps = (kc + kPerStep - 1) / kPerStep;
    for (std::int64_t first = 0; first < width; first += 16) pack(first, std::min<std::int64_t>(16, width - first), half_at(dst, steps, first));
    zero_missing_half(width, steps, dst);
  }
  // The same blocks a step at a time, each step across the whole width: pack(first, count, p, tile)
  // packs k p..p+31 of 16 rows (columns) into one tile. For a source whose memory rows run across
  // the panel (op(A) transposed, op(B) not): each memory row is then read along, not 64 bytes of it
  // a step apart; a 1536 x 384 x 2048 product's packing of op(A)^T took 24% of its time against 32%
  // (bench_gemm --parts, Sapphire Rapids, #39).
  template <class Pack>
  static void by_steps(std::int64_t width, std::int64_t kc, Lane* dst, Pack&& pack) {
    const std::int64_t steps = (kc + kPerStep - 1) / kPerStep;
    for (std::int64_t q = 0; q < steps; ++q)
      for (std::int64_t first = 0; first < width; first += 16)
        pack(first, std::min<std::int64_t>(16, width - first), q * kPerStep, half_at(dst, steps, first) + q * 2 * kTile);
    zero_missing_half(width, steps, dst);
  }
  static Lane* half_at(Lane* dst, std::int64_t steps, std::int64_t first) {
    return dst + (first / kMR) * kMR * steps * kLanes + (first % kMR / 16) * kTile;
  }
  // zeros for the half a last panel lacks (width past a whole 32 by 16 or less)
  static void zero_missing_half(std::int64_t width, std::int64_t steps, Lane* dst) {
    if (width % kMR == 0 || width % kMR > 16) return;
    Lane* missing = half_at(dst, steps, width - width % kMR + 16);
    for (std::int64_t q = 0; q < steps; ++q) std::memset(missing + q * 2 * kTile, 0, kTile * sizeof(Lane));
  }
  // Rows (<= 16, ld apart) that run along k: tile row r, step q = row r's k 32q..32q+31 as pairs.
  static void pack_rows_along(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t kc, Lane* dst) {
    const std::int64_t steps = (kc + kPerStep - 1) / kPerStep;
    for (std::int64_t q = 0; q < steps; ++q) {
      const std::int64_t p = q * kPerStep;
      const __mmask16 lo = first_lanes(kc - p), hi = first_lanes(kc - p - 16);
      Lane* tile = dst + q * 2 * kTile;
      for (std::int64_t r = 0; r < 16; ++r) {
        const __m512 v = r < rows ? BF16::pairs_along(_mm512_maskz_loadu_ps(lo, src + r * ld + p), _mm512_maskz_loadu_ps(hi, src + r * ld + p + 16))
                                  : _mm512_setzero_ps();
        _mm512_store_ps(reinterpret_cast<float*>(tile + r * 16), v);
      }
    }
  }
  // One step of rows of memory that run along the panel's 16 rows (op(A) stored transposed; `left`
  // k from src's row on): 32 k of 16 rows are two 16 x 16 blocks, transposed in registers, then
  // paired along k.
  static void transposed_rows_step(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t left, Lane* tile) {
    const __mmask16 valid = first_lanes(rows);
    __m512 lo[16], hi[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      lo[i] = i < left ? _mm512_maskz_loadu_ps(valid, src + i * ld) : _mm512_setzero_ps();
      hi[i] = 16 + i < left ? _mm512_maskz_loadu_ps(valid, src + (16 + i) * ld) : _mm512_setzero_ps();
    }
    transpose16(lo);
    transpose16(hi);
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) _mm512_store_ps(reinterpret_cast<float*>(tile + r * 16), BF16::pairs_along(lo[r], hi[r]));
  }
  // Columns of op(B) stored as rows of k (B stored [n, k]): each column's 32 k pair up along k,
  // then a 16 x 16 transpose of lanes puts pair r of the 16 columns in tile row r.
  static void pack_columns_along(const float* src, std::int64_t ld, std::int64_t cols, std::int64_t kc, Lane* dst) {
    const std::int64_t steps = (kc + kPerStep - 1) / kPerStep;
    __m512 v[16];
    for (std::int64_t q = 0; q < steps; ++q) {
      const std::int64_t p = q * kPerStep;
      const __mmask16 lo = first_lanes(kc - p), hi = first_lanes(kc - p - 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        v[j] = j < cols ? BF16::pairs_along(_mm512_maskz_loadu_ps(lo, src + j * ld + p), _mm512_maskz_loadu_ps(hi, src + j * ld + p + 16))
                        : _mm512_setzero_ps();
      transpose16(v);
      Lane* tile = dst + q * 2 * kTile;
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) _mm512_store_ps(reinterpret_cast<float*>(tile + r * 16), v[r]);
    }
  }
  // One step of columns of op(B) that run along memory rows (B stored [k, n]; `left` k from src's
  // row on): rows 2r and 2r + 1 of k pair up lane by lane into tile row r.
  static void columns_across_step(const float* src, std::int64_t ld, std::int64_t cols, std::int64_t left, Lane* tile) {
    const __mmask16 valid = first_lanes(cols);
    for (std::int64_t r = 0; r < 16; ++r) {
      const std::int64_t p = 2 * r;
      const __m512 even = p < left ? _mm512_maskz_loadu_ps(valid, src + p * ld) : _mm512_setzero_ps();
      const __m512 odd = p + 1 < left ? _mm512_maskz_loadu_ps(valid, src + (p + 1) * ld) : _mm512_setzero_ps();
      _mm512_store_si512(tile + r * 16, BF16::pairs_across(even, odd));
    }
  }
};
#define EPL_SGEMM_AMX 1  // the Amx format is compiled (others name it only then)

}  // namespace sgemm
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
#endif
