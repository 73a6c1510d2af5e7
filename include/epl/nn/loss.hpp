#pragma once
/// \file
/// \brief nn::SoftmaxCrossEntropy — the loss: mean over rows of -log softmax(logits)[target],
/// on whole logits or vocabulary-parallel on a split group's parts of them.
#include <cmath>
#include <vector>

#include "epl/nn/layer.hpp"
#include "epl/nn/tensor_parallel.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Logits [..., classes] against class ids [...] (i32 or i64). forward returns the mean
/// loss; backward(ctx, scale) returns d(scale * mean loss)/d logits. The softmax is recomputed
/// in backward from the saved logits rather than stored (one [rows, classes] buffer less).
///
/// Vocabulary-parallel (parallelize, when a model ends in a split group's column-parallel
/// Linear), each rank holds classes [index V/N, (index + 1) V/N) of the logits: the rows' maxima
/// are all-reduced (max), then their sums of exponentials and the targets' logits (sum), so the
/// group moves 3 values a row and no rank ever holds a row's whole logits (Megatron-LM's
/// vocab_parallel_cross_entropy). The loss and the gradient equal the whole logits'.
struct SoftmaxCrossEntropy {
  /// \brief Takes part `part` of the logits' classes, over a split group (before training).
  void parallelize(SplitPart part) { part_ = part; }
  [[nodiscard]] bool vocab_parallel() const noexcept { return !part_.whole(); }

  template <class Ctx>
  double forward(Ctx& ctx, const Tensor& logits, const Tensor& targets) {
    const auto rows = logits.shape().rows();
    // one class id per row: the logits' shape without its last dimension, or the rows laid flat
    // ([rows, 1] is refused, as PyTorch does: a column of ids is often a one-hot or a regression target)
    Shape want;
    for (int d = 0; d + 1 < logits.rank(); ++d) want.push_back(logits.dim(d));
    EPL_CHECK(targets.shape() == want || (targets.rank() == 1 && targets.numel() == rows), "SoftmaxCrossEntropy: targets ",
              targets.shape(), " for logits ", logits.shape(), "; give one class id per row, shaped ", want,
              want.rank() > 1 ? " or " + epl::detail::concat(Shape{rows}) : std::string());
    EPL_CHECK(!is_floating(targets.dtype()), "SoftmaxCrossEntropy: the targets are ", name_of(targets.dtype()),
              "; they are class ids: make them i32 or i64 (device.empty(shape, epl::DType::kI32))");
    if (part_.whole()) {
      double total = ctx.device().cross_entropy(logits, targets);
      ctx.save(this, {logits, targets});
      return total / static_cast<double>(rows);
    }
    const auto& d = ctx.device();
    const std::int64_t cols = logits.shape().back();
    Tensor max = ctx.empty({rows}, logits.dtype()), stats = ctx.empty({2, rows}, logits.dtype());
    d.row_max(logits, max);
    detail::tensor_group(ctx, "a vocabulary-parallel SoftmaxCrossEntropy").all_reduce(max, comm::ReduceOp::kMax);
    Tensor sum_exp = stats.slice(0, 1).view({rows}), target_logit = stats.slice(1, 2).view({rows});
    d.cross_entropy_stats(logits, targets, max, sum_exp, target_logit, part_.index * cols, cols * part_.parts);
    detail::tensor_group(ctx, "a vocabulary-parallel SoftmaxCrossEntropy").all_reduce(stats, comm::ReduceOp::kSum);
    // loss of a row = log sum exp(l - max) + max - l[target], summed in double like the whole loss
    double total = 0;
    visit_float(logits.dtype(), [&]<class T>() {
      std::vector<T> m(static_cast<std::size_t>(rows)), st(static_cast<std::size_t>(2 * rows));
      d.download(max, m.data());
      d.download(stats, st.data());
      for (std::size_t r = 0; r < m.size(); ++r) total += static_cast<double>(std::log(st[r]) + m[r] - st[m.size() + r]);
    });
    ctx.save(this, {logits, targets, max, sum_exp});
    return total / static_cast<double>(rows);
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, double scale = 1.0) {
    Saved s = ctx.restore(this);
    Tensor dlogits = ctx.empty_like(s[0]);
    const double per_row = scale / static_cast<double>(s[0].shape().rows());
    if (part_.whole()) ctx.device().cross_entropy_backward(s[0], s[1], dlogits, per_row);
    else ctx.device().cross_entropy_part_backward(s[0], s[1], s[2], s[3], dlogits, part_.index * s[0].shape().back(), per_row);
    return dlogits;
  }

 private:
  template <class Fn>
  static void visit_float(DType t, Fn&& fn) {
    if (t == DType::kF64) fn.template operator()<double>();
    else if (t == DType::kF32) fn.template operator()<float>();
    else EPL_FAIL("a vocabulary-parallel SoftmaxCrossEntropy takes f32 or f64 logits, got ", name_of(t));
  }
  SplitPart part_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
