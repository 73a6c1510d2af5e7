#pragma once
/// \file
/// \brief epl::half (IEEE binary16) and epl::bfloat16: 16-bit storage types, converted to and from
/// float with round-to-nearest-even, the conversions the CPU kernels, the communicators and the
/// tests share. They only store and convert; arithmetic happens in float.
///
/// Why our own (#22): core/dtype.hpp named Eigen's, so every header that mentions a dtype parsed
/// Eigen; now only device/cpu/ does. The conversions are the classic bit-level ones (the same
/// Eigen and the hardware use: round to nearest even, overflow to infinity, subnormals kept, NaN
/// quiet), checked against Eigen's on every half and on millions of floats (test/core).
#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace epl {
inline namespace v0 {

namespace detail {
/// The binary16 bits nearest to f (ties to even).
constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x47800000u)  // 65536 and above, infinity and NaN (below it the rounding carries into infinity)
    return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half (or zero); adding 0.5 rounds it into the mantissa
    const float shifted = std::bit_cast<float>(x) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
  }
  const std::uint32_t odd = (x >> 13) & 1u;   // the last kept bit: ties go to even
  x += 0xc8000000u + 0xfffu + odd;            // rebias the exponent (127 -> 15), round
  return static_cast<std::uint16_t>(sign | (x >> 13));
}
/// The float a binary16 value is (exactly).
constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t bits = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exponent = bits & 0x0f800000u;
  bits += 0x38000000u;                                   // rebias the exponent (15 -> 127)
  if (exponent == 0x0f800000u) {
    bits += 0x38000000u;                                 // infinity or NaN: the largest exponent
  } else if (exponent == 0) {                            // zero or subnormal: renormalise through a float subtraction
    bits += 0x00800000u;
    bits = std::bit_cast<std::uint32_t>(std::bit_cast<float>(bits) - std::bit_cast<float>(0x38800000u));
  }
  return std::bit_cast<float>(bits | sign);
}
/// The bfloat16 bits nearest to f (ties to even); a NaN stays a quiet NaN.
constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
}  // namespace detail

/// \brief IEEE binary16: 5 exponent bits, 10 mantissa bits, largest finite value 65504.
struct half {
  std::uint16_t bits = 0;

  constexpr half() = default;
  constexpr explicit half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}
  /// From any arithmetic value, through float (as Eigen's and CUDA's conversions do).
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::same_as<T, float>)
  constexpr explicit half(T v) noexcept : half(static_cast<float>(v)) {}
  /// To any arithmetic type, through float.
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit operator T() const noexcept {
    return static_cast<T>(detail::half_bits_to_float(bits));
  }
  /// The value with these bits.
  static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
};

/// \brief bfloat16: float's 8 exponent bits with 7 mantissa bits (float's range, less precision).
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::same_as<T, float>)
  constexpr explicit bfloat16(T v) noexcept : bfloat16(static_cast<float>(v)) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit operator T() const noexcept {
    return static_cast<T>(detail::bfloat16_bits_to_float(bits));
  }
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(float(half(1.0f)) == 1.0f && float(half(65504.0f)) == 65504.0f && half(1e9f).bits == 0x7c00);
static_assert(float(bfloat16(1.0f + 0x1p-8f)) == 1.0f && float(bfloat16(1.0f + 0x1p-7f)) == 1.0f + 0x1p-7f);

}  // namespace v0
}  // namespace epl
