#pragma once
/// \file
/// \brief The optimizer concept, optim::Updater (an optimizer's state over flat ranges), and
/// clipping by global norm.
///
/// An optimizer updates one contiguous range of parameter values from the same range of
/// gradients and of its state buffers: it never walks a model. A range is the whole arena of a
/// replicated model, the shard a ZeRO rank owns, or one of the apply groups of a step, all with
/// the same code.
#include <cmath>
#include <concepts>
#include <span>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/device/archetype.hpp"
#include "epl/optim/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace optim {

namespace detail {
// Converts to double and to nothing else: a sixth argument of another type (an integer would
// truncate the factor to 0) does not take it.
struct ExactlyDouble {
  template <class T>
    requires std::same_as<T, double>
  operator T() const;  // NOLINT: the conversion is the point
};
}  // namespace detail

/// \brief O reads the gradient's factor: o.update(device, value, grad, state, step, grad_scale)
/// with a double grad_scale, by which it multiplies each gradient as it reads it.
template <class O>
concept reads_grad_scale = requires(const O& o, const device::Archetype& d, const Tensor& t, std::span<const Tensor> state) {
  o.update(d, t, t, state, std::int64_t{1}, detail::ExactlyDouble{});
};

/// \brief O satisfies optimizer if 1. O::kStateSlots names how many state values it keeps per
/// parameter element (0 for SGD, 1 for Momentum, 2 for AdamW; 0 to 32), 2. o.update(device, value, grad,
/// state, step) applies step number `step` (from 1) to a flat range of values from the same
/// range of gradients and of each state buffer, or o.update(device, value, grad, state, step,
/// grad_scale) does so reading each gradient as grad_scale g (a double; the step's AMP unscale
/// times its clip coefficient, and the gradients are not rewritten; to an optimizer without it
/// the Updater passes gradients it scaled in place), and 3. o.options() returns its
/// hyper-parameters (a non-const options() with a member lr lets a schedule set the rate).
template <class O>
concept optimizer = requires(const O& o, const device::Archetype& d, const Tensor& t, std::span<const Tensor> state) {
  { O::kStateSlots } -> std::convertible_to<int>;
  o.options();
} && O::kStateSlots >= 0 && O::kStateSlots <= 32 && (reads_grad_scale<O> || requires(const O& o, const device::Archetype& d, const Tensor& t, std::span<const Tensor> state) {
  o.update(d, t, t, state, std::int64_t{1});
});

/// \brief The state slots of O whose values are never negative, bit k for slot k (AdamW's second
/// moment, a mean of squares): an optimizer declares them as `static constexpr unsigned
/// kNonNegativeSlots`, and a checkpoint holding a negative value in one is refused on load.
template <class O>
constexpr unsigned nonnegative_slots() noexcept {
  if constexpr (requires { O::kNonNegativeSlots; }) {
    static_assert(O::kStateSlots >= 32 || (static_cast<unsigned>(O::kNonNegativeSlots) >> O::kStateSlots) == 0,
                  "epl: an optimizer's kNonNegativeSlots names a slot past its kStateSlots (bit k is slot k, from 0)");
    return static_cast<unsigned>(O::kNonNegativeSlots);
  } else {
    return 0;
  }
}

/// \brief An optimizer over flat ranges: its state buffers (MemoryCategory::kOptimizerState,
/// zero at the first step, as long as the range given) and its step count.
/// \tparam O models optimizer
template <optimizer O>
class Updater {
  static_assert(reads_grad_scale<O> || !requires(const O& o, const device::Archetype& d, const Tensor& t, std::span<const Tensor> st) {
    o.update(d, t, t, st, std::int64_t{1}, 1.0);
  }, "epl: this optimizer's update takes a sixth argument that is not a double; the sixth argument is the gradient's factor "
     "(grad_scale, a double the update multiplies each gradient by): declare it `double grad_scale = 1`, or drop it");

 public:
  explicit Updater(O opt) : opt_(std::move(opt)) {}

