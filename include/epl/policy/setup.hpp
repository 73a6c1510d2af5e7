#pragma once
/// \file
/// \brief policy::decide — what the policies of a run do, from the configuration keys that select
/// and shape them and the policies the program compiled (epl::Policies<...>): each home's choice
/// and checks in turn (policy::Homes). plan::make calls it (the one can_implement): a key asking
/// for what the program did not compile, or for a combination that cannot run, is an error naming
/// the key and the fix, before anything is allocated.
///
/// Keys, Compiled and Setup are made of every home's part, so a new policy adds its fields in its
/// own file. The keys arrive as plain values (policy::Keys: config/ reads them with read_keys), so
/// this layer does not know Config.
#include "epl/policy/policies.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

namespace detail {
template <class H>
concept is_axis = requires { typename H::Choice; };
// a home's part of policy::Choice: its Choice, or an empty base of its own
template <class H, bool = is_axis<H>>
struct choice_part {};
template <class H>
struct choice_part<H, true> : H::Choice {};
template <class L>
struct parts;
template <class... H>
struct parts<List<H...>> {
  struct Keys : H::Keys... {};
  struct Compiled : H::Compiled... {};
  struct Setup : H::Decision... {};
  struct Choice : choice_part<H>... {};
};
}  // namespace detail

/// \brief The configuration keys (and Trainer options) that select and shape a run's policies,
/// each home's. A std::optional is unset when the key holds its default (the compiled policy then decides).
struct Keys : detail::parts<Homes>::Keys {};
/// \brief What the program compiled (what a key may ask for at most), each home's.
struct Compiled : detail::parts<Homes>::Compiled {};
/// \brief What the policies do in a run, each home's decision.
struct Setup : detail::parts<Homes>::Setup {};
/// \brief What the planner chose for the policies it varies (policy/axes.hpp), each axis home's
/// value: zero (ZeRO stage), offload, recompute ("auto" segments), amp.
struct Choice : detail::parts<Homes>::Choice {};

namespace detail {
template <class... H>
Setup decide_each(const Keys& k, const Compiled& c, const Facts& f, List<H...>) {
  Setup s;
  (H::decide(k, c, f, s), ...);
  return s;
}
template <class P, class... H>
constexpr void compile_each(Compiled& c, List<H...>) {
  ([&] {
    if constexpr (has_tag<H>) H::template compile<typename P::template of<H>>(c);
  }(), ...);
}
template <class S, class... H>
constexpr int state_slots_each(const S& s, List<H...>) {
  int n = 0;
  ([&] {
    if constexpr (requires { H::state_slots(s); }) n += H::state_slots(s);
  }(), ...);
  return n;
}
template <class Read, class... H>
void read_each(const Read& r, Keys& k, List<H...>) {
  ([&] {
    if constexpr (requires { H::read(r, k); }) H::read(r, k);
  }(), ...);
}
}  // namespace detail

/// \brief Every policy's choice and check, in the homes' order: each may read what the ones before decided.
EPL_LINKED Setup decide(const Keys& k, const Compiled& c, const Facts& f);

/// \brief What Policies<...> compiled, on a device that computes in f64 or not (nothing for a type
/// that is not a Policies list: the Trainer's static_assert says why).
template <class P>
constexpr Compiled compiled(bool f64) {
  Compiled c;
  c.f64 = f64;
  if constexpr (is_policies<P>::value) detail::compile_each<P>(c, Homes{});
  return c;
}

/// \brief State values each updated element keeps besides the optimizer's (an EMA's copy), sharded
/// like the optimizer's state: from a run's Setup, or at compile time from what it compiled.
template <class S>
constexpr int state_slots(const S& s) {
  return detail::state_slots_each(s, Homes{});
}

/// \brief Every home's keys read from `r` (the configuration): r.get(key), r.given(key) and
/// r.optional(key) (nullopt when the key holds its default).
template <class Read>
void read_keys(const Read& r, Keys& k) {
  detail::read_each(r, k, Homes{});
}

/// \brief Every home's entries of the key table, in the homes' order.
EPL_LINKED std::vector<ConfigKey> config_keys();

}  // namespace policy
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/policy/setup.ipp"
#endif
