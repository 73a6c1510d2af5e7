#pragma once
/// \file
/// \brief epl::Policies<...> — the memory and precision policies of a training run, as types:
/// `epl::Policies<epl::Zero<1>, ...>`. Each policy kind has a default; a Trainer reads them with
/// policy_of.
#include <type_traits>

namespace epl {
inline namespace v0 {

/// \brief ZeRO stage: 0 (every rank holds everything), 1 (optimizer state sharded over the
/// data-parallel group), 2 (+ gradients), 3 (+ parameters).
template <int Stage>
struct Zero {
  static_assert(Stage >= 0 && Stage <= 3, "epl::Zero<Stage>: the stage is 0, 1, 2 or 3");
  static constexpr int kStage = Stage;
};

namespace detail {
template <template <int> class Kind, class P>
struct is_kind : std::false_type {};
template <template <int> class Kind, int N>
struct is_kind<Kind, Kind<N>> : std::true_type {};

template <template <int> class Kind, class Default, class... P>
struct find_policy {
  using type = Default;
};
template <template <int> class Kind, class Default, class First, class... Rest>
struct find_policy<Kind, Default, First, Rest...> {
  using type = std::conditional_t<is_kind<Kind, First>::value, First, typename find_policy<Kind, Default, Rest...>::type>;
};
}  // namespace detail

/// \brief The policies of a run; any kind not given takes its default (Zero<0>).
template <class... P>
struct Policies {
  static_assert((detail::is_kind<Zero, P>::value && ...),
                "epl::Policies<...> takes policy types only: epl::Zero<k> (one of the types given is not a policy)");
  static_assert((0 + ... + static_cast<int>(detail::is_kind<Zero, P>::value)) <= 1,
                "epl::Policies<...> got more than one epl::Zero<k>; give one (it runs every stage up to k)");
  using zero = typename detail::find_policy<Zero, Zero<0>, P...>::type;
};

/// \brief True for epl::Policies<...>.
template <class T>
struct is_policies : std::false_type {};
template <class... P>
struct is_policies<Policies<P...>> : std::true_type {};

}  // namespace v0
}  // namespace epl
