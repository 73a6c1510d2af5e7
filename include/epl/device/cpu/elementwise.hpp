#pragma once
/// \file
/// \brief Element-wise and reduction kernels over contiguous arrays (Eigen array maps).
#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "epl/core/half.hpp"
#include "epl/device/cpu/parallel.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

template <class T> using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T> using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

/// The elements an element-wise kernel takes at a time: a kernel of several statements (AdamW's
/// moments, then its parameters) makes its passes over a block while it is in L1, not over a
/// thread's whole range from memory (#39: AdamW moved its 14.7M parameters at 31% of a copy's
/// bandwidth, one pass an Eigen statement). Small enough that the next block's loads overlap this
/// one's arithmetic: 256 f32 (1 KiB an array) ran AdamW in 10-12 ms where 1024 took 12-15 ms
/// (Zen 4, bench_ops, alternating); layer norm, GELU and the softmax did not move.
inline constexpr std::int64_t kL1Block = 256;
/// A block's temporary, held on the stack (Eigen's dynamic array with a fixed most size): an
/// evaluated expression that a Dynamic array would put on the heap once a block.
template <class T> using BlockArray = Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, kL1Block, 1>;
/// Calls fn(offset, length) for consecutive blocks of at most kL1Block of n elements, each
/// thread its own range of blocks, in parallel.
template <class Fn>
void chunked(std::int64_t n, Fn&& fn) {
  parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t o = b; o < e; o += kL1Block) fn(o, std::min(kL1Block, e - o));
  });
}

/// Eigen's exp, bit for bit, faster where Eigen takes its general path: `exp_of(e)` for an Eigen
/// array expression e. For f32 vectors of 4 and 8 (SSE, AVX, AVX2) Eigen's `pexp_float` scales
/// its polynomial by 2^m with `pldexp`, which splits any exponent up to ±278 into four factors;
/// its m is at most ±128 here, so two exact factors of 2^(m/2) give the same correctly rounded
/// product. The clamp, the polynomial and its order of operations are Eigen's, so every value is
/// the same (a test compares them over the whole range, infinities and NaN included). pldexp was
/// 15% of exp's time on a Zen 1 (#39). Eigen's own: f64, 16 f32 (AVX-512:
/// already one factor), and the scalar tail (std::exp).
struct ExpOp {
  template <class T> T operator()(const T& x) const { return std::exp(x); }
  template <class Packet> Packet packetOp(const Packet& x0) const {
    namespace in = Eigen::internal;
    if constexpr (!std::is_same_v<typename in::unpacket_traits<Packet>::type, float> || in::unpacket_traits<Packet>::size > 8) {
      return in::pexp(x0);
    } else {
      using PacketI = typename in::unpacket_traits<Packet>::integer_packet;
      const Packet x = in::pmax(in::pmin(x0, in::pset1<Packet>(88.723f)), in::pset1<Packet>(-88.723f));
      const Packet m = in::pfloor(in::pmadd(x, in::pset1<Packet>(1.44269504088896341f), in::pset1<Packet>(0.5f)));
      Packet r = in::pmadd(m, in::pset1<Packet>(-0.693359375f), x);
      r = in::pmadd(m, in::pset1<Packet>(2.12194440e-4f), r);
      const Packet r2 = in::pmul(r, r), r3 = in::pmul(r2, r);
      Packet y = in::pmadd(in::pset1<Packet>(1.9875691500E-4f), r, in::pset1<Packet>(1.3981999507E-3f));
      Packet y1 = in::pmadd(in::pset1<Packet>(4.1665795894E-2f), r, in::pset1<Packet>(1.6666665459E-1f));
      const Packet y2 = in::padd(r, in::pset1<Packet>(1.0f));
      y = in::pmadd(y, r, in::pset1<Packet>(8.3334519073E-3f));
      y1 = in::pmadd(y1, r, in::pset1<Packet>(5.0000001201E-1f));
      y = in::pmadd(y, r3, y1);
      y = in::pmadd(y, r2, y2);
      // 2^m = 2^h 2^(m-h), h = floor(m/2): both factors normal for |m| <= 128
      const PacketI mi = in::pcast<Packet, PacketI>(m), h = in::parithmetic_shift_right<1>(mi), bias = in::pset1<PacketI>(127);
      const Packet c1 = in::preinterpret<Packet>(in::plogical_shift_left<23>(in::padd(h, bias)));
      const Packet c2 = in::preinterpret<Packet>(in::plogical_shift_left<23>(in::padd(in::psub(mi, h), bias)));
      return in::pmax(in::pmul(in::pmul(y, c1), c2), x0);
    }
  }
};
template <class E> auto exp_of(const Eigen::ArrayBase<E>& e) {
  if constexpr (std::is_same_v<typename E::Scalar, float>) return e.unaryExpr(ExpOp{});
  else return e.exp();
}

/// x as a To: a 16-bit float through float, anything else by static_cast (epl::half and
/// epl::bfloat16 convert from and to every arithmetic type through float).
template <class To, class From>
To convert(From x) {
  if constexpr (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>) return static_cast<To>(static_cast<float>(x));
  else return static_cast<To>(x);
}

