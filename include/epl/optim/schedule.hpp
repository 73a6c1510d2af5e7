#pragma once
/// \file
/// \brief optim::LrSchedule — the learning rate of each optimizer step: constant, or a linear
/// warm-up from zero followed by a cosine or linear decay to a floor (Megatron-LM's and nanoGPT's
/// rule), or a function of the program's own. A value, owned by the Trainer, that depends on the
/// optimizer's step count alone: a resumed run, which restores that count, applies the same rates.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numbers>
#include <string>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {
namespace optim {

/// \brief The learning rate of optimizer step t (from 1) from the base rate (the optimizer's
/// options().lr when the run starts):
/// - warm-up, t <= warmup: base t / warmup;
/// - then, with progress q = (t - warmup) / (decay_steps - warmup) capped at 1: kConstant keeps
///   base; kCosine gives floor + (base - floor) (1 + cos(pi q)) / 2; kLinear floor + (base - floor)(1 - q);
/// - a `custom` function, when given, is the whole rule: custom(t).
struct LrSchedule {
  enum class Decay { kConstant, kCosine, kLinear };
  Decay decay = Decay::kConstant;
  std::int64_t warmup = 0;       ///< steps of linear warm-up (lr.warmup_steps)
  std::int64_t decay_steps = 0;  ///< the step at which a decay reaches `floor`, warm-up included (lr.decay_steps)
  double floor = 0;              ///< the rate a decay ends at, and keeps after (lr.min)
  double base = 0;               ///< the peak rate: the optimizer's options().lr, set by the trainer
  std::function<double(std::int64_t step)> custom = nullptr;  ///< the program's own rule (TrainerOptions::lr_schedule)

  /// \brief Whether it changes anything: a constant rate without warm-up leaves the optimizer's
  /// options as the program sets them.
  [[nodiscard]] bool active() const noexcept { return custom != nullptr || warmup > 0 || decay != Decay::kConstant; }

  /// \brief The rate of optimizer step t (from 1).
  [[nodiscard]] double at(std::int64_t t) const {
    if (custom) {
      const double lr = custom(t);
      EPL_CHECK(std::isfinite(lr) && lr >= 0, "the learning-rate schedule (TrainerOptions::lr_schedule) gives ", lr, " for step ", t,
                "; a rate is a finite number that is not negative");
      return lr;
    }
    if (t <= warmup) return base * static_cast<double>(t) / static_cast<double>(warmup);
    if (decay == Decay::kConstant) return base;
    const double q = std::min(1.0, static_cast<double>(t - warmup) / static_cast<double>(decay_steps - warmup));
    const double share = decay == Decay::kCosine ? 0.5 * (1 + std::cos(std::numbers::pi * q)) : 1 - q;
    return floor + (base - floor) * share;
  }

  /// \brief Fails naming the key when the settings describe no schedule.
  void check() const {
    EPL_CHECK(warmup >= 0, "lr.warmup_steps = ", warmup, " is negative; give a step count, or 0 for no warm-up");
    EPL_CHECK(std::isfinite(base) && base >= 0, "the base learning rate ", base, " is not a rate");
    if (custom || decay == Decay::kConstant) return;
    EPL_CHECK(decay_steps > warmup, "lr.schedule = ", name(), " decays from the end of the warm-up (lr.warmup_steps = ", warmup,
              ") to step lr.decay_steps = ", decay_steps, "; give lr.decay_steps greater than lr.warmup_steps, usually the run's "
              "step count");
    EPL_CHECK(std::isfinite(floor) && floor >= 0 && floor <= base, "lr.min = ", floor, " is not a floor under the base rate ", base,
              "; give a rate from 0 to the optimizer's lr");
  }

  /// \brief The schedule's name as lr.schedule says it ("custom" for a function).
  [[nodiscard]] const char* name() const noexcept {
    if (custom) return "custom";
    return decay == Decay::kCosine ? "cosine" : decay == Decay::kLinear ? "linear" : "constant";
  }
  /// \brief The whole schedule as one line, for checkpoints and messages: "cosine warmup=10
  /// decay_steps=1000 min=0 base=0.001".
  [[nodiscard]] std::string describe() const {
    char b[160];
    std::snprintf(b, sizeof b, "%s warmup=%lld decay_steps=%lld min=%.17g base=%.17g", name(), static_cast<long long>(warmup),
                  static_cast<long long>(decay_steps), floor, base);
    return b;
  }
};

}  // namespace optim
}  // namespace v0
}  // namespace epl
