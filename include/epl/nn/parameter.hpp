#pragma once
/// \file
/// \brief nn::Parameter: a trainable tensor, its gradient, and how to initialise it.
#include <cmath>
#include <vector>

#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief How a parameter's values are drawn. Values are counter-based: element i of the
/// parameter with ordinal k is a function of (seed, k, i), so a shard can draw its own slice.
struct Init {
  enum class Kind { kZeros, kOnes, kNormal, kUniform } kind = Kind::kZeros;
  double scale = 0;  ///< standard deviation (kNormal) or bound (kUniform)

  static Init zeros() { return {Kind::kZeros, 0}; }
  static Init ones() { return {Kind::kOnes, 0}; }
  static Init normal(double std) { return {Kind::kNormal, std}; }
  static Init uniform(double bound) { return {Kind::kUniform, bound}; }

  /// \brief Element i under stream key `key`.
  [[nodiscard]] double value(std::uint64_t key, std::uint64_t i) const {
    switch (kind) {
      case Kind::kZeros: return 0;
      case Kind::kOnes: return 1;
      case Kind::kNormal: return scale * normal01(key, i);
      case Kind::kUniform: return scale * (2 * uniform01(key, i) - 1);
    }
    return 0;
  }
};

/// \brief A trainable tensor. Layers declare shape and init; nn::materialize allocates the
/// value (MemoryCategory::kParameters) and the gradient (kGradients) on a device.
struct Parameter {
  Shape shape;
  Init init;
  Tensor value;
  Tensor grad;

  Parameter() = default;
  Parameter(Shape s, Init i) : shape(s), init(i) {}

  [[nodiscard]] bool materialized() const noexcept { return value.defined(); }
  [[nodiscard]] std::int64_t numel() const noexcept { return shape.numel(); }
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
