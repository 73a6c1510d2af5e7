#pragma once
/// \file
/// \brief The planner's policy axes: the homes that have a Choice (policy/home.hpp) are the axes
/// both searches vary beside the mesh's and the schedule, in the homes' order. policy::Choice holds
/// their values (plan::Candidate's policies); these functions go over every axis, so a policy with
/// an axis adds it in its own file: what it tries, what it refuses, its keys and its name.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "epl/policy/setup.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

namespace detail {
// A home's refusal: a Refused (true when it refuses), or, from a home written before refusals were
// values, a pointer to one (null: fine), which a constant evaluation under -fsanitize=undefined
// cannot test.
constexpr Refused refused(Refused r) { return r; }
[[deprecated("a home's refusal(choice, layout) returns a policy::Refused by value (Refused{} where it accepts), not a pointer")]]
constexpr Refused refused(const Refused* r) {
  return r ? *r : Refused{};
}
template <class... H>
constexpr int count_axes(List<H...>) {
  return (0 + ... + static_cast<int>(is_axis<H>));
}
template <class F>
constexpr void each_axis(List<>, F&&) {}
template <class H, class... Rest, class F>
constexpr void each_axis(List<H, Rest...>, F&& fn) {
  if constexpr (is_axis<H>) fn.template operator()<H>();
  each_axis(List<Rest...>{}, fn);
}
template <class F>
constexpr void choose_each(const Choice&, const Layout&, Choice& c, F& fn, List<>) {
  fn(static_cast<const Choice&>(c));
}
template <class H, class... Rest, class F>
constexpr void choose_each(const Choice& most, const Layout& l, Choice& c, F& fn, List<H, Rest...>) {
  if constexpr (!is_axis<H>) {
    choose_each(most, l, c, fn, List<Rest...>{});
  } else {
    for (int i = 0; i < H::choices(most); ++i) {
      H::choose(i, c);
      if (!refused(H::refusal(c, l))) choose_each(most, l, c, fn, List<Rest...>{});
    }
  }
}
}  // namespace detail

/// \brief How many policies the planner varies.
inline constexpr int kAxes = detail::count_axes(Homes{});

/// \brief The most each axis goes to with what the program compiled (ZeRO up to its stage, offload
/// and AMP where compiled, recompute always): the searches turn off what they cannot price.
constexpr Choice reach(const Compiled& compiled) {
  Choice most;
  detail::each_axis(Homes{}, [&]<class H>() { H::reach(compiled, most); });
  return most;
}

/// \brief Calls fn(const Choice&) for each choice up to `most` that no axis refuses on layout l,
/// the first axis slowest. Usable in a constant expression.
template <class F>
constexpr void for_each_choice(const Choice& most, const Layout& l, F&& fn) {
  Choice c;
  detail::choose_each(most, l, c, fn, Homes{});
}

/// \brief Why choice c cannot run on layout l (the first axis that refuses it), or `Refused{}`
/// (false) where every axis accepts it.
constexpr Refused refusal(const Choice& c, const Layout& l) {
  Refused why;
  detail::each_axis(Homes{}, [&]<class H>() {
    if (!why) why = detail::refused(H::refusal(c, l));
  });
  return why;
}

/// \brief The configuration keys (key, value) that run choice c, every axis's.
inline void append_keys(const Choice& c, std::vector<std::pair<std::string, std::string>>& out) {
  detail::each_axis(Homes{}, [&]<class H>() { H::keys(c, out); });
}

/// \brief Choice c into the policies' keys (policy::Keys), every axis's.
inline void apply(const Choice& c, Keys& k) {
  detail::each_axis(Homes{}, [&]<class H>() { H::apply(c, k); });
}

/// \brief Choice c's part of a plan's short name (" zero1 recompute"; empty when every axis is off).
inline std::string label(const Choice& c) {
  std::string s;
  detail::each_axis(Homes{}, [&]<class H>() { H::label(c, s); });
  return s;
}

/// \brief Choice c as kAxes integers (each axis's index), to broadcast or store; decode reads them back.
constexpr void encode(const Choice& c, std::int64_t* out) {
  int i = 0;
  detail::each_axis(Homes{}, [&]<class H>() { out[i++] = H::index(c); });
}
constexpr Choice decode(const std::int64_t* in) {
  Choice c;
  int i = 0;
  detail::each_axis(Homes{}, [&]<class H>() { H::choose(static_cast<int>(in[i++]), c); });
  return c;
}

}  // namespace policy
}  // namespace v0
}  // namespace epl
