#pragma once
/// \file
/// \brief The optimizer concept, per-parameter state, and clipping by global norm.
#include <cmath>
#include <concepts>
#include <vector>

#include "epl/nn/linear.hpp"

namespace epl {
inline namespace v0 {
namespace optim {

/// \brief O satisfies optimizer if O::step(model, device) updates every parameter of the model
/// from its gradient (the archetype model is a single Linear on the CPU).
template <class O>
concept optimizer = requires(O& o, nn::Linear& model, const device::Cpu& d) {
  o.step(model, d);
  { o.steps() } -> std::convertible_to<std::int64_t>;
};

/// \brief Per-parameter state buffers (MemoryCategory::kOptimizerState), allocated on the
/// first step in parameter order and zero-initialised.
class SlotState {
 public:
  template <class D>
  Tensor slot(std::size_t param, std::size_t which, const nn::Parameter& p, const D& d) {
    if (slots_.size() <= param) slots_.resize(param + 1);
    auto& s = slots_[param];
    if (s.size() <= which) s.resize(which + 1);
    if (!s[which].defined()) s[which] = d.zeros(p.shape, p.value.dtype(), MemoryCategory::kOptimizerState);
    return s[which];
  }

 private:
  std::vector<std::vector<Tensor>> slots_;
};

/// \brief Scales every gradient so their global L2 norm is at most max_norm (no-op when it is
/// already); returns the norm before clipping. PyTorch's clip_grad_norm_ rule.
template <class M, class D>
double clip_grad_norm(M& model, const D& d, double max_norm) {
  EPL_CHECK(max_norm > 0, "clip_grad_norm: max_norm ", max_norm, " must be positive");
  double sq = 0;
  nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) { sq += d.sum_squares(p.grad); });
  const double norm = std::sqrt(sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) { d.scale(p.grad, coef); });
  return norm;
}

}  // namespace optim
}  // namespace v0
}  // namespace epl
