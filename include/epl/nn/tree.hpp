#pragma once
/// \file
/// \brief The kinds of node a model tree is made of, and the walks over them.
///
/// A model is a tree: aggregates, combinators and strategies above, leaf layers below.
/// node_traits<T> says which kind a node type is and lists its children's types in forward order
/// (the members for_each_member reaches). Combinators and strategies specialise it beside their
/// own definition; the primary template classifies the rest: an aggregate of layers is a
/// sequence, anything else a leaf. Every walk that cares about structure (the pipeline's units,
/// a Split's shards, a strategy's degree, whether a Recompute is marked) switches on the kind and
/// steps down with for_each_member, so a new combinator or strategy is one specialisation here
/// and no edit in the walks.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "epl/nn/layer.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief What a node of a model tree is.
enum class NodeKind : std::uint8_t {
  kLeaf,       ///< a layer with a forward and a backward of its own (Linear, attention, a user's class)
  kSequence,   ///< parts run in order, a pipeline may cut between them: an aggregate of layers, Seq
  kRepeat,     ///< as a sequence, of n parts of one type, n known at run time: Repeat
  kResidual,   ///< x + body(x): Residual (its children are the body's parts)
  kRecompute,  ///< a recompute boundary around its body: Recompute
  kReplicate,  ///< a strategy: data parallel over D devices (one child, the body)
  kSplit,      ///< a strategy: tensor parallel over N devices (one child, the body)
  kPipeline,   ///< a strategy: its stages in order
};

/// \brief A list of types: a node's children.
template <class... T>
struct type_list {};

namespace detail {
template <class T, class I>
struct field_types;
template <class T, std::size_t... I>
struct field_types<T, std::index_sequence<I...>> {
  using type = type_list<reflect::field_t<I, T>...>;
};
template <class T>
consteval bool is_sequence_aggregate() {
  if constexpr (!leaf_layer<T> && reflect::is_reflectable_v<T>) return reflect::field_count_v<T> > 0;
  else return false;
}
// An aggregate's field types; nothing for any other type (whose fields PFR must not be asked for).
template <class T, bool kAggregate = is_sequence_aggregate<T>()>
struct children_of {
  using type = type_list<>;
};
template <class T>
struct children_of<T, true> {
  using type = typename field_types<T, std::make_index_sequence<reflect::field_count_v<T>>>::type;
};
}  // namespace detail

/// \brief The kind of node type T and its children's types, in forward order. The primary
/// template: an aggregate of layers is a sequence of its fields; any other type is a leaf.
/// Specialise it (with `kind` and `children`, and a strategy's `degree`) for a new combinator.
template <class T, class = void>
struct node_traits {
  static constexpr NodeKind kind = detail::is_sequence_aggregate<T>() ? NodeKind::kSequence : NodeKind::kLeaf;
  using children = typename detail::children_of<T>::type;
};

/// \brief The kind of node type T.
template <class T>
inline constexpr NodeKind kind_of_v = node_traits<std::remove_cvref_t<T>>::kind;
/// \brief Whether a node of kind k runs its children in order, each a part a pipeline may cut
/// before (kSequence, kRepeat).
constexpr bool is_sequence(NodeKind k) { return k == NodeKind::kSequence || k == NodeKind::kRepeat; }

/// \brief Calls fn(child) for each child of node l in forward order: a sequence's parts, a
/// wrapper's body (a residual's parts), a pipeline's stages; nothing for a leaf (its members are
/// its own business: parameters, streams, the layers it runs itself).
template <class L, class Fn>
void for_each_child(L& l, Fn&& fn) {
  if constexpr (kind_of_v<L> != NodeKind::kLeaf) for_each_member(l, [&](std::string_view, auto& child) { fn(child); });
}

namespace detail {
template <template <class> class Pred, class T>
consteval bool any_node();
template <template <class> class Pred, class... C>
consteval bool any_child(type_list<C...>) {
  return (any_node<Pred, C>() || ...);
}
template <template <class> class Pred, class T>
consteval bool any_node() {
  if constexpr (Pred<T>::value) return true;
  else return any_child<Pred>(typename node_traits<T>::children{});
}
template <class T>
struct is_recompute_node : std::bool_constant<node_traits<T>::kind == NodeKind::kRecompute> {};
}  // namespace detail

/// \brief True when Pred<N>::value holds for a node type below T (T itself not counted).
template <class T, template <class> class Pred>
inline constexpr bool contains_below_v = detail::any_child<Pred>(typename node_traits<std::remove_cvref_t<T>>::children{});

/// \brief True when Pred<N>::value holds for T or a node type anywhere below it (by type: a
/// Repeat counts as holding its layer type).
template <class T, template <class> class Pred>
inline constexpr bool contains_node_v = detail::any_node<Pred, std::remove_cvref_t<T>>();

/// \brief True when a recompute boundary (nn::Recompute) lies anywhere in model type M.
template <class M>
inline constexpr bool has_recompute_v = contains_node_v<M, detail::is_recompute_node>;
/// \brief Whether model instance m holds a recompute boundary: has_recompute_v, but by instance,
/// so a Repeat of none (a model built with 0 blocks) marks nothing.
template <class M>
bool has_recompute(M& m) {
  if constexpr (!has_recompute_v<M>) return false;
  else if constexpr (kind_of_v<M> == NodeKind::kRecompute) return true;
  else {
    bool any = false;
    for_each_child(m, [&](auto& child) { any = any || has_recompute(child); });
    return any;
  }
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
