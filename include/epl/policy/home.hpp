#pragma once
/// \file
/// \brief What a policy's home holds. Each policy lives in one file, policy/homes/<name>.hpp, as
/// one struct listed once in policy/homes.hpp (policy::Homes); everything that sees policies
/// (epl::Policies<...>, the configuration table, the key reading, policy::decide, the planner's
/// state bytes, the Trainer's step hooks, checkpoints) goes through that list. A home has:
///
///     struct Keys { ... };          // its configuration keys as plain values (part of policy::Keys)
///     template <class Read> static void read(const Read& r, Keys& k);  // from the run's configuration:
///                                   // r.get(key), r.given(key), r.optional(key) (unset when default)
///     static std::vector<ConfigKey> config_keys();  // their entries of the key table
///     struct Compiled { ... };      // what the program compiled (part of policy::Compiled)
///     struct Decision { ... };      // what it does in this run (part of policy::Setup)
///     template <class K, class C, class S>
///     static void decide(const K& keys, const C& compiled, const Facts& f, S& setup);
///                                   // its choice and checks; may read earlier homes' decisions
/// and, where it has them:
///
///     template <class P> static constexpr bool kTag;  using Default;  // its tag in epl::Policies<...>
///     template <class Tag> static constexpr void compile(Compiled&);  // what its tag compiles
///     template <class Tags> static constexpr void check();            // static_asserts over the tags
///     template <class S> static constexpr int state_slots(const S&);  // values an updated element
///                                   // keeps besides the optimizer's, sharded like its state
///                                   // (S: a Setup or, at compile time, a Compiled)
///     template <class D> using Hook = ...;  // what it does in a step (policy/hooks.hpp)
///
/// and, where the planner varies it (a planner axis, policy/axes.hpp):
///
///     struct Choice { ... };        // the value a plan::Candidate holds (part of policy::Choice)
///     static constexpr void reach(const auto& compiled, auto& most);  // the most the searches try
///     static constexpr int choices(const auto& most);   // values to try: choose(0) ... choose(n - 1)
///     static constexpr void choose(int i, auto& choice);
///     static constexpr int index(const auto& choice);   // choose's inverse
///     static constexpr Refused refusal(const auto& choice, const Layout&);  // why not (Refused{}: fine)
///     static void keys(const auto& choice, auto& out);  // the configuration keys that run it
///     template <class K> static void apply(const auto& choice, K& keys);  // the same into policy::Keys
///     static void label(const auto& choice, std::string& s);  // its part of the plan's short name
///
/// The keys arrive as plain values (config/ reads them; this floor does not know Config).
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "epl/core/key.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

/// \brief What the strategy's plan tells the policies about the run.
struct Facts {
  bool rows_over_tensor = false;  ///< a colocated or separate split: the replicated part reduces over data and tensor
  int chunks = 1;                 ///< model chunks (task graphs) of the run
  bool marks_recompute = false;   ///< the model type holds an epl::Recompute boundary
};

/// \brief What a planner axis's choice may depend on: the layout the other axes chose.
struct Layout {
  int data = 1;                  ///< data-parallel replicas
  int pipeline = 1;              ///< pipeline stages
  bool splits_backward = false;  ///< the schedule splits backward into B and W passes (ZeroBubble)
};

/// \brief Why a planner axis's choice cannot run on a layout: the message, and a function named
/// for the reason that throws it. A compile-time search that prices a refused choice calls it, so
/// the compiler's diagnostic names the reason (g++ prints no string of a constant evaluation).
/// A value, true when it refuses; `Refused{}` accepts. (It was a pointer, null accepting: under
/// -fsanitize=undefined g++ does not fold an object's address against null, so no constant
/// evaluation could test it.)
struct Refused {
  const char* why = nullptr;
  void (*fail)(const char* why) = nullptr;
  constexpr explicit operator bool() const { return why != nullptr; }
};

/// \brief A policy's state that a checkpoint keeps beside the optimizer's: one value for each
/// element this rank updates, laid out as an optimizer state slot (this rank's owned ranges in
/// order). Saved as `<parameter>@<suffix>`; loaded from any layout, as the optimizer state is.
struct SavedState {
  std::string suffix;            ///< the tensor name's part after '@' ("ema")
  Tensor buffer;                 ///< over this rank's owned ranges
  std::function<void()> absent;  ///< called when a loaded checkpoint has none (saved without the policy)
};

/// \brief What a step hook is given when the run starts.
struct HookStart {
  int row_shares = 1;              ///< the data-parallel row shares
  std::span<const Tensor> owned{}; ///< the values this rank updates (its ZeRO slices, or all it holds)
  bool host = false;               ///< the run keeps its state in the device's host pool (offload)
};

/// \brief True when P is Template<...>: a home's tag test for a tag template of type parameters.
template <class P, template <class...> class Template>
inline constexpr bool kInstanceOf = false;
template <template <class...> class Template, class... A>
inline constexpr bool kInstanceOf<Template<A...>, Template> = true;

/// \brief A list of homes.
template <class... H>
struct List {};

}  // namespace policy
}  // namespace v0
}  // namespace epl
