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
  explicit AdamW(Options o) : opt_(o) {
    EPL_CHECK(o.lr > 0, "AdamW: learning rate ", o.lr, " must be positive");
    EPL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW: betas (", o.beta1, ", ",
              o.beta2, ") must be in [0, 1)");
    EPL_CHECK(o.eps > 0, "AdamW: eps ", o.eps, " must be positive");
  }

  template <class M, class D>
  void step(M& model, const D& d) {
    ++steps_;
    std::size_t i = 0;
    nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) {
      Tensor m = state_.slot(i, 0, p, d);
      Tensor v = state_.slot(i, 1, p, d);
      d.adamw_update(p.value, p.grad, m, v, opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, steps_);
      ++i;
    });
  }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] Options& options() noexcept { return opt_; }

 private:
  Options opt_;
  SlotState state_;
  std::int64_t steps_ = 0;
};

}  // namespace optim
}  // namespace v0
}  // namespace epl
