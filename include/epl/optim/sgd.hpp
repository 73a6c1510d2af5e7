#pragma once
/// \file
/// \brief optim::SGD and optim::Momentum (heavy ball, optional Nesterov), PyTorch's rules.
#include <cmath>

#include "epl/optim/optimizer.hpp"

namespace epl {
inline namespace v0 {
namespace optim {

/// \brief p -= lr (g + weight_decay p).
class SGD {
 public:
  struct Options {
    double lr = 0.01;
    double weight_decay = 0;
  };
  static constexpr int kStateSlots = 0;

  explicit SGD(Options o) : opt_(o) {
    EPL_CHECK(std::isfinite(o.lr) && o.lr > 0, "SGD: learning rate ", o.lr, " must be positive and finite");
    EPL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "SGD: weight_decay ", o.weight_decay, " must be finite and not negative");
  }
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor>, std::int64_t, double grad_scale = 1) const {
    d.sgd_update(value, grad, opt_.lr, opt_.weight_decay, grad_scale);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  [[nodiscard]] Options& options() noexcept { return opt_; }

 private:
  Options opt_;
};

/// \brief v = momentum v + (g + weight_decay p); p -= lr v, or with Nesterov
/// p -= lr (g + momentum v). EPL's MomentumOptimizer and PyTorch's SGD(momentum) alike.
class Momentum {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.9;
    bool nesterov = false;
    double weight_decay = 0;
  };
  static constexpr int kStateSlots = 1;  ///< velocity

  explicit Momentum(Options o) : opt_(o) {
    EPL_CHECK(std::isfinite(o.lr) && o.lr > 0, "Momentum: learning rate ", o.lr, " must be positive and finite");
    EPL_CHECK(o.momentum >= 0 && o.momentum < 1, "Momentum: momentum ", o.momentum, " must be in [0, 1)");
    EPL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "Momentum: weight_decay ", o.weight_decay, " must be finite and not negative");
  }
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor> state, std::int64_t,
              double grad_scale = 1) const {
    d.momentum_update(value, grad, state[0], opt_.lr, opt_.momentum, opt_.weight_decay, opt_.nesterov, grad_scale);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  [[nodiscard]] Options& options() noexcept { return opt_; }

 private:
  Options opt_;
};

}  // namespace optim
}  // namespace v0
}  // namespace epl
