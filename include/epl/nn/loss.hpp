#pragma once
/// \file
/// \brief nn::SoftmaxCrossEntropy — the loss: mean over rows of -log softmax(logits)[target].
#include "epl/nn/layer.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Logits [..., classes] against class ids [...] (i32 or i64). forward returns the mean
/// loss; backward(ctx, scale) returns d(scale * mean loss)/d logits. The softmax is recomputed
/// in backward from the saved logits rather than stored (one [rows, classes] buffer less).
struct SoftmaxCrossEntropy {
  template <class Ctx>
  double forward(Ctx& ctx, const Tensor& logits, const Tensor& targets) {
    const auto rows = logits.shape().rows();
    EPL_CHECK(targets.numel() == rows, "SoftmaxCrossEntropy: ", targets.numel(), " targets ", targets.shape(),
              " for logits ", logits.shape(), "; expected one target per row");
    double total = ctx.device().cross_entropy(logits, targets);
    ctx.save(this, {logits, targets});
    return total / static_cast<double>(rows);
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, double scale = 1.0) {
    Saved s = ctx.restore(this);
    Tensor dlogits = ctx.empty_like(s[0]);
    ctx.device().cross_entropy_backward(s[0], s[1], dlogits, scale / static_cast<double>(s[0].shape().rows()));
    return dlogits;
  }
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
