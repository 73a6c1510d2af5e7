#pragma once
/// \file
/// \brief nn::Parameter (a trainable tensor with its global spec) and nn::RandomStream (a
/// layer's own stream of random numbers); both are declared by layers and numbered, allocated
/// and initialised by param::materialize.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "epl/core/linked.hpp"
#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief How a parameter's values are drawn. Values are counter-based: element i of the
/// parameter with ordinal k is a function of (seed, k, i), i indexing the *whole* (unsharded)
/// parameter, so a shard draws exactly its slice of the single-device initialisation.
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

/// \brief Which part of the whole parameter a rank holds: along `axis`, the whole is `blocks`
/// equal blocks (1: one), each cut into `parts` equal parts, and the rank holds part `index` of
/// every block (a fused q|k|v weight sharded by heads holds its heads of q, of k and of v).
/// axis -1: the whole. Set by a strategy that shards the layer (Split).
struct Shard {
  int axis = -1;
  std::int64_t index = 0;
  std::int64_t parts = 1;
  std::int64_t blocks = 1;
  [[nodiscard]] bool whole() const noexcept { return axis < 0 || parts == 1; }
};

/// \brief A trainable tensor. Layers declare its shape and init; param::materialize gives it a
/// global ordinal, a place in a flat arena and values: `value` and `grad` are views of the
/// arena's flat buffers (kParameters and kGradients), so buckets and optimizer shards are ranges.
struct Parameter {
  Shape shape;  ///< the part this rank holds (the whole shape unless sharded)
  Init init;
  Tensor value;
  Tensor grad;
  Shard shard;              ///< what part of the whole `shape` is
  std::int64_t ordinal = -1;  ///< position in the model's visiting order (set by materialize)
  std::int64_t offset = -1;   ///< first element in the arena's flat buffers (set by materialize)

  Parameter() = default;
  Parameter(Shape s, Init i) : shape(s), init(i) {}
  // Copied and moved by a call (the one definition, parameter.ipp): a model's layers hold dozens
  // of parameters, and copies inlined into every layer's and model's copy were a tenth of a
  // program's object code (#38).
  EPL_LINKED Parameter(const Parameter&);
  EPL_LINKED Parameter(Parameter&&) noexcept;
  EPL_LINKED Parameter& operator=(const Parameter&);
  EPL_LINKED Parameter& operator=(Parameter&&) noexcept;
  EPL_LINKED ~Parameter();

  [[nodiscard]] bool materialized() const noexcept { return value.defined(); }
  [[nodiscard]] std::int64_t numel() const noexcept { return shape.numel(); }
  /// \brief The whole parameter's shape (as the single-device model has it).
  [[nodiscard]] Shape global_shape() const {
    Shape g = shape;
    if (!shard.whole()) g[shard.axis] = shape[shard.axis] * shard.parts;
    return g;
  }
  /// \brief The index in the whole parameter of this part's element i (row-major).
  [[nodiscard]] std::uint64_t global_index(std::int64_t i) const {
    if (shard.whole()) return static_cast<std::uint64_t>(i);
    const Shape g = global_shape();
    std::int64_t index = 0, rest = i, stride = numel();
    for (int d = 0; d < shape.rank(); ++d) {
      stride /= shape[d];
      std::int64_t c = rest / stride;
      rest %= stride;
      if (d == shard.axis) {  // part `index` of its block: the block's start, then the part's
        const std::int64_t part = shape[d] / shard.blocks;
        c = (c / part) * part * shard.parts + shard.index * part + c % part;
      }
      index = index * g[d] + c;
    }
    return static_cast<std::uint64_t>(index);
  }
  /// \brief Makes this parameter part `index` of `parts` along `axis` (of each of `blocks`
  /// blocks), before it is materialized; `what` names it in the error when the axis does not
  /// divide: "Linear(64 -> 30).weight: dimension 0 (30) does not divide by the split degree 4".
  void shard_along(int axis, std::int64_t index, std::int64_t parts, const std::string& what, std::int64_t blocks = 1) {
    EPL_CHECK(!materialized(), what, ": shard a parameter before materialize");
    EPL_CHECK(shard.whole(), what, " is already sharded");
    EPL_CHECK(axis >= 0 && axis < shape.rank(), what, ": no dimension ", axis, " in its shape ", shape);
    EPL_CHECK(parts >= 1 && index >= 0 && index < parts && blocks >= 1, what, ": part ", index, " of ", parts, " is not a part");
    EPL_CHECK(shape[axis] % (blocks * parts) == 0, what, ": dimension ", axis, " (", shape[axis], blocks > 1 ? ", " + std::to_string(blocks) + " blocks" : "",
              ") does not divide by the split degree ", parts, "; choose sizes that are multiples of ", blocks * parts,
              " or another epl::Split<N>");
    if (parts == 1) return;
    shard = {axis, index, parts, blocks};
    shape[axis] /= parts;
  }
};

/// \brief A layer's stream of random numbers (a Dropout's masks). materialize numbers the
/// streams of a model in visiting order; a pass draws from (seed, step, stream ordinal) at the
/// global position of its samples, so every strategy, and a recomputed forward, draws the
/// single-device run's numbers.
struct RandomStream {
  std::int64_t ordinal = -1;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/nn/parameter.ipp"
#endif