  /// \brief Applies schedule's rate to each later step (an inactive schedule leaves the optimizer's
  /// options().lr as the program sets it). Its base is the optimizer's options().lr now, unless
  /// it names one; an optimizer without options().lr cannot follow an active schedule.
  void set_schedule(LrSchedule schedule) {
    if constexpr (requires { opt_.options().lr = 1.0; }) {
      if (schedule.base == 0) schedule.base = static_cast<double>(opt_.options().lr);
    } else {
      EPL_CHECK(!schedule.active(), "a learning-rate schedule (", schedule.name(), ") was asked for, but this optimizer has no lr to "
                "set: it needs a non-const `Options& options()` whose Options has a member `lr` (a const options() alone can only be "
                "read); add one, or train without a schedule (no lr.* keys, no TrainerOptions::lr_schedule)");
    }
    schedule.check();
    schedule_ = std::move(schedule);
  }
  [[nodiscard]] const LrSchedule& schedule() const noexcept { return schedule_; }
  /// \brief The rate the last step used (the optimizer's options().lr; NaN for an optimizer without one).
  [[nodiscard]] double learning_rate() const {
    if constexpr (requires { opt_.options().lr; }) return static_cast<double>(opt_.options().lr);
    else return std::nan("");
  }
  /// \brief The rate the next step will use.
  [[nodiscard]] double next_learning_rate() const { return schedule_.active() ? schedule_.at(steps_ + 1) : learning_rate(); }

  /// \brief Keeps the state in the device's host pool (offload.level: the values and gradients
  /// the update reads live there too). Takes effect when the state is first allocated.
  void keep_state_in_host_pool(bool on = true) noexcept { host_ = on; }

  /// \brief One step on values and grads, 1-D ranges of equal length (the same length every
  /// step). With groups > 1 the range is updated in that many consecutive parts, so the
  /// update's temporaries peak at about 1 / groups (optimizer.num_apply_group). The update reads
  /// each gradient as grad_scale g.
  template <class D>
  void step(const D& d, const Tensor& values, const Tensor& grads, std::int64_t groups = 1, double grad_scale = 1) {
    step(d, std::span<const Tensor>(&values, 1), std::span<const Tensor>(&grads, 1), groups, grad_scale);
  }
  /// \brief One step on several ranges at once (a ZeRO rank's slices of each unit): values[i]
  /// and grads[i] are 1-D and of one length; the state is one buffer as long as all of them,
  /// each range its consecutive part. groups splits the whole into parts of about equal length.
  template <class D>
  void step(const D& d, std::span<const Tensor> values, std::span<const Tensor> grads, std::int64_t groups = 1,
            double grad_scale = 1) {
    EPL_CHECK(values.size() == grads.size(), "optimizer step on ", values.size(), " value ranges and ", grads.size(), " gradient ranges");
    // checked before anything moves: a refused step changes nothing
    EPL_CHECK(std::isfinite(grad_scale) && grad_scale >= 0, "optimizer step with gradient factor ", grad_scale, ": it must be "
              "finite and not negative (the step's AMP unscale times its clip coefficient; 1 leaves the gradients as they are)");
    std::int64_t n = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      EPL_CHECK(values[i].rank() == 1 && grads[i].rank() == 1 && values[i].numel() == grads[i].numel(), "optimizer step on values ",
                values[i].shape(), " and gradients ", grads[i].shape(), "; both must be 1-D ranges of one length");
      n += values[i].numel();
    }
    if (state_.empty() && n > 0)
      for (int i = 0; i < O::kStateSlots; ++i) state_.push_back(allocate_state(d, n, values[0].dtype()));
    EPL_CHECK(state_.empty() || state_.front().numel() == n, "optimizer step on ranges of ", n, " elements; its state holds ",
              state_.front().numel());
    ++steps_;
    if constexpr (requires { opt_.options().lr = 1.0; })
      if (schedule_.active()) opt_.options().lr = static_cast<decltype(opt_.options().lr)>(schedule_.at(steps_));
    groups = std::max<std::int64_t>(1, std::min(groups, n));
    constexpr bool fused = reads_grad_scale<O>;
    if (!fused && grad_scale != 1)  // an optimizer of the program's own that does not read a factor: the gradients, scaled in place
      for (const auto& g : grads) d.scale(g, grad_scale);
    std::vector<Tensor> part(state_.size());
    // group g covers [n g / groups, n (g + 1) / groups) of the ranges laid end to end
    std::int64_t first = 0;  // where values[i] starts in that line
    for (std::size_t i = 0; i < values.size(); first += values[i].numel(), ++i)
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t b = std::max(first, n * g / groups), e = std::min(first + values[i].numel(), n * (g + 1) / groups);
        if (b >= e) continue;
        for (std::size_t s = 0; s < state_.size(); ++s) part[s] = state_[s].slice(b, e);
        const Tensor value = values[i].slice(b - first, e - first), grad = grads[i].slice(b - first, e - first);
        if constexpr (fused) opt_.update(d, value, grad, std::span<const Tensor>(part), steps_, grad_scale);
        else opt_.update(d, value, grad, std::span<const Tensor>(part), steps_);
      }
  }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] O& optimizer() noexcept { return opt_; }
  [[nodiscard]] const O& optimizer() const noexcept { return opt_; }
  /// \brief The state buffers (kStateSlots of them once the first step ran).
  [[nodiscard]] const std::vector<Tensor>& state() const noexcept { return state_; }
  /// \brief Continues a saved run: `steps` steps taken, and (when steps > 0) zeroed state buffers
  /// of n elements of dtype t, returned for the caller to fill with the saved values.
  template <class D>
  const std::vector<Tensor>& restore(const D& d, std::int64_t steps, std::int64_t n, DType t) {
    EPL_CHECK(steps >= 0, "an optimizer cannot continue from step ", steps);
    state_.clear();
    steps_ = steps;
    if (steps > 0 && n > 0)
      for (int i = 0; i < O::kStateSlots; ++i) state_.push_back(allocate_state(d, n, t));
    return state_;
  }

 private:
  template <class D>
  Tensor allocate_state(const D& d, std::int64_t n, DType t) const {
    if constexpr (requires { d.host_zeros(Shape{n}, t, MemoryCategory::kOptimizerState); })
      if (host_) return d.host_zeros({n}, t, MemoryCategory::kOptimizerState);
    EPL_CHECK(!host_, "the optimizer state was asked to live in the host pool of a device that has none");
    return d.zeros({n}, t, MemoryCategory::kOptimizerState);
  }
  O opt_;
  std::vector<Tensor> state_;
  std::int64_t steps_ = 0;
  bool host_ = false;
  LrSchedule schedule_;
};

