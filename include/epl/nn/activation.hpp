#pragma once
/// \file
/// \brief Parameter-free element-wise layers: GELU (tanh form), ReLU, Dropout.
#include "epl/nn/layer.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief GELU, tanh approximation (GPT-2; PyTorch's GELU(approximate="tanh")).
struct GELU {
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor y = ctx.empty_like(x);
    ctx.device().gelu(x, y);
    ctx.save(this, {x});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    Tensor dx = ctx.empty_like(dy);
    ctx.device().gelu_backward(s[0], dy, dx);
    return dx;
  }
};

/// \brief max(x, 0).
struct ReLU {
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor y = ctx.empty_like(x);
    ctx.device().relu(x, y);
    ctx.save(this, {x});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    Tensor dx = ctx.empty_like(dy);
    ctx.device().relu_backward(s[0], dy, dx);
    return dx;
  }
};

/// \brief Inverted dropout with probability p while training, identity otherwise. The mask is
/// drawn from the context's counter-based stream (seed, step, micro-batch, call), so a run is
/// reproducible and backward regenerates the mask instead of storing it.
class Dropout {
 public:
  Dropout() = default;
  explicit Dropout(double p) : p_(p) {
    EPL_CHECK(p >= 0 && p < 1, "Dropout(", p, "): the probability must be in [0, 1)");
  }
  [[nodiscard]] double p() const noexcept { return p_; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!ctx.training() || p_ == 0) {
      ctx.save(this, {}, 0);
      return x;
    }
    auto key = ctx.next_random_key() | 1;  // never 0: 0 marks "no mask applied"
    Tensor y = ctx.empty_like(x);
    ctx.device().dropout(x, y, p_, key);
    ctx.save(this, {}, key);
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Saved s = ctx.restore(this);
    if (s.aux == 0) return dy;
    Tensor dx = ctx.empty_like(dy);
    ctx.device().dropout(dy, dx, p_, s.aux);
    return dx;
  }

 private:
  double p_ = 0.1;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
