#pragma once
/// \file
/// \brief nn::LayerNorm over the last dimension.
#include "epl/nn/layer.hpp"
#include "epl/nn/tensor_parallel.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief y = (x - mean) / sqrt(var + eps) * gamma + beta per row of [..., dim]; gamma = 1,
/// beta = 0 at init; biased variance (PyTorch's).
///
/// Inside a sequence-parallel region it normalises this rank's tokens; its gamma and beta are
/// whole on every rank, their gradients summed over the split group (one small all-reduce).
class LayerNorm {
 public:
  struct Options {
    std::int64_t dim = 0;
    double eps = 1e-5;
  };
  Parameter gamma;  ///< [dim]
  Parameter beta;   ///< [dim]

  LayerNorm() = default;
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5)  // checked before the shapes, which named no layer
      : gamma(([&] {
                EPL_CHECK(dim > 0, "LayerNorm(", dim, "): the size must be positive");
                EPL_CHECK(eps > 0, "LayerNorm(", dim, ", eps ", eps, "): eps must be positive");
              }(),
               Shape{dim}),
              Init::ones()),
        beta(Shape{dim}, Init::zeros()),
        eps_(eps) {}
  explicit LayerNorm(Options o) : LayerNorm(o.dim, o.eps) {}
  [[nodiscard]] Options options() const { return {gamma.shape.rank() ? gamma.global_shape()[0] : 0, eps_}; }
  template <class V> void visit(V&& v) {
    v("weight", gamma);
    v("bias", beta);
  }
  /// \brief Its input is part `part` of the sequence (split.sequence_parallel); whole by default.
  void shard_sequence(SplitPart part) { sequence_ = part; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    EPL_CHECK(gamma.shape.rank() == 1, "LayerNorm() was default-constructed, with no size: construct it as LayerNorm(dim)");
    EPL_CHECK(x.shape().back() == gamma.shape[0], "LayerNorm(", gamma.shape[0], ") got input ", x.shape());
    Tensor y = ctx.empty_like(x);
    Tensor mean = ctx.empty({x.shape().rows()}, x.dtype());
    Tensor rstd = ctx.empty({x.shape().rows()}, x.dtype());
    ctx.device().layer_norm(x, gamma.value, beta.value, y, mean, rstd, eps_);
    ctx.save(this, {x, mean, rstd});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    Tensor dx = ctx.empty_like(s[0]);
    if (sequence_.whole()) {
      ctx.device().layer_norm_backward(s[0], gamma.value, s[1], s[2], dy, dx, gamma.grad, beta.grad);
      return dx;
    }
    // this rank's tokens' shares of the parameter gradients, summed over the group
    add_group_sum(ctx, [&](const Tensor& dgamma, const Tensor& dbeta) {
      ctx.device().layer_norm_backward(s[0], gamma.value, s[1], s[2], dy, dx, dgamma, dbeta);
    }, "a LayerNorm on sequence parts", gamma.grad, beta.grad);
    return dx;
  }

 private:
  double eps_ = 1e-5;
  SplitPart sequence_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
