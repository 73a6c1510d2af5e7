#pragma once
/// \file
/// \brief What a layer needs to run tensor-parallel (inside epl::Split): its part of the split
/// group, the layout of the activations it takes and gives, and the group's collectives as seen
/// from a layer's forward and backward (over the pass context's `groups().tensor`).
#include <array>
#include <cstdint>
#include <tuple>

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

/// \brief How an activation is spread over a split group: every rank holds all of it, rank r
/// holds part r of its last dimension (a column-parallel Linear's output), or rank r holds part r
/// of its sequence, the dimension before the last (sequence parallelism: the token-wise layers
/// between tensor-parallel blocks).
enum class Layout : std::uint8_t { kWhole, kLastDimSharded, kSequenceSharded };

inline const char* name_of(Layout l) {
  switch (l) {
    case Layout::kWhole: return "whole";
    case Layout::kLastDimSharded: return "sharded along its last dimension";
    case Layout::kSequenceSharded: return "sharded along its sequence";
  }
  return "?";
}

namespace detail {
template <class Ctx>
comm::Communicator& tensor_group(Ctx& ctx, const char* who) {
  EPL_CHECK(ctx.groups().tensor != nullptr, who, " is split over a tensor-parallel group, but this pass has none: run it "
            "through its Trainer (trainer.predict for its output, trainer.evaluate for the loss), or give nn::Groups::tensor");
  return *ctx.groups().tensor;
}
}  // namespace detail

/// \brief [..., cols] parts on the ranks of `group` -> [..., N cols] on every rank, rank q's part
/// at columns [q cols, (q + 1) cols) (a column-parallel Linear's output; a prediction's
/// vocabulary-parallel logits). all_gather gives [N, rows, cols], permuted into the rows.
template <class D>
Tensor gather_columns(const D& device, comm::Communicator& group, const Tensor& part) {
  const std::int64_t n = group.size(), rows = part.shape().rows(), cols = part.shape().back();
  Tensor parts = device.empty({n, rows, cols}, part.dtype(), MemoryCategory::kActivations);
  group.all_gather(part, parts);
  Tensor whole = device.empty(part.shape().with_back(n * cols), part.dtype(), MemoryCategory::kActivations);
  device.permute_heads(whole.view({1, rows, n * cols}), parts.view({1, n, rows, cols}), 0, false);
  return whole;
}

/// \brief t = the sum of t over the split group (in place).
template <class Ctx>
void tensor_all_reduce(Ctx& ctx, const Tensor& t, const char* who) {
  detail::tensor_group(ctx, who).all_reduce(t, comm::ReduceOp::kSum);
}

// ---- sequence parallelism -------------------------------------------------------------------
// A sequence-sharded activation: the whole [..., s, d] cut along s (the dimension before the
// last; the rows of a 2-D [rows, d]) into `parts` equal parts, rank r holding [..., s/N, d] part r.
// Seen as [outer, s * d] rows, part r is columns [r s d / N, (r + 1) s d / N) of each row.
namespace detail {
inline int sequence_dim(const Tensor& t, const char* who) {
  EPL_CHECK(t.rank() >= 2, "sequence parallelism: ", who, " got ", t.shape(),
            "; it needs a sequence dimension before the last ([batch, t, dim] or [rows, dim])");
  return t.rank() - 2;
}
// [outer, s, d] whole <-> [N, outer, s/N, d] parts, by the head permutation of a [1, outer, N x s d/N] view.
template <class Ctx>
void sequence_permute(Ctx& ctx, const Tensor& whole, const Tensor& parts, std::int64_t n, bool to_parts) {
  const std::int64_t outer = whole.numel() / (whole.dim(whole.rank() - 2) * whole.shape().back());
  const std::int64_t row = whole.numel() / outer;
  ctx.device().permute_heads(whole.view({1, outer, row}), parts.view({1, n, outer, row / n}), 0, to_parts);
}
}  // namespace detail

