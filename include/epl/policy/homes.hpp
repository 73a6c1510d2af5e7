#pragma once
/// \file
/// \brief policy::Homes — every policy's home (policy/home.hpp says what one holds), in the order
/// their decisions are taken: each may read what the ones before it decided. A new policy is a
/// file in homes/ and an entry here.
#include "epl/policy/home.hpp"
#include "epl/policy/homes/amp.hpp"
#include "epl/policy/homes/communication.hpp"
#include "epl/policy/homes/ema.hpp"
#include "epl/policy/homes/offload.hpp"
#include "epl/policy/homes/precision.hpp"
#include "epl/policy/homes/recompute.hpp"
#include "epl/policy/homes/zero.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

using Homes = List<home::Precision, home::Zero, home::Offload, home::Communication, home::Recompute, home::Amp, home::Ema>;

namespace detail {
template <class H>
concept has_tag = requires { typename H::Default; };
template <class H, class P>
constexpr bool is_tag_of() {
  if constexpr (has_tag<H>) return H::template kTag<P>;
  else return false;
}
template <class P, class... H>
constexpr bool is_any_tag(List<H...>) {
  return (is_tag_of<H, P>() || ...);
}
// The first of P... that is H's tag, else H's default.
template <class H, class... P>
struct tag_in {
  using type = typename H::Default;
};
template <class H, class First, class... Rest>
struct tag_in<H, First, Rest...> {
  using type = std::conditional_t<is_tag_of<H, First>(), First, typename tag_in<H, Rest...>::type>;
};
// How many of P... are H's tags.
template <class H, class... P>
constexpr int tags_of() {
  return (0 + ... + static_cast<int>(is_tag_of<H, P>()));
}
template <class Tags, class... H>
constexpr bool check_each(List<H...>) {
  ([] {
    if constexpr (requires { H::template check<Tags>(); }) H::template check<Tags>();
  }(), ...);
  return true;
}
template <class... P, class... H>
constexpr bool one_each(List<H...>) {
  return ((tags_of<H, P...>() <= 1) && ...);
}
// A home that declares tags (kTag) names its default (a home of a program's own may forget it).
template <class H>
concept declares_tags = requires { H::template kTag<int>; };
template <class... H>
constexpr bool defaults_given(List<H...>) {
  return ((!declares_tags<H> || has_tag<H>) && ...);
}
// How many homes claim P as their tag (two kTag that both hold: one home's tag matching another's).
template <class P, class... H>
constexpr int homes_of(List<H...>) {
  return (0 + ... + static_cast<int>(is_tag_of<H, P>()));
}
}  // namespace detail

/// \brief The tags of P... by home: of<H> is H's tag among them, or H's default.
template <class... P>
struct Tags {
  template <class H>
  using of = typename detail::tag_in<H, P...>::type;
};

}  // namespace policy
}  // namespace v0
}  // namespace epl
