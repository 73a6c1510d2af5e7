#pragma once
/// \file
/// \brief nn::Embedding (token ids -> vectors) and nn::PositionEmbedding (adds a learned
/// vector per position).
#include "epl/nn/layer.hpp"
#include "epl/nn/tensor_parallel.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief A lookup table [vocab, dim]: ids [...] (i32 or i64) -> [..., dim]. Init N(0, 0.02)
/// (GPT-2's). Its input has no gradient: backward returns an undefined tensor.
class Embedding {
 public:
  struct Options {
    std::int64_t vocab = 0, dim = 0;
  };
  Parameter weight;  ///< [vocab, dim]

  Embedding() = default;
  Embedding(std::int64_t vocab, std::int64_t dim)  // checked before the shape, which named no layer
      : weight(([&] { EPL_CHECK(vocab > 0 && dim > 0, "Embedding(", vocab, ", ", dim, "): both sizes must be positive"); }(),
                Shape{vocab, dim}),
               Init::normal(0.02)) {}
  explicit Embedding(Options o) : Embedding(o.vocab, o.dim) {}
  [[nodiscard]] Options options() const { return {weight.global_shape()[0], weight.global_shape()[1]}; }
  template <class V> void visit(V&& v) { v("weight", weight); }

  /// \brief Runs vocabulary-parallel as part `part` of a split group (before materialize): it
  /// holds rows [index V/N, (index + 1) V/N) of the table, looks up the ids in its range (zero
  /// rows for the others) and sums the parts' rows over the group (one all-reduce forward, none
  /// backward). The vocabulary must divide by the parts.
  void parallelize(SplitPart part) {
    weight.shard_along(0, part.index, part.parts, "Embedding(" + std::to_string(weight.shape[0]) + ", " +
                                                      std::to_string(weight.shape[1]) + ").weight (its vocabulary)");
    part_ = part;
  }
  /// \brief Vocabulary-parallel: give this rank's sequence part of the summed rows (a
  /// reduce-scatter instead of the all-reduce, split.sequence_parallel); backward gathers the
  /// output gradient's parts.
  void scatter_sequence_output(bool on) { seq_out_ = on; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& ids) {
    EPL_CHECK(weight.shape.rank() == 2, "Embedding() was default-constructed, with no sizes: construct it as Embedding(vocab, dim)");
    Shape out = ids.shape();
    out.push_back(weight.shape[1]);
    Tensor y = ctx.empty(out, weight.value.dtype());
    const std::int64_t rows = weight.shape[0];
    ctx.device().embedding(ids, weight.value, y, part_.index * rows, rows * part_.parts);
    if (seq_out_) y = sequence_reduce_scatter(ctx, y, part_, "a vocabulary-parallel Embedding");
    else if (!part_.whole()) tensor_all_reduce(ctx, y, "a vocabulary-parallel Embedding");
    ctx.save(this, {ids});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy_in) {
    Saved s = ctx.restore(this);
    const Tensor dy = seq_out_ ? sequence_gather(ctx, dy_in, part_, "a vocabulary-parallel Embedding") : dy_in;
    const std::int64_t rows = weight.shape[0];
    ctx.device().embedding_backward(s[0], dy, weight.grad, part_.index * rows, rows * part_.parts);
    return {};
  }

 private:
  SplitPart part_;
  bool seq_out_ = false;
};

/// \brief x [batch, t, dim] + P[0:t] with P [max_len, dim] learned. Init N(0, 0.02).
class PositionEmbedding {
 public:
  struct Options {
    std::int64_t max_len = 0, dim = 0;
  };
  Parameter weight;  ///< [max_len, dim]

  PositionEmbedding() = default;
  PositionEmbedding(std::int64_t max_len, std::int64_t dim)  // checked before the shape, which named no layer
      : weight(([&] { EPL_CHECK(max_len > 0 && dim > 0, "PositionEmbedding(", max_len, ", ", dim, "): both sizes must be positive"); }(),
                Shape{max_len, dim}),
               Init::normal(0.02)) {}
  explicit PositionEmbedding(Options o) : PositionEmbedding(o.max_len, o.dim) {}
  [[nodiscard]] Options options() const { return {weight.global_shape()[0], weight.global_shape()[1]}; }
  template <class V> void visit(V&& v) { v("weight", weight); }
  /// \brief Its input is part `part` of the sequence (split.sequence_parallel): positions
  /// [index t, (index + 1) t) of its part's t tokens; the table stays whole on every rank.
  void shard_sequence(SplitPart part) { sequence_ = part; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    EPL_CHECK(weight.shape.rank() == 2, "PositionEmbedding() was default-constructed, with no sizes: construct it as "
              "PositionEmbedding(max_len, dim)");
    const auto t = x.rank() == 3 ? x.dim(1) : 0, first = sequence_.index * t;
    EPL_CHECK(x.rank() == 3 && x.dim(2) == weight.shape[1] && t * sequence_.parts <= weight.shape[0],
              "PositionEmbedding(max_len ", weight.shape[0], ", dim ", weight.shape[1], ") got input ", x.shape(),
              sequence_.whole() ? "" : " (a sequence part)", "; expected [batch, t <= ", weight.shape[0] / sequence_.parts, ", ",
              weight.shape[1], "]");
    const auto dim = x.dim(2);
    Tensor y = ctx.empty_like(x);
    ctx.device().copy(x, y);
    // [batch, t*dim] rows each plus the flattened table slice [t*dim] of its positions
    ctx.device().add_row_vector(y.view({x.dim(0), t * dim}), weight.value.slice(first, first + t).view({t * dim}));
    ctx.save(this, {}, static_cast<std::uint64_t>(t));
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    const auto t = static_cast<std::int64_t>(s.aux), dim = dy.dim(2);
    if (sequence_.whole()) {
      ctx.device().sum_rows(dy.view({dy.dim(0), t * dim}), weight.grad.slice(0, t).view({t * dim}), 1);
      return dy;
    }
    // each rank's positions are its own: gather the parts' rows (no sum needed) and add them
    Tensor mine = ctx.empty({t * dim}, dy.dtype());
    ctx.device().sum_rows(dy.view({dy.dim(0), t * dim}), mine, 0);
    Tensor all = ctx.empty({sequence_.parts * t * dim}, dy.dtype());
    detail::tensor_group(ctx, "a PositionEmbedding on sequence parts").all_gather(mine, all);
    ctx.device().axpy(1.0, all, weight.grad.slice(0, sequence_.parts * t).view({sequence_.parts * t * dim}));
    return dy;
  }

 private:
  SplitPart sequence_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