/// \brief The whole shape of a sequence part of `parts`, and the part's shape of a whole one
/// (an error naming `who` when the sequence does not divide).
inline Shape sequence_whole_shape(const Tensor& part, std::int64_t parts, const char* who) {
  Shape s = part.shape();
  s[detail::sequence_dim(part, who)] *= parts;
  return s;
}
inline Shape sequence_part_shape(const Tensor& whole, std::int64_t parts, const char* who) {
  const int d = detail::sequence_dim(whole, who);
  EPL_CHECK(whole.dim(d) % parts == 0, "sequence parallelism: ", who, " cuts the sequence of its ", whole.shape(), " (dimension ", d,
            ", ", whole.dim(d), ") into ", parts, " parts, but it does not divide by the split degree ", parts, "; the sequence is "
            "t of [batch, t, dim], or the rows of a 2-D input as each data-parallel replica's micro-batch holds them: use sizes "
            "that are multiples of ", parts, ", or split.sequence_parallel=false");
  Shape s = whole.shape();
  s[d] /= parts;
  return s;
}

/// \brief The whole activation from every rank's sequence part (one all-gather).
template <class Ctx>
Tensor sequence_gather(Ctx& ctx, const Tensor& part, const SplitPart& p, const char* who) {
  Tensor whole = ctx.empty(sequence_whole_shape(part, p.parts, who), part.dtype());
  const std::int64_t outer = part.numel() / (part.dim(part.rank() - 2) * part.shape().back());
  if (outer == 1) {  // the parts are the whole's contiguous blocks
    detail::tensor_group(ctx, who).all_gather(part, whole);
    return whole;
  }
  Tensor parts = ctx.empty({p.parts * part.numel()}, part.dtype());
  detail::tensor_group(ctx, who).all_gather(part, parts);
  detail::sequence_permute(ctx, whole, parts, p.parts, false);
  return whole;
}

/// \brief This rank's sequence part of the sum over the group of `whole` (one reduce-scatter).
template <class Ctx>
Tensor sequence_reduce_scatter(Ctx& ctx, const Tensor& whole, const SplitPart& p, const char* who) {
  Tensor part = ctx.empty(sequence_part_shape(whole, p.parts, who), whole.dtype());
  const std::int64_t outer = whole.numel() / (whole.dim(whole.rank() - 2) * whole.shape().back());
  if (outer == 1) {
    detail::tensor_group(ctx, who).reduce_scatter(whole, part, comm::ReduceOp::kSum);
    return part;
  }
  Tensor parts = ctx.empty({whole.numel()}, whole.dtype());
  detail::sequence_permute(ctx, whole, parts, p.parts, true);
  detail::tensor_group(ctx, who).reduce_scatter(parts, part, comm::ReduceOp::kSum);
  return part;
}

/// \brief This rank's sequence part of a whole activation every rank holds alike (no communication).
template <class Ctx>
Tensor sequence_own(Ctx& ctx, const Tensor& whole, const SplitPart& p, const char* who) {
  Tensor part = ctx.empty(sequence_part_shape(whole, p.parts, who), whole.dtype());
  const std::int64_t outer = whole.numel() / (whole.dim(whole.rank() - 2) * whole.shape().back());
  const std::int64_t row = whole.numel() / outer, mine = row / p.parts;
  if (outer == 1) {
    ctx.device().copy(whole.view({whole.numel()}).slice(p.index * mine, (p.index + 1) * mine), part.view({mine}));
    return part;
  }
  ctx.device().permute_heads(whole.view({1, outer, row}), part.view({1, 1, outer, mine}), p.index * mine, true);
  return part;
}

/// \brief Adds to `grads` the sum over the split group of the shares `compute(shares...)` writes
/// into zeroed tensors shaped like them (a replicated parameter's gradient from this rank's
/// tokens only, inside a sequence-parallel region): one all-reduce of all of them together.
template <class Ctx, class Compute, class... G>
void add_group_sum(Ctx& ctx, Compute&& compute, const char* who, const Tensor& first, const G&... rest) {
  const auto& d = ctx.device();
  const std::array<const Tensor*, 1 + sizeof...(G)> grads{&first, &rest...};
  std::int64_t total = 0;
  for (const Tensor* g : grads) total += g->numel();
  Tensor flat = ctx.empty({total}, first.dtype());
  d.fill(flat, 0.0);
  std::array<Tensor, 1 + sizeof...(G)> shares;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    shares[i] = flat.slice(at, at + grads[i]->numel()).view(grads[i]->shape());
    at += grads[i]->numel();
  }
  std::apply(compute, shares);
  detail::tensor_group(ctx, who).all_reduce(flat, comm::ReduceOp::kSum);
  for (std::size_t i = 0; i < grads.size(); ++i) d.axpy(1.0, shares[i], *grads[i]);
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
