#pragma once
/// \file
/// \brief nn::Linear: y = x W^T + b over the last dimension.
#include <cmath>

#include "epl/nn/layer.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief A fully connected layer. W is [out, in] (PyTorch's layout, so a column-parallel
/// shard is a contiguous block of rows), b is [out]. Input [..., in] -> output [..., out].
/// Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear {
 public:
  struct Options {
    std::int64_t in = 0, out = 0;
    bool bias = true;
  };
  Parameter weight;  ///< [out, in]
  Parameter bias;    ///< [out]; empty shape when built without bias

  Linear() = default;  ///< an empty layer; aggregates of layers need one (see docs/architecture.md)
  Linear(std::int64_t in, std::int64_t out, bool with_bias = true)
      : weight(Shape{out, in}, Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        bias(with_bias ? Shape{out} : Shape{0}, Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        opt_{in, out, with_bias} {
    EPL_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): both sizes must be positive");
  }
  explicit Linear(Options o) : Linear(o.in, o.out, o.bias) {}

  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  [[nodiscard]] std::int64_t in_features() const noexcept { return opt_.in; }
  [[nodiscard]] std::int64_t out_features() const noexcept { return opt_.out; }

  template <class V> void visit(V&& v) {
    v("weight", weight);
    if (opt_.bias) v("bias", bias);
  }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    EPL_CHECK(x.shape().back() == opt_.in, "Linear(", opt_.in, " -> ", opt_.out, ") got input ", x.shape(),
              "; its last dimension must be ", opt_.in);
    const auto& d = ctx.device();
    Tensor y = ctx.empty(x.shape().with_back(opt_.out), x.dtype());
    d.gemm(x, false, weight.value, true, y);  // [rows, in] x [in, out]
    if (opt_.bias) d.add_row_vector(y, bias.value);
    ctx.save(this, {x});
    return y;
  }

  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    const Tensor& x = s[0];
    const auto& d = ctx.device();
    d.gemm(dy, true, x, false, weight.grad, 1, 1);  // dW += dy^T x: [out, rows] x [rows, in]
    if (opt_.bias) d.sum_rows(dy, bias.grad, 1);
    Tensor dx = ctx.empty_like(x);
    d.gemm(dy, false, weight.value, false, dx);     // dx = dy W: [rows, out] x [out, in]
    return dx;
  }

 private:
  Options opt_{0, 0, false};
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
