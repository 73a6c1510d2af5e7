#pragma once
/// \file
/// \brief What a layer needs to run tensor-parallel (inside epl::Split): its part of the split
/// group, the layout of the activations it takes and gives, and the group's collectives as seen
/// from a layer's forward and backward (over the pass context's `groups().tensor`).
#include <cstdint>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief A rank's place in a split group: part `index` of `parts`.
struct SplitPart {
  std::int64_t index = 0;
  std::int64_t parts = 1;
  [[nodiscard]] bool whole() const noexcept { return parts == 1; }
  /// \brief The first element of this part of an extent `n` (which must divide).
  [[nodiscard]] std::int64_t first(std::int64_t n) const noexcept { return n / parts * index; }
};

/// \brief How an activation is spread over a split group: every rank holds all of it, or rank r
/// holds part r of its last dimension (a column-parallel Linear's output).
enum class Layout : std::uint8_t { kWhole, kLastDimSharded };

inline const char* name_of(Layout l) { return l == Layout::kWhole ? "whole" : "sharded along its last dimension"; }

namespace detail {
template <class Ctx>
comm::Communicator& tensor_group(Ctx& ctx, const char* who) {
  EPL_CHECK(ctx.groups().tensor != nullptr, who, " is split over a tensor-parallel group, but this pass has none: run it "
            "through a Trainer (or give nn::Groups::tensor)");
  return *ctx.groups().tensor;
}
}  // namespace detail

/// \brief t = the sum of t over the split group (in place).
template <class Ctx>
void tensor_all_reduce(Ctx& ctx, const Tensor& t, const char* who) {
  detail::tensor_group(ctx, who).all_reduce(t, comm::ReduceOp::kSum);
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
