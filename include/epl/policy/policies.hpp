#pragma once
/// \file
/// \brief epl::Policies<...> — the memory and precision policies of a training run, as types:
/// `epl::Policies<epl::Zero<1>, ...>`, the tags the homes of policy::Homes declare (epl::Zero<k>,
/// epl::Offload<level>, epl::Amp<precision>, epl::Ema). Each kind has a default; a Trainer reads
/// them with of<home>.
#include <type_traits>

#include "epl/policy/homes.hpp"

namespace epl {
inline namespace v0 {

/// \brief The policies of a run; any kind not given takes its default (Zero<0>,
/// Offload<offload::None>, Amp<amp::Off>, no Ema).
template <class... P>
struct Policies : policy::Tags<P...> {
  static constexpr bool kDefaultsGiven = policy::detail::defaults_given(policy::Homes{});
  static constexpr bool kClaimedOnce = ((policy::detail::homes_of<P>(policy::Homes{}) <= 1) && ...);
  static_assert(kDefaultsGiven, "a home in policy::Homes declares kTag<P> but no `using Default = ...;` (the tag a run that "
                "gives none takes): add it to that home (docs/policies.md, \"What a home holds\")");
  static_assert(!kDefaultsGiven || (policy::detail::is_any_tag<P>(policy::Homes{}) && ...),
                "epl::Policies<...> takes policy types only: the tags of policy::Homes (epl::Zero<k>, epl::Offload<level>, "
                "epl::Amp<precision>, epl::Ema and the homes a program adds; docs/policies.md lists them); one of the types "
                "given is not a policy");
  static_assert(kClaimedOnce, "epl::Policies<...>: one of the tags given is claimed by two homes of policy::Homes (the kTag<P> "
                "of both holds): a tag belongs to one home; make a home's kTag match its own tags only");
  static_assert(!kClaimedOnce || policy::detail::one_each<P...>(policy::Homes{}),
                "epl::Policies<...> got two tags of one policy (two epl::Zero<k>, two epl::Amp<...>, two epl::Ema, or a tag and "
                "its default); give one of each");
  static_assert(policy::detail::check_each<policy::Tags<P...>>(policy::Homes{}));
  using zero = typename policy::Tags<P...>::template of<policy::home::Zero>;
  using mixed_precision = typename policy::Tags<P...>::template of<policy::home::Amp>;
  using offloading = typename policy::Tags<P...>::template of<policy::home::Offload>;
};

/// \brief True for epl::Policies<...>.
template <class T>
struct is_policies : std::false_type {};
template <class... P>
struct is_policies<Policies<P...>> : std::true_type {};

}  // namespace v0
}  // namespace epl
