#pragma once
/// \file
/// \brief Element types of tensors, with the compile-time <-> run-time mapping. The 16-bit float
/// types are epl::half and epl::bfloat16 (core/half.hpp).
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "epl/core/error.hpp"
#include "epl/core/half.hpp"

namespace epl {
inline namespace v0 {

/// \brief The element type of a tensor, known at run time.
enum class DType : std::uint8_t { kF32, kF64, kF16, kBF16, kI32, kI64 };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

constexpr std::string_view name_of(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t != DType::kI32 && t != DType::kI64; }

namespace detail {
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::kF32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::kF64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::kF16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::kBF16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::kI32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::kI64; };
}  // namespace detail

/// \brief The run-time tag of a C++ element type.
/// \tparam T one of float, double, epl::half, epl::bfloat16, std::int32_t, std::int64_t.
template <class T>
inline constexpr DType dtype_v = detail::dtype_of<std::remove_cv_t<T>>::value;

/// \brief Calls fn.template operator()<T>() with T the C++ type of a floating dtype.
///
/// The single place where a run-time dtype becomes a compile-time type for float kernels.
template <class Fn>
decltype(auto) visit_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kF64: return fn.template operator()<double>();
    case DType::kF16: return fn.template operator()<half>();
    case DType::kBF16: return fn.template operator()<bfloat16>();
    default: break;
  }
  EPL_FAIL("dtype ", name_of(t), " is not a floating type; this operation needs f32, f64, f16 or bf16");
}

/// \brief As visit_floating, for the two types that compute (f32, f64): GEMM, norms, softmax.
template <class Fn>
decltype(auto) visit_compute(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kF64: return fn.template operator()<double>();
    default: break;
  }
  EPL_FAIL("dtype ", name_of(t), " cannot be computed on directly; cast to f32 (or f64) first");
}

/// \brief As visit_floating, for the two index types.
template <class Fn>
decltype(auto) visit_index(DType t, Fn&& fn) {
  switch (t) {
    case DType::kI32: return fn.template operator()<std::int32_t>();
    case DType::kI64: return fn.template operator()<std::int64_t>();
    default: break;
  }
  EPL_FAIL("dtype ", name_of(t), " is not an index type; token ids must be i32 or i64");
}

/// \brief Any dtype.
template <class Fn>
decltype(auto) visit_any(DType t, Fn&& fn) {
  if (t == DType::kI32 || t == DType::kI64) return visit_index(t, std::forward<Fn>(fn));
  return visit_floating(t, std::forward<Fn>(fn));
}

}  // namespace v0
}  // namespace epl
