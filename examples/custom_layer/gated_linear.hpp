#pragma once
// A layer of one's own: a gated linear unit, y = (x W^T + b) * sigmoid(x V^T + c).
// It shows everything a layer needs (docs/custom-layers.md walks through it):
//   - parameters declared with a shape and an init rule (nn::Parameter, nn::Init), and listed in
//     visit() so materialize, the optimizer and data parallelism find them;
//   - activations for backward saved in the pass context (ctx.save / ctx.restore), never in the
//     layer: a pipeline has several micro-batches in flight through one layer;
//   - gradients *accumulated* into grad (beta = 1 in gemm and sum_rows): micro-batches add up;
//   - element-wise math through the device (map with epl::ops functions), so it runs on any device;
//   - written for any context (`template <class Ctx>`), so it trains, and is gradient-checked in
//     f64, with the same code.
#include <epl/epl.hpp>

#include <cmath>

namespace custom {
namespace nn = epl::nn;

class GatedLinear {
 public:
  struct Options {  // a public Options: strategies and the run checks read a layer's shape from it
    std::int64_t in = 0, out = 0;
  };
  nn::Parameter weight;  ///< W [out, in]
  nn::Parameter bias;    ///< b [out]
  nn::Parameter gate;    ///< V [out, in]
  nn::Parameter gate_bias;  ///< c [out]

  GatedLinear() = default;  // layers are default-constructible (docs/architecture.md)
  GatedLinear(std::int64_t in, std::int64_t out)
      : weight(epl::Shape{out, in}, nn::Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        bias(epl::Shape{out}, nn::Init::zeros()),
        gate(epl::Shape{out, in}, nn::Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        gate_bias(epl::Shape{out}, nn::Init::zeros()), opt_{in, out} {
    EPL_CHECK(in > 0 && out > 0, "GatedLinear(", in, ", ", out, "): both sizes must be positive");
  }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }

  template <class V> void visit(V&& v) {
    v("weight", weight);
    v("bias", bias);
    v("gate", gate);
    v("gate_bias", gate_bias);
  }

  template <class Ctx>
  epl::Tensor forward(Ctx& ctx, const epl::Tensor& x) {  // x [..., in] -> [..., out]
    EPL_CHECK(x.shape().back() == opt_.in, "GatedLinear(", opt_.in, " -> ", opt_.out, ") got input ", x.shape());
    const auto& d = ctx.device();
    const epl::Shape out = x.shape().with_back(opt_.out);
    epl::Tensor a = ctx.empty(out, x.dtype()), s = ctx.empty(out, x.dtype()), y = ctx.empty(out, x.dtype());
    d.gemm(x, false, weight.value, true, a, 1, 0, ctx.matmul());  // a = x W^T + b
    d.add_row_vector(a, bias.value);
    d.gemm(x, false, gate.value, true, s, 1, 0, ctx.matmul());    // s = sigmoid(x V^T + c)
    d.add_row_vector(s, gate_bias.value);
    d.map(s, epl::ops::Sigmoid{}, s);
    d.map(y, epl::ops::Mul{}, a, s);          // y = a * s
    ctx.save(this, {x, a, s});
    return y;
  }

  template <class Ctx>
  epl::Tensor backward(Ctx& ctx, const epl::Tensor& dy) {
    nn::Saved saved = ctx.restore(this);
    const epl::Tensor &x = saved[0], &a = saved[1], &s = saved[2];
    const auto& d = ctx.device();
    epl::Tensor da = ctx.empty_like(dy), dg = ctx.empty_like(dy);
    d.map(da, epl::ops::Mul{}, dy, s);                       // dL/da = dy * s
    d.map(dg, epl::ops::Mul{}, dy, a);                       // dL/ds = dy * a
    d.map(dg, epl::ops::SigmoidGradFromOutput{}, s, dg);     // through the sigmoid: * s (1 - s)
    d.gemm(da, true, x, false, weight.grad, 1, 1, ctx.matmul());           // dW += da^T x   (beta 1: accumulate)
    d.sum_rows(da, bias.grad, 1);                            // db += column sums of da
    d.gemm(dg, true, x, false, gate.grad, 1, 1, ctx.matmul());             // dV += dg^T x
    d.sum_rows(dg, gate_bias.grad, 1);                       // dc += column sums of dg
    epl::Tensor dx = ctx.empty_like(x);
    d.gemm(da, false, weight.value, false, dx, 1, 0, ctx.matmul());              // dx = da W + dg V
    d.gemm(dg, false, gate.value, false, dx, 1, 1, ctx.matmul());
    return dx;
  }

 private:
  Options opt_;
};

}  // namespace custom
