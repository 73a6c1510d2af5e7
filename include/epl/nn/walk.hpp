#pragma once
/// \file
/// \brief The walk over a model's tree: layers, the parameters and random streams they declare,
/// in one fixed order (the visiting order) that every rank and every strategy shares.
///
/// for_each_member is the one step down the tree: a node's members are what its `visit(v)` names
/// (leaf layers and combinators call v(name, member) for each parameter, stream or sub-layer)
/// or, for an aggregate, its fields (named by index). Parameter and RandomStream have none.
/// Every walk of a model goes through it: the ones below, and the walks over node kinds
/// (nn/tree.hpp) that the strategies use.
#include <array>
#include <string>
#include <string_view>
#include <type_traits>

#include "epl/nn/parameter.hpp"
#include "epl/reflect/fields.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

namespace detail {
template <class T>
inline constexpr bool is_walk_leaf_v = std::is_same_v<T, Parameter> || std::is_same_v<T, RandomStream>;

// The decimal text of I, built at compile time: an aggregate's field names cost no allocation.
template <std::size_t I>
struct index_text {
  static constexpr auto digits = [] {
    std::array<char, 21> s{};
    std::size_t n = 0, v = I;
    do {
      s[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v > 0);
    for (std::size_t i = 0; i < n / 2; ++i) std::swap(s[i], s[n - 1 - i]);
    s[20] = static_cast<char>(n);
    return s;
  }();
  static constexpr std::string_view value{digits.data(), static_cast<std::size_t>(digits[20])};
};
}  // namespace detail

/// \brief True when T names its members itself: it has `visit(v)`.
template <class T>
concept visitable = requires(T& t) { t.visit([](std::string_view, auto&) {}); };

/// \brief Calls fn(name, member) for each member of node, in visiting order: the members its
/// visit(v) names, else an aggregate's fields (named "0", "1", ...); nothing for a Parameter or
/// a RandomStream.
template <class N, class Fn>
void for_each_member(N& node, Fn&& fn) {
  using T = std::remove_cvref_t<N>;
  if constexpr (detail::is_walk_leaf_v<T>) {
    return;
  } else if constexpr (visitable<T>) {
    node.visit([&](std::string_view name, auto& member) { fn(name, member); });
  } else if constexpr (reflect::is_reflectable_v<T>) {
    reflect::for_each_field(node, [&](auto& field, auto index) { fn(detail::index_text<decltype(index)::value>::value, field); });
  }
}

namespace detail {
// fn(path, node) for node and every node below it, pre-order. With kPath false no path is built
// (fn gets an empty string_view): the hot walks (marking gradients ready) allocate nothing.
template <bool kPath, class L, class Fn>
void walk(L& node, Fn& fn, std::string& path) {
  fn(std::string_view(path), node);
  for_each_member(node, [&](std::string_view name, auto& member) {
    const auto size = path.size();
    if constexpr (kPath) path.append(path.empty() ? "" : ".").append(name);
    walk<kPath>(member, fn, path);
    path.resize(size);
  });
}
}  // namespace detail

/// \brief Calls fn(path, Parameter&) for every parameter of l, in visiting order.
template <class L, class Fn>
void visit_parameters(L& l, Fn&& fn) {
  std::string path;
  auto on = [&](std::string_view p, auto& node) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(node)>, Parameter>) fn(p, node);
  };
  detail::walk<true>(l, on, path);
}
/// \brief Calls fn(Node&) for every node of type Node (Parameter, RandomStream) in l, in
/// visiting order, building no paths.
template <class Node, class L, class Fn>
void for_each_of(L& l, Fn&& fn) {
  std::string path;
  auto on = [&](std::string_view, auto& node) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(node)>, Node>) fn(node);
  };
  detail::walk<false>(l, on, path);
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

/// \brief The number of scalar parameters of l (the whole model's, shards counted whole).
template <class L>
std::int64_t parameter_count(L& l) {
  std::int64_t n = 0;
  for_each_parameter(l, [&](Parameter& p) { n += p.global_shape().numel(); });
  return n;
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
