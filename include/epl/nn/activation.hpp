#pragma once
/// \file
/// \brief Parameter-free element-wise layers: GELU (tanh form), ReLU, Dropout.
#include "epl/nn/layer.hpp"

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

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!ctx.training() || opt_.p == 0) {
      ctx.save(this, {}, 0);
      return x;
    }
    const auto key = ctx.random_key(stream);  // never 0: 0 marks "no mask applied"
    Tensor y = ctx.empty_like(x);
    ctx.device().dropout(x, y, opt_.p, key, offset(ctx, x));
    ctx.save(this, {}, key);
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    if (s.aux == 0) return dy;
    Tensor dx = ctx.empty_like(dy);
    ctx.device().dropout(dy, dx, opt_.p, s.aux, offset(ctx, dy));
    return dx;
  }

 private:
  // the global position of this pass's first element: samples before it times elements per sample
  template <class Ctx>
  static std::int64_t offset(const Ctx& ctx, const Tensor& x) {
    const std::int64_t per_sample = x.rank() > 0 && x.dim(0) > 0 ? x.numel() / x.dim(0) : x.numel();
    return ctx.first_sample() * per_sample;
  }
  Options opt_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
