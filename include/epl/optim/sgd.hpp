#pragma once
/// \file
/// \brief optim::SGD and optim::Momentum (heavy ball, optional Nesterov), PyTorch's rules.
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
  explicit SGD(Options o) : opt_(o) { EPL_CHECK(o.lr > 0, "SGD: learning rate ", o.lr, " must be positive"); }

  template <class M, class D>
  void step(M& model, const D& d) {
    nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) {
      d.sgd_update(p.value, p.grad, opt_.lr, opt_.weight_decay);
    });
    ++steps_;
  }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] Options& options() noexcept { return opt_; }

 private:
  Options opt_;
  std::int64_t steps_ = 0;
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
  explicit Momentum(Options o) : opt_(o) {
    EPL_CHECK(o.lr > 0, "Momentum: learning rate ", o.lr, " must be positive");
    EPL_CHECK(o.momentum >= 0 && o.momentum < 1, "Momentum: momentum ", o.momentum, " must be in [0, 1)");
  }

  template <class M, class D>
  void step(M& model, const D& d) {
    std::size_t i = 0;
    nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) {
      d.momentum_update(p.value, p.grad, state_.slot(i++, 0, p, d), opt_.lr, opt_.momentum, opt_.weight_decay,
                        opt_.nesterov);
    });
    ++steps_;
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
