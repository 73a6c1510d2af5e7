#pragma once
/// \file
/// \brief policy::RecomputeCheck — gradient_checkpoint.check_gradients: the first step's gradients
/// computed once without recompute and once with it, and the largest difference between them over
/// every rank (recomputing the same forward must give the same gradients, up to rounding). It is
/// the recompute home's step hook (policy/hooks.hpp): armed by the run's decision, it asks for the
/// reference gradients before the first step's and compares after.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/device/device.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

class RecomputeCheck {
 public:
  /// \brief Armed when the run's policies decided so (gradient_checkpoint.check_gradients).
  template <class D, class S, class Start>
  void start(const D&, const S& s, const Start&) {
    on_ = s.check_gradients;
  }
  /// \brief Before the first step's gradients: reference() computes them without recompute, kept.
  template <class D, class Reference>
  void before_gradients(const D& d, std::int64_t step, Reference&& reference) {
    armed_ = on_ && step == 0;
    if (armed_) keep(d, reference());
  }
  /// \brief After them: the difference over world (world rank 0 prints it).
  template <class D>
  void after_gradients(const D& d, const std::vector<Tensor>& grads, comm::Communicator& world) {
    if (std::exchange(armed_, false)) difference_ = compare(d, grads, world);
  }
  /// \brief The first step's largest difference, once the check ran.
  [[nodiscard]] std::optional<double> difference() const noexcept { return difference_; }
  /// \brief Keeps copies of the gradients computed without recompute (those this rank holds).
  template <class D>
  void keep(const D& d, const std::vector<Tensor>& grads) {
    plain_.clear();
    for (const auto& g : grads) {
      plain_.push_back(d.empty(g.shape(), g.dtype(), MemoryCategory::kWorkspace));
      d.copy(g, plain_.back());
    }
  }
  /// \brief The largest absolute difference between the kept gradients and grads (the same
  /// ranges, computed with recompute), over world; world rank 0 prints it with the largest gradient.
  template <class D>
  double compare(const D& d, const std::vector<Tensor>& grads, comm::Communicator& world) {
    double most[2] = {0, 0};  // |plain - recomputed|, |plain|
    for (std::size_t i = 0; i < grads.size() && i < plain_.size(); ++i) {
      most[1] = std::max(most[1], device::max_abs(d, plain_[i]));
      d.axpy(-1.0, grads[i], plain_[i]);
      most[0] = std::max(most[0], device::max_abs(d, plain_[i]));
    }
    plain_.clear();
    world.all_reduce(comm::Buffer(most, 2, DType::kF64), comm::ReduceOp::kMax);
    if (world.rank() == 0) {
      std::printf("gradient_checkpoint.check_gradients: at step 1 the recomputed gradients differ from the full-activation ones by at "
                  "most %.3g (largest gradient %.3g)\n", most[0], most[1]);
      std::fflush(stdout);
    }
    return most[0];
  }

 private:
  std::vector<Tensor> plain_;
  bool on_ = false, armed_ = false;
  std::optional<double> difference_;
};

}  // namespace policy
}  // namespace v0
}  // namespace epl
