#pragma once
/// \file
/// \brief The walk over a model's tree: layers, the parameters and random streams they declare,
/// in one fixed order (the visiting order) that every rank and every strategy shares.
///
/// for_each_member is the one step down the tree: a node's members are what its `visit(v)` names
/// (leaf layers and combinators call v(name, member) for each parameter, stream or sub-layer)
/// or, for an aggregate, its fields, named as declared (reflect::field_name_v). A member named ""
/// adds nothing to a path: the strategy wrappers (Split, Replicate, Recompute) name their body so,
/// and a model keeps its parameters' names however it is wrapped. Parameter and RandomStream
/// have no members.
/// Every walk of a model goes through it: the ones below, and the walks over node kinds
/// (nn/tree.hpp) that the strategies use.
#include <array>
#include <charconv>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "epl/nn/parameter.hpp"
#include "epl/reflect/fields.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

namespace detail {
template <class T>
inline constexpr bool is_walk_leaf_v = std::is_same_v<T, Parameter> || std::is_same_v<T, RandomStream>;
}  // namespace detail

/// \brief Opt-in: a member type that is structure only, with no parameters and no name of its own
/// (the entry layer of every epl::Split). A wrapper's own sequence numbers its layers without it.
template <class T>
inline constexpr bool is_structural_v = false;

/// \brief How the layers of a wrapper's own sequence are named (the body of an epl::Split or
/// epl::Recompute, of a several-layer epl::Replicate): as the user's layers alone would be, so
/// that wrapping a model leaves its parameters' names alone. One layer adds nothing to a path;
/// several are numbered "0", "1", ... without the structural ones. A sequence type specialises it
/// (nn::Seq) with kRenames and `names`, one per member.
template <class T>
struct body_names {
  static constexpr bool kRenames = false;
};

namespace detail {
// A visitor that takes any member (a named type: nvcc's front end rejects a lambda inside a
// requires-expression, and the concept would then be false for every layer).
struct AnyMember {
  template <class M>
  void operator()(std::string_view, M&) const {}
};
}  // namespace detail

/// \brief True when T names its members itself: it has `visit(v)`.
template <class T>
concept visitable = requires(T& t, detail::AnyMember v) { t.visit(v); };

/// \brief Calls fn(name, member) for each member of node, in visiting order: the members its
/// visit(v) names, else an aggregate's fields (by their declared names); nothing for a Parameter
/// or a RandomStream.
template <class N, class Fn>
void for_each_member(N& node, Fn&& fn) {
  using T = std::remove_cvref_t<N>;
  if constexpr (detail::is_walk_leaf_v<T>) {
    return;
  } else if constexpr (visitable<T>) {
    static_assert(!std::is_const_v<std::remove_reference_t<N>>,
                  "epl: a model walked as const: its layers name their members in visit(v), which is not a const member "
                  "function; walk the model itself, not a const reference to it");
    node.visit([&](std::string_view name, auto& member) { fn(name, member); });
  } else if constexpr (reflect::is_reflectable_v<T>) {
    reflect::for_each_field(node, [&](auto& field, auto index) { fn(reflect::field_name_v<T, decltype(index)::value>, field); });
  }
}

namespace detail {
// fn(path, node) for node and every node below it, pre-order. With kPath false no path is built
// (fn gets an empty string_view): the hot walks (marking gradients ready) allocate nothing.
// `body`: node is a wrapper's body (named ""), whose own sequence names its layers by body_names.
template <bool kPath, class L, class Fn>
void walk(L& node, Fn& fn, std::string& path, bool body = false) {
  using T = std::remove_cvref_t<L>;
  fn(std::string_view(path), node);
  std::size_t i = 0;
  for_each_member(node, [&](std::string_view name, auto& member) {
    const auto size = path.size();
    const bool nameless = name.empty();
    if constexpr (kPath) {
      if constexpr (body_names<T>::kRenames) {
        if (body) name = body_names<T>::names[i];
      }
      path.append(path.empty() || name.empty() ? "" : ".").append(name);
    }
    ++i;
    walk<kPath>(member, fn, path, nameless);
    path.resize(size);
  });
}
}  // namespace detail

