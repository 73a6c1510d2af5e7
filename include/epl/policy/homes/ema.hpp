#pragma once
/// \file
/// \brief An exponential moving average of the weights (EMA; PyTorch's AveragedModel with an EMA
/// rule, timm's ModelEmaV2): after every update, ema = decay ema + (1 - decay) w, over the values
/// this rank updates. Evaluate or export the averaged weights by swapping them in
/// (epl::swap_ema(trainer), and again to swap back). The whole policy is this file: its tag
/// (epl::Ema), its key (ema.decay), its decision, its state (one value an element, sharded as the
/// optimizer's state and saved in checkpoints as `<parameter>@ema`) and its step hook; it is one
/// entry of policy::Homes. docs/policies.md walks through it as the example of adding a policy.
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/tensor.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {

/// \brief Keep an exponential moving average of the weights (ema.decay, 0.999 by default; 0 keeps none).
struct Ema {};
namespace ema {
/// \brief No average (the default; it may be written out, as std::conditional_t<keep, Ema, ema::Off>).
struct Off {};
}  // namespace ema

namespace keys {
inline constexpr Key<double> ema_decay{"ema.decay"};
}  // namespace keys

namespace policy {
/// \brief The EMA's step hook: one buffer over the owned values, updated after each update.
template <class D>
class EmaHook {
 public:
  template <class S>
  void start(const D& d, const S& s, const HookStart& h) {
    on_ = s.ema;
    decay_ = s.ema_decay;
    if (!on_) return;
    std::int64_t n = 0;
    for (const Tensor& t : h.owned) n += t.numel();
    const DType t = h.owned.empty() ? DType::kF32 : h.owned.front().dtype();
    buffer_ = Tensor();
    if constexpr (requires { d.host_zeros(Shape{n}, t, MemoryCategory::kOptimizerState); })
      if (h.host) buffer_ = d.host_zeros({n}, t, MemoryCategory::kOptimizerState);
    if (!buffer_.defined()) buffer_ = d.zeros({n}, t, MemoryCategory::kOptimizerState);
    replaced(d, h.owned);
  }
  [[nodiscard]] bool on() const noexcept { return on_; }
  /// \brief Whether the average is in the weights' place now (epl::swap_ema).
  [[nodiscard]] bool swapped() const noexcept { return swapped_; }
  [[nodiscard]] double decay() const noexcept { return decay_; }
  /// \brief The average, over the owned values in order (empty when off).
  [[nodiscard]] const Tensor& values() const noexcept { return buffer_; }
  /// \brief Before a step: training with the average swapped in would go on from it and average
  /// the weights into it.
  template <class Reference>
  void before_gradients(const D&, std::int64_t, Reference&&) const {
    EPL_CHECK(!swapped_, "trainer.step() with the weights' average swapped in (epl::swap_ema): training would go on from the "
              "average and average the weights into it; call epl::swap_ema(trainer) again first, to swap the weights back");
  }
  /// \brief After an update: ema = decay ema + (1 - decay) w.
  void after_update(const D& d, std::span<const Tensor> owned) {
    each(owned, [&](const Tensor& w, const Tensor& e) {
      d.scale(e, decay_);
      d.axpy(1 - decay_, w, e);
    });
  }
  /// \brief The weights were set from outside (a safetensors load): the average starts from them.
  void replaced(const D& d, std::span<const Tensor> owned) {
    each(owned, [&](const Tensor& w, const Tensor& e) { d.copy(w, e); });
  }
  /// \brief Exchanges the average and the weights.
  void swap(const D& d, std::span<const Tensor> owned) {
    swapped_ = !swapped_;
    each(owned, [&](const Tensor& w, const Tensor& e) {
      const Tensor keep = d.empty(w.shape(), w.dtype(), MemoryCategory::kWorkspace);
      d.copy(w, keep);
      d.copy(e, w);
      d.copy(keep, e);
    });
  }
  /// \brief What a checkpoint keeps: the average, restarted from the weights when a checkpoint
  /// saved without it is loaded.
  void saved(const D& d, std::span<const Tensor> owned, std::vector<SavedState>& out) {
    if (!on_) return;
    EPL_CHECK(!swapped_, "a checkpoint save or load with the weights' average swapped in (epl::swap_ema) would keep the average "
              "as the weights; call epl::swap_ema(trainer) again first (a checkpoint keeps the average beside them, as "
              "<parameter>@ema)");
    out.push_back({"ema", buffer_, [this, &d, owned = std::vector<Tensor>(owned.begin(), owned.end())] { replaced(d, owned); }});
  }

 private:
  template <class F>
  void each(std::span<const Tensor> owned, F&& f) {
    if (!on_) return;
    std::int64_t at = 0;
    for (const Tensor& w : owned) {
      const Tensor flat = w.view({w.numel()});
      f(flat, buffer_.slice(at, at + w.numel()));
      at += w.numel();
    }
    EPL_CHECK(at == buffer_.numel(), "the EMA holds ", buffer_.numel(), " values but the weights it follows have ", at,
              "; it was started on other weights");
  }

  bool on_ = false, swapped_ = false;
  double decay_ = 0;
  Tensor buffer_;
};

namespace home {
struct Ema {
  template <class P>
  static constexpr bool kTag = std::is_same_v<P, epl::Ema> || std::is_same_v<P, ema::Off>;
  using Default = ema::Off;

  struct Keys {
    double ema_decay = 0.999;  ///< ema.decay
    bool ema_decay_given = false;
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.ema_decay = r.get(keys::ema_decay);
    k.ema_decay_given = r.given(keys::ema_decay);
  }
  static std::vector<ConfigKey> config_keys() {
    return {{"ema.decay", 0.999, {}, 0, 1, true,
             "with epl::Ema in the program's policies: after each update the average of the weights moves to decay avg + "
             "(1 - decay) w; 0 keeps no average (epl)",
             false, {}, /*below_max=*/true}};
  }
  struct Compiled {
    bool ema = false;  ///< the program compiled epl::Ema
  };
  template <class Tag>
  static constexpr void compile(Compiled& c) {
    c.ema = std::is_same_v<Tag, epl::Ema>;
  }
  struct Decision {
    bool ema = false;        ///< an average is kept
    double ema_decay = 0;
  };
  template <class K, class C, class S>
  static void decide(const K& k, const C& c, const Facts&, S& s) {
    EPL_CHECK(c.ema || !k.ema_decay_given, "ema.decay = ", k.ema_decay, " but this program keeps no average of the weights; add "
              "epl::Ema to its epl::Policies<...> (keep the other policies) or drop the key");
    EPL_CHECK(k.ema_decay < 1, "ema.decay = ", k.ema_decay, " would keep the first weights forever; give a decay below 1 (0.999 "
              "is usual; the average then spans about 1 / (1 - decay) steps) or 0 to keep no average");
    s.ema = c.ema && k.ema_decay > 0;
    s.ema_decay = k.ema_decay;
  }
  /// One value for each element this rank updates.
  template <class S>
  static constexpr int state_slots(const S& s) {
    return s.ema ? 1 : 0;
  }
  template <class D>
  using Hook = EmaHook<D>;
};
}  // namespace home
}  // namespace policy

/// \brief Exchanges the trainer's weights and their average (epl::Ema): call it, evaluate or read
/// the model, and call it again to train on. A collective (under ZeRO the slices meet again).
template <class Trainer>
void swap_ema(Trainer& trainer) {
  static_assert(requires(Trainer& t) { t.steps(); t.plan().policies.ema; },
                "epl::swap_ema takes an epl::Trainer (the one whose weights and average to swap)");
  trainer.with_owned_values([](const auto& device, std::span<const Tensor> owned, auto& hooks) {
    auto& ema = hooks.template get<policy::home::Ema>();
    EPL_CHECK(ema.on(), "epl::swap_ema: this run keeps no average of the weights: add epl::Ema to the Trainer's "
              "epl::Policies<...>, or, where it is there, set ema.decay above 0 (0 keeps none)");
    ema.swap(device, owned);
  });
}
}  // namespace v0
}  // namespace epl
