#pragma once
/// \file
/// \brief policy::Hooks<D> — the step hooks of every home that has one (a home's `Hook<D>`:
/// mixed precision's loss scale, recompute's gradient check, the EMA of the weights), composed, so the Trainer calls each
/// point once whatever the policies: the passes' loss factor and the gradients' factor (the
/// product of the hooks'), the verdict on a step (every hook's; all are told), what follows an
/// update, what a checkpoint keeps. A hook has any of:
///
///     template <class S> void start(const D&, const S& setup, const HookStart&);
///     double loss_factor() const;      double gradient_factor() const;
///     void before_gradients(const D&, std::int64_t step, Reference&& reference);
///     void after_gradients(const D&, const std::vector<Tensor>& grads, comm::Communicator&);
///     bool accept(bool finite, std::int64_t step, bool print);
///     void after_update(const D&, std::span<const Tensor> owned);
///     void replaced(const D&, std::span<const Tensor> owned);
///     void saved(const D&, std::span<const Tensor> owned, std::vector<SavedState>&);
#include <cstdint>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "epl/policy/setup.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

namespace detail {
struct NoHook {};
template <class H, class D>
struct hook_of {
  using type = NoHook;
};
template <class H, class D>
  requires requires { typename H::template Hook<D>; }
struct hook_of<H, D> {
  using type = typename H::template Hook<D>;
};
template <class H, class... Hs>
constexpr std::size_t index_in(List<Hs...>) {
  std::size_t i = 0, at = sizeof...(Hs);
  ((std::is_same_v<H, Hs> ? (at = i, ++i) : ++i), ...);
  return at;
}
}  // namespace detail

template <class D, class L = Homes>
class BasicHooks;

template <class D, class... H>
class BasicHooks<D, List<H...>> {
 public:
  /// \brief Every hook started from the run's decisions.
  void start(const D& d, const Setup& s, const HookStart& h) {
    each([&](auto& k) {
      if constexpr (requires { k.start(d, s, h); }) k.start(d, s, h);
    });
  }
  /// \brief What a pass multiplies its loss gradient by, besides 1 / micro-batches.
  [[nodiscard]] double loss_factor() const {
    double f = 1;
    each([&](const auto& k) {
      if constexpr (requires { k.loss_factor(); }) f *= k.loss_factor();
    });
    return f;
  }
  /// \brief What the reduced gradients are multiplied by to be at the loss's own scale.
  [[nodiscard]] double gradient_factor() const {
    double f = 1;
    each([&](const auto& k) {
      if constexpr (requires { k.gradient_factor(); }) f *= k.gradient_factor();
    });
    return f;
  }
  /// \brief Before a step's gradients; reference() computes them without recompute (and returns
  /// the owned gradients), for a hook that compares.
  template <class Reference>
  void before_gradients(const D& d, std::int64_t step, Reference&& reference) {
    each([&](auto& k) {
      if constexpr (requires { k.before_gradients(d, step, reference); }) k.before_gradients(d, step, reference);
    });
  }
  /// \brief After them (reduced), a collective over world.
  template <class World>
  void after_gradients(const D& d, const std::vector<Tensor>& grads, World& world) {
    each([&](auto& k) {
      if constexpr (requires { k.after_gradients(d, grads, world); }) k.after_gradients(d, grads, world);
    });
  }
  /// \brief Whether to update: every hook's verdict (each is told of the step).
  bool accept(bool finite, std::int64_t step, bool print) {
    bool ok = true;
    each([&](auto& k) {
      if constexpr (requires { k.accept(finite, step, print); }) ok = k.accept(finite, step, print) && ok;
    });
    return ok;
  }
  /// \brief After an update of the owned values.
  void after_update(const D& d, std::span<const Tensor> owned) {
    each([&](auto& k) {
      if constexpr (requires { k.after_update(d, owned); }) k.after_update(d, owned);
    });
  }
  /// \brief The owned values were set from outside (a safetensors load).
  void replaced(const D& d, std::span<const Tensor> owned) {
    each([&](auto& k) {
      if constexpr (requires { k.replaced(d, owned); }) k.replaced(d, owned);
    });
  }
  /// \brief What the hooks keep in a checkpoint, besides the optimizer's state.
  void saved(const D& d, std::span<const Tensor> owned, std::vector<SavedState>& out) {
    each([&](auto& k) {
      if constexpr (requires { k.saved(d, owned, out); }) k.saved(d, owned, out);
    });
  }
  /// \brief Home's hook (policy::home::Amp's MixedPrecision, policy::home::Ema's EmaHook).
  template <class Home>
  [[nodiscard]] auto& get() noexcept {
    return std::get<detail::index_in<Home>(List<H...>{})>(hooks_);
  }
  template <class Home>
  [[nodiscard]] const auto& get() const noexcept {
    return std::get<detail::index_in<Home>(List<H...>{})>(hooks_);
  }

 private:
  template <class F>
  void each(F&& f) {
    std::apply([&](auto&... k) { (f(k), ...); }, hooks_);
  }
  template <class F>
  void each(F&& f) const {
    std::apply([&](const auto&... k) { (f(k), ...); }, hooks_);
  }
  std::tuple<typename detail::hook_of<H, D>::type...> hooks_;
};

/// \brief The step hooks of every policy, on device type D.
template <class D>
using Hooks = BasicHooks<D>;

}  // namespace policy
}  // namespace v0
}  // namespace epl
