#pragma once
/// \file
/// \brief optim::AdamW — Adam with decoupled weight decay (PyTorch's AdamW rule).
#include "epl/optim/optimizer.hpp"

namespace epl {
inline namespace v0 {
namespace optim {

/// \brief p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps).
class AdamW {
 public:
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;
  };
  static constexpr int kStateSlots = 2;  ///< m, v
  static constexpr unsigned kNonNegativeSlots = 0b10;  ///< v, a mean of squares (optim::nonnegative_slots)

  explicit AdamW(Options o) : opt_(o) {
    EPL_CHECK(std::isfinite(o.lr) && o.lr > 0, "AdamW: learning rate ", o.lr, " must be positive and finite");
    EPL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW: betas (", o.beta1, ", ",
              o.beta2, ") must be in [0, 1)");
    EPL_CHECK(std::isfinite(o.eps) && o.eps > 0, "AdamW: eps ", o.eps, " must be positive and finite");
    EPL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "AdamW: weight_decay ", o.weight_decay, " must be finite and not negative");
  }

  /// \brief Step `step` on a range, reading the gradient as grad_scale g.
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor> state, std::int64_t step,
              double grad_scale = 1) const {
    d.adamw_update(value, grad, state[0], state[1], opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, step, grad_scale);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  [[nodiscard]] Options& options() noexcept { return opt_; }

 private:
  Options opt_;
};

}  // namespace optim
}  // namespace v0
}  // namespace epl