namespace detail {
// The walks over one kind of leaf (Parameter, RandomStream) reach the caller's fn through a
// pointer: the walk is compiled once per node type and leaf kind, not once more for every
// caller's lambda (each of which used to instantiate the whole tree walk again: 40% of a test's
// object code, #38). Node is const when the model is walked as const: an aggregate of parameters
// can be; a layer's visit(v) is not a const member, so a model of layers cannot.
template <class Node>
struct LeafVisitor {
  void* fn;
  void (*call)(void*, std::string_view, Node&);
  template <class M>
  void operator()(std::string_view path, M& node) const {
    if constexpr (std::is_same_v<std::remove_cvref_t<M>, std::remove_const_t<Node>>) call(fn, path, node);
  }
};
template <class Leaf, class L>
using leaf_of_t = std::conditional_t<std::is_const_v<std::remove_reference_t<L>>, const Leaf, Leaf>;
template <bool kPath, class Node, class L, class Fn>
void walk_leaves(L& l, Fn& fn) {
  const LeafVisitor<Node> on{const_cast<void*>(static_cast<const void*>(&fn)), [](void* f, std::string_view path, Node& node) {
                               if constexpr (kPath) {
                                 (*static_cast<Fn*>(f))(path, node);
                               } else {
                                 (*static_cast<Fn*>(f))(node);
                               }
                             }};
  std::string path;
  walk<kPath>(l, on, path);
}
}  // namespace detail

/// \brief Calls fn(path, Parameter&) for every parameter of l, in visiting order.
template <class L, class Fn>
void visit_parameters(L& l, Fn&& fn) {
  detail::walk_leaves<true, detail::leaf_of_t<Parameter, L>>(l, fn);
}
/// \brief Calls fn(Node&) for every node of type Node (Parameter, RandomStream) in l, in
/// visiting order, building no paths.
template <class Node, class L, class Fn>
void for_each_of(L& l, Fn&& fn) {
  detail::walk_leaves<false, detail::leaf_of_t<Node, L>>(l, fn);
}
/// \brief Calls fn(Parameter&) for every parameter of l, in visiting order (no paths built).
template <class L, class Fn>
void for_each_parameter(L& l, Fn&& fn) {
  for_each_of<Parameter>(l, std::forward<Fn>(fn));
}
/// \brief Calls fn(RandomStream&) for every random stream of l, in visiting order.
template <class L, class Fn>
void for_each_stream(L& l, Fn&& fn) {
  for_each_of<RandomStream>(l, std::forward<Fn>(fn));
}
/// \brief Calls fn(path, node) for every node of l's tree (layers, parameters, streams), in
/// visiting order: what a structural fingerprint or a partitioner looks at.
template <class L, class Fn>
void visit_nodes(L& l, Fn&& fn) {
  std::string path;
  detail::walk<true>(l, fn, path);
}

namespace detail {
// " name=value" for a number, a flag or an enumerator (its value); nothing for other fields
template <class F>
void append_option(std::string& out, std::string_view name, const F& f) {
  char buf[64];
  std::to_chars_result r{buf, std::errc()};
  if constexpr (std::is_same_v<F, bool>) {
    const std::string_view text = f ? "true" : "false";
    r.ptr = std::copy(text.begin(), text.end(), buf);
  } else if constexpr (std::is_enum_v<F>) {
    r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(f));
  } else if constexpr (std::is_arithmetic_v<F>) {
    r = std::to_chars(buf, buf + sizeof buf, f);  // the shortest text that reads back to f
  } else {
    return;
  }
  out.append(out.empty() ? "" : " ").append(name).append("=").append(buf, r.ptr);
}
}  // namespace detail

/// \brief A layer's hyper-parameters, the numbers, flags and enumerators of its options(), as
/// text: "dim=64 heads=4". Two layers of one type with the same text compute the same function of
/// the same parameters.
template <class O>
std::string options_text(const O& o) {
  std::string out;
  if constexpr (reflect::is_reflectable_v<O>)
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::append_option(out, reflect::field_name_v<O, I>, reflect::get<I>(o)), ...);
    }(std::make_index_sequence<reflect::field_count_v<O>>{});
  return out;
}
/// \brief Each layer of l that has options(), by path, with its options_text, in visiting order:
/// what a checkpoint records and a resume compares (a head count does not show in any shape).
namespace detail {
// layer_options' visitor: a type of its own, not a lambda of each model's, so that every layer
// type's walk is compiled once whatever model holds it.
struct OptionsOf {
  std::vector<std::pair<std::string, std::string>> out;
  template <class N>
  void operator()(std::string_view path, N& node) {
    if constexpr (requires { node.options(); }) out.emplace_back(std::string(path), options_text(node.options()));
  }
};
}  // namespace detail
template <class L>
std::vector<std::pair<std::string, std::string>> layer_options(L& l) {
  detail::OptionsOf options;
  visit_nodes(l, options);
  return std::move(options.out);
}

/// \brief The number of scalar parameters of l (the whole model's, shards counted whole).
template <class L>
std::int64_t parameter_count(L& l) {
  std::int64_t n = 0;
  for_each_parameter(l, [&](const Parameter& p) { n += p.global_shape().numel(); });
  return n;
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
