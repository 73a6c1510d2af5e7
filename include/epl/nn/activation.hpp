#pragma once
/// \file
/// \brief Parameter-free element-wise layers: GELU (tanh form), ReLU, Dropout.
#include "epl/nn/layer.hpp"
#include "epl/nn/tensor_parallel.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

namespace detail {
// An element-wise layer: forward y = f(x), backward dx = f'(x) dy, from the saved input.
template <class Kernel>
struct Pointwise {
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor y = ctx.empty_like(x);
    Kernel::forward(ctx.device(), x, y);
    ctx.save(this, {x});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    Tensor dx = ctx.empty_like(dy);
    Kernel::backward(ctx.device(), s[0], dy, dx);
    return dx;
  }
};
struct GeluKernel {
  template <class D> static void forward(const D& d, const Tensor& x, const Tensor& y) { d.gelu(x, y); }
  template <class D> static void backward(const D& d, const Tensor& x, const Tensor& dy, const Tensor& dx) { d.gelu_backward(x, dy, dx); }
};
struct ReluKernel {
  template <class D> static void forward(const D& d, const Tensor& x, const Tensor& y) { d.relu(x, y); }
  template <class D> static void backward(const D& d, const Tensor& x, const Tensor& dy, const Tensor& dx) { d.relu_backward(x, dy, dx); }
};
}  // namespace detail

/// \brief GELU, tanh approximation (GPT-2; PyTorch's GELU(approximate="tanh")).
using GELU = detail::Pointwise<detail::GeluKernel>;
/// \brief max(x, 0).
using ReLU = detail::Pointwise<detail::ReluKernel>;

/// \brief A pointwise layer whose width is in its type (the features of a row, times its tokens),
/// so its costs are known at compile time (strategy::static_cost: no parameters, the output it
/// keeps): beside nn::SizedLinear, a model planned by plan::fits and plan::static_search as it is.
template <class Kernel, std::int64_t Width>
struct SizedPointwise : detail::Pointwise<Kernel> {
  static_assert(Width > 0 && Width <= (std::int64_t{1} << 59), "epl: a sized pointwise layer's Width must be positive (and at most "
                                                               "2^59, so that its bytes count in 64 bits)");
  static constexpr std::int64_t kWidth = Width;
  template <class V> void visit(V&&) {}  // nothing to visit (and no fields to reflect: it is a derived type)
};
template <std::int64_t Width>
using SizedReLU = SizedPointwise<detail::ReluKernel, Width>;
template <std::int64_t Width>
using SizedGELU = SizedPointwise<detail::GeluKernel, Width>;

/// \brief Inverted dropout with probability p while training, identity otherwise. Its mask comes
/// from the layer's own random stream at the global position of each element (see
/// Context::random_key), so a run is reproducible, every strategy and a recomputed forward draw
/// the single-device mask, and backward regenerates the mask instead of storing it.
class Dropout {
 public:
  struct Options {
    double p = 0.1;
  };
  RandomStream stream;

  Dropout() = default;
  explicit Dropout(double p) : opt_{p} {
    EPL_CHECK(p >= 0 && p < 1, "Dropout(", p, "): the probability must be in [0, 1)");
  }
  explicit Dropout(Options o) : Dropout(o.p) {}
  [[nodiscard]] double p() const noexcept { return opt_.p; }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  template <class V> void visit(V&& v) { v("stream", stream); }

  /// \brief Its input will be part `part` of the last dimension (inside a split group, after a
  /// column-parallel Linear): each element then draws at its position in the whole tensor.
  void shard_columns(SplitPart part) { columns_ = part; }
  /// \brief Its input will be part `part` of the sequence (split.sequence_parallel): each element
  /// draws at its position in the whole tensor.
  void shard_sequence(SplitPart part) { sequence_ = part; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!ctx.training() || opt_.p == 0) {
      ctx.save(this, {}, 0);
      return x;
    }
    const auto key = ctx.random_key(stream);  // never 0: 0 marks "no mask applied"
    Tensor y = ctx.empty_like(x);
    apply(ctx, x, y, key);
    ctx.save(this, {}, key);
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    if (s.aux == 0) return dy;
    Tensor dx = ctx.empty_like(dy);
    apply(ctx, dy, dx, s.aux);
    return dx;
  }

 private:
  // The mask drawn at the global position of each element: the samples before this pass's first
  // times elements per sample (of the whole tensor, when this is a column part), plus its own.
  template <class Ctx>
  void apply(const Ctx& ctx, const Tensor& x, const Tensor& y, std::uint64_t key) const {
    if (!sequence_.whole()) {
      // x [..., s/N, d] is part r of the sequence: each of its outer rows holds columns
      // [r s d / N, (r + 1) s d / N) of the whole's row; a 2-D [rows/N, d] is one row of rows d
      const std::int64_t row = x.dim(x.rank() - 2) * x.shape().back(), outer = x.numel() / row;
      const std::int64_t per_sample = x.rank() > 2 ? row * sequence_.parts * (outer / x.dim(0)) : x.shape().back();
      ctx.device().dropout_columns(x.view({outer, row}), y.view({outer, row}), opt_.p, key, ctx.first_sample() * per_sample,
                                   row * sequence_.parts, sequence_.index * row);
      return;
    }
    const std::int64_t per_sample = (x.rank() > 0 && x.dim(0) > 0 ? x.numel() / x.dim(0) : x.numel()) * columns_.parts;
    const std::int64_t offset = ctx.first_sample() * per_sample;
    if (columns_.whole()) ctx.device().dropout(x, y, opt_.p, key, offset);
    else ctx.device().dropout_columns(x, y, opt_.p, key, offset, x.shape().back() * columns_.parts, columns_.index * x.shape().back());
  }
  Options opt_;
  SplitPart columns_, sequence_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
