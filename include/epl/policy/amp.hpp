#pragma once
/// \file
/// \brief policy::LossScaler — the loss scale of mixed-precision training (amp.loss_scale) and
/// the rule that moves it.
///
/// Backward scales the loss by S, so small gradients stay representable where the GEMMs round
/// their operands to f16; the norm that clipping reads and the optimizer's update divide the
/// reduced gradients by S (MixedPrecision::gradient_factor). A step whose reduced gradients hold a NaN or an infinity (on any rank: the global norm
/// says) is skipped: no update, the optimizer's step count does not move.
///
/// The rule (amp.loss_scale = "dynamic"), PyTorch's GradScaler's and DeepSpeed's:
///   - start at LossScaleOptions::init (65536 = 2^16);
///   - an overflow skips the step and halves S, and restarts the count of good steps;
///   - after growth_interval (2000) good steps in a row, S doubles.
/// A number for amp.loss_scale fixes S: an overflow still skips the step, S stays.
/// max_skips overflows in a row is an error (dynamic: once they have taken the scale below 1): no
/// scale makes the step finite (the forward itself overflows, or training diverged), and
/// skipping on would train nothing, silently.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/tensor.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

/// \brief How the loss scale starts and moves.
struct LossScaleOptions {
  bool dynamic = true;                 ///< amp.loss_scale = "dynamic"; false: a fixed scale
  double init = 65536;                 ///< the scale a run starts at (the fixed scale when not dynamic)
  std::int64_t growth_interval = 2000; ///< good steps in a row before the scale doubles
  int max_skips = 30;                  ///< overflows in a row that end the run with an error
};

/// \brief What one step did to the scale (for amp.debug_log).
struct LossScaleChange {
  bool skipped = false;  ///< the gradients overflowed: the update was skipped
  double before = 0, after = 0;
};

/// \brief The loss scale and its rule. Every rank holds one and feeds it the same verdicts (the
/// global norm's finiteness), so all agree on the scale and on which steps are skipped.
class LossScaler {
 public:
  explicit LossScaler(LossScaleOptions o = {}) : opt_(o), scale_(o.init) {
    EPL_CHECK(o.init >= 1 && o.init <= 0x1p64, "the loss scale must be a number from 1 to 2^64, got ", o.init,
              " (amp.loss_scale, or TrainerOptions::amp_init_scale)");
    EPL_CHECK(o.growth_interval > 0, "the loss scale's growth interval must be at least 1 step, got ", o.growth_interval,
              " (TrainerOptions::amp_growth_interval)");
    EPL_CHECK(o.max_skips > 0, "LossScaleOptions::max_skips must be at least 1, got ", o.max_skips);
  }

  /// \brief What backward multiplies the loss by this step.
  [[nodiscard]] double scale() const noexcept { return scale_; }
  /// \brief Steps skipped so far for overflowing gradients.
  [[nodiscard]] std::int64_t skipped() const noexcept { return skipped_; }
  [[nodiscard]] const LossScaleOptions& options() const noexcept { return opt_; }
  /// \brief What a checkpoint keeps of the rule's progress: the scale, the good steps since it
  /// last changed, the steps skipped so far and the overflows in a row.
  struct State {
    double scale = 0;
    std::int64_t good = 0, skipped = 0, in_a_row = 0;
  };
  [[nodiscard]] State state() const noexcept { return {scale_, good_, skipped_, in_a_row_}; }
  /// \brief Continues from a saved state (a resumed run); a state this rule cannot reach is an
  /// error. A fixed scale stays the one this run was given (amp.loss_scale may change on resume):
  /// the saved scale of a dynamic run would otherwise replace it, and every step could overflow.
  void restore(const State& s) {
    EPL_CHECK(s.scale >= 1 && s.scale <= 0x1p64 && s.good >= 0 && s.skipped >= 0 && s.in_a_row >= 0 && s.in_a_row < opt_.max_skips,
              "a saved loss-scale state (scale ", s.scale, ", ", s.good, " good steps, ", s.skipped, " skipped, ", s.in_a_row,
              " overflows in a row) is not one the loss scaler can be in");
    scale_ = opt_.dynamic ? s.scale : opt_.init;
    good_ = s.good;
    skipped_ = s.skipped;
    in_a_row_ = static_cast<int>(s.in_a_row);
  }

  /// \brief Takes one step's verdict: finite says every reduced gradient was finite. Returns what
  /// changed; `skipped` means the update must not run. Fails after max_skips overflows in a row.
  LossScaleChange update(bool finite) {
    LossScaleChange c{!finite, scale_, scale_};
    if (finite) {
      in_a_row_ = 0;
      if (opt_.dynamic && ++good_ >= opt_.growth_interval) {
        scale_ *= 2;
        good_ = 0;
      }
    } else {
      ++skipped_;
      good_ = 0;
      if (opt_.dynamic) scale_ /= 2;
      ++in_a_row_;
      // dynamic: the overflows that bring a large start down are the rule working; only a run of
      // them that takes the scale below 1 says no scale helps
      EPL_CHECK(in_a_row_ < opt_.max_skips || (opt_.dynamic && scale_ >= 1),
                "mixed precision (amp.level = \"O1\"): the gradients overflowed at ", in_a_row_,
                " steps in a row, the last with loss scale ", c.before,
                opt_.dynamic ? "; lowering the scale did not help, so the forward itself overflows (an f16 activation past 65504) "
                               "or training diverged: use bf16 (epl::Amp<epl::amp::BF16>), lower the learning rate or clip gradients"
                             : " (amp.loss_scale fixed): lower amp.loss_scale or set it to \"dynamic\"");
    }
    c.after = scale_;
    return c;
  }