template <class T> void fill(T* y, std::int64_t n, T v) {
  chunked(n, [&](std::int64_t o, std::int64_t len) { std::fill(y + o, y + o + len, v); });
}
/// y = x converted element by element, between any two dtypes (f32 <-> f16 eight at a time with
/// F16C where the target has it).
template <class From, class To> void cast(const From* x, To* y, std::int64_t n) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    std::int64_t i = o;
#if defined(__F16C__)
    if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>)
      for (; i + 8 <= o + len; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>)
      for (; i + 8 <= o + len; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
    for (; i < o + len; ++i) y[i] = convert<To>(x[i]);
  });
}
/// y = x rounded to the nearest Low (a half type: round to nearest even, past its range to
/// infinity), kept as T: what a GEMM under AMP multiplies.
template <class Low, class T> void round_through(const T* x, T* y, std::int64_t n) {
  if constexpr (std::is_same_v<Low, bfloat16> && std::is_same_v<T, float>) {
    // bfloat16's rounding (float_to_bfloat16_bits) without a branch, so the loop vectorizes: it
    // runs before every GEMM under AMP on CPUs without native bf16, and was a scalar loop
    chunked(n, [&](std::int64_t o, std::int64_t len) {
      for (std::int64_t i = o; i < o + len; ++i) {
        const auto b = std::bit_cast<std::uint32_t>(x[i]);
        const std::uint32_t nearest = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
        const std::uint32_t nan = (b & 0x80000000u) | 0x7fc00000u;
        y[i] = std::bit_cast<float>((b & 0x7fffffffu) > 0x7f800000u ? nan : nearest);
      }
    });
  } else {
    chunked(n, [&](std::int64_t o, std::int64_t len) {
      for (std::int64_t i = o; i < o + len; ++i) y[i] = static_cast<T>(static_cast<float>(Low(static_cast<float>(x[i]))));
    });
  }
}
/// out = a + b
template <class T> void add(const T* a, const T* b, T* out, std::int64_t n) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T>(out + o, len) = ConstArrayMap<T>(a + o, len) + ConstArrayMap<T>(b + o, len);
  });
}
/// out = a * b
template <class T> void mul(const T* a, const T* b, T* out, std::int64_t n) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T>(out + o, len) = ConstArrayMap<T>(a + o, len) * ConstArrayMap<T>(b + o, len);
  });
}
/// y += alpha * x
template <class T> void axpy(T alpha, const T* x, T* y, std::int64_t n) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T>(y + o, len) += alpha * ConstArrayMap<T>(x + o, len);
  });
}
/// y *= alpha
template <class T> void scale(T* y, std::int64_t n, T alpha) {
  chunked(n, [&](std::int64_t o, std::int64_t len) { ArrayMap<T>(y + o, len) *= alpha; });
}
/// y[r, :] += v for every row r of a [rows, cols] array
template <class T> void add_row_vector(T* y, const T* v, std::int64_t rows, std::int64_t cols) {
  ConstArrayMap<T> vec(v, cols);
  parallel_for(rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols)), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) ArrayMap<T>(y + r * cols, cols) += vec;
  });
}
/// out = beta * out + column sums of a [rows, cols] array (the gradient of a broadcast bias).
/// Rows are added whole (contiguous, vectorised); each thread owns a block of columns.
template <class T> void sum_rows(const T* x, T* out, std::int64_t rows, std::int64_t cols, T beta) {
  parallel_for(cols, std::max<std::int64_t>(16, kGrain / std::max<std::int64_t>(1, rows)), [&](std::int64_t c0, std::int64_t c1) {
    ArrayMap<T> o(out + c0, c1 - c0);
    if (beta == T(0)) o.setZero(); else o *= beta;
    for (std::int64_t r = 0; r < rows; ++r) o += ConstArrayMap<T>(x + r * cols + c0, c1 - c0);
  });
}
/// sum of x*x: each block of 4096 summed in T at full SIMD width (its rounding error is that of
/// 4096 additions), the block sums accumulated in double.
template <class T> double sum_squares(const T* x, std::int64_t n) {
  constexpr std::int64_t kBlock = 4096;
  double total = 0;
  for (std::int64_t o = 0; o < n; o += kBlock) {
    const auto len = std::min(kBlock, n - o);
    total += static_cast<double>(ConstArrayMap<T>(x + o, len).square().sum());
  }
  return total;
}

// GELU, tanh form (GPT-2, PyTorch's approximate='tanh'):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
template <class T> void gelu(const T* x, T* y, std::int64_t n) {
  const T c = T(0.7978845608028654), k = T(0.044715);
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ConstArrayMap<T> X(x + o, len);
    ArrayMap<T>(y + o, len) = T(0.5) * X * (T(1) + (c * (X + k * X.cube())).tanh());
  });
}
template <class T> void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
  const T c = T(0.7978845608028654), k = T(0.044715);
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ConstArrayMap<T> X(x + o, len), DY(dy + o, len);
    const BlockArray<T> t = (c * (X + k * X.cube())).tanh();
    ArrayMap<T>(dx + o, len) =
        DY * (T(0.5) * (T(1) + t) + T(0.5) * X * (T(1) - t.square()) * c * (T(1) + T(3) * k * X.square()));
  });
}
}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl

// ExpOp vectorises as Eigen's exp does, at its cost (the cost steers Eigen's unrolling: the same
// traversal, the same tail)
template <> struct Eigen::internal::functor_traits<epl::detail::cpu::ExpOp> {
  enum { PacketAccess = functor_traits<scalar_exp_op<float>>::PacketAccess, Cost = functor_traits<scalar_exp_op<float>>::Cost };
};