/// \brief The L2 norm of gradients held in flat ranges, summed over `group`'s ranks when the
/// ranges are shards (null: the ranges are the whole).
template <class D>
double global_norm(const D& d, std::span<const Tensor> grads, comm::Communicator* group = nullptr) {
  double sq = 0;
  for (const auto& g : grads) sq += d.sum_squares(g);
  if (group && group->size() > 1) group->all_reduce(comm::Buffer(&sq, 1, DType::kF64), comm::ReduceOp::kSum);
  return std::sqrt(sq);
}

/// \brief What gradients whose global L2 norm is `norm` are multiplied by so it is at most max_norm
/// (1 when it is already): PyTorch's clip_grad_norm_ rule, the one every clip in epl applies.
inline double clip_coefficient(double norm, double max_norm) {
  EPL_CHECK(max_norm > 0, "clip_grad_norm: max_norm ", max_norm, " must be positive");
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1 ? coef : 1.0;
}
/// \brief Scales gradients whose global L2 norm is `norm` so it is at most max_norm (no-op when
/// it is already).
template <class D>
void scale_to_norm(const D& d, std::span<const Tensor> grads, double norm, double max_norm) {
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1)
    for (const auto& g : grads) d.scale(g, coef);
}

/// \brief Scales the gradients so their global L2 norm is at most max_norm (no-op when it is
/// already); returns the norm before clipping.
template <class D>
double clip_grad_norm(const D& d, std::span<const Tensor> grads, double max_norm, comm::Communicator* group = nullptr) {
  const double norm = global_norm(d, grads, group);
  scale_to_norm(d, grads, norm, max_norm);
  return norm;
}
template <class D>
double clip_grad_norm(const D& d, const Tensor& grads, double max_norm, comm::Communicator* group = nullptr) {
  return clip_grad_norm(d, std::span<const Tensor>(&grads, 1), max_norm, group);
}

}  // namespace optim
}  // namespace v0
}  // namespace epl