 private:
  LossScaleOptions opt_;
  double scale_;
  std::int64_t good_ = 0, skipped_ = 0;
  int in_a_row_ = 0;
};

/// \brief What mixed precision does in a step, as the hooks the Trainer calls whether AMP is on or
/// not (off, the default: the loss's plain mean, nothing to unscale, every step updates).
///
/// On (amp.level "O1"): each rank's loss is the mean over its rows, 1/R of the global batch (R
/// row shares), so the passes scale by S / R: every GEMM then sees the magnitudes one device
/// would, and a step overflows alike on any number of ranks; the reduction's mean leaves S / R on
/// the gradients. They are not rewritten: gradient_factor() is R / S, by which the clip's norm is
/// brought back to the loss's own scale and with which the optimizer reads each gradient (its
/// update kernel multiplies by it, with the clip coefficient), so unscaling costs no pass of its
/// own. The scaler's verdict comes from that norm: a NaN or an infinity on any rank skips the step.
class MixedPrecision {
 public:
  MixedPrecision() = default;
  MixedPrecision(const LossScaleOptions& o, int row_shares, bool log) : scaler_(o), shares_(row_shares), log_(log), on_(true) {}
  /// \brief Started from what the run's policies decided (amp.*; a policy::Setup): on or off, over
  /// the run's row shares (the step hooks' start, policy/hooks.hpp).
  template <class D, class S>
  void start(const D&, const S& s, const HookStart& h) {
    *this = s.amp() ? MixedPrecision({.dynamic = s.loss_scale_dynamic, .init = s.loss_scale, .growth_interval = s.growth_interval},
                                     h.row_shares, s.amp_log)
                    : MixedPrecision();
  }

  /// \brief Deprecated: the step hooks start it (start()).
  template <class S>
  [[deprecated("policy::MixedPrecision is started by the policies' step hooks: call start(device, setup, {.row_shares = n})")]]
  MixedPrecision(const S& s, int row_shares) {
    start(0, s, HookStart{.row_shares = row_shares});
  }
  [[nodiscard]] bool on() const noexcept { return on_; }
  /// \brief What a pass multiplies its loss gradient by, besides 1 / micro-batches: S / R on, 1 off.
  [[nodiscard]] double loss_factor() const noexcept { return on_ ? scaler_.scale() / shares_ : 1.0; }
  /// \brief What a pass of one of `micro_batches` multiplies its loss gradient by.
  [[nodiscard]] double pass_scale(int micro_batches) const noexcept { return loss_factor() / micro_batches; }
  /// \brief What the reduced gradients are multiplied by to be at the loss's own scale (1 off).
  [[nodiscard]] double gradient_factor() const noexcept { return on_ ? shares_ / scaler_.scale() : 1.0; }
  /// \brief The step's verdict (finite: the global gradient norm is, so every rank agrees); returns
  /// whether to update (always, off). With `log` (amp.debug_log) each change is printed (by the
  /// caller's rank 0).
  bool accept(bool finite, std::int64_t step, bool print) {
    if (!on_) return true;
    const auto c = scaler_.update(finite);
    if (log_ && print && (c.skipped || c.after != c.before)) {
      if (c.skipped)
        std::printf("amp: step %lld: a gradient overflowed; update skipped, loss scale %g -> %g\n", static_cast<long long>(step), c.before,
                    c.after);
      else
        std::printf("amp: step %lld: %lld step%s without overflow; loss scale %g -> %g\n", static_cast<long long>(step),
                    static_cast<long long>(scaler_.options().growth_interval), scaler_.options().growth_interval == 1 ? "" : "s",
                    c.before, c.after);
      std::fflush(stdout);
    }
    return !c.skipped;
  }
  /// \brief The loss scale of the next step (1 off).
  [[nodiscard]] double loss_scale() const noexcept { return on_ ? scaler_.scale() : 1.0; }
  /// \brief Steps whose update was skipped for an overflow (0 off).
  [[nodiscard]] std::int64_t skipped() const noexcept { return on_ ? scaler_.skipped() : 0; }
  /// \brief The scaler, for a checkpoint (null off).
  [[nodiscard]] LossScaler* scaler() noexcept { return on_ ? &scaler_ : nullptr; }

 private:
  LossScaler scaler_;
  double shares_ = 1;
  bool log_ = false;
  bool on_ = false;
};

}  // namespace policy
}  // namespace v0
}  // namespace epl
