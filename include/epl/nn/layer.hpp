#pragma once
/// \file
/// \brief The layer concepts and the generic forward / backward / parameter walk that make a
/// user's aggregate of layers a layer itself.
///
/// A type is a layer if 1. it has forward(ctx, x) -> Tensor and backward(ctx, dy) -> Tensor
/// members (a leaf or combinator), or 2. it is an aggregate every field of which is a layer
/// (a user struct: forward in field order, backward in reverse). Types the user cannot edit
/// opt in through enable_layer<T> plus free forward/backward found by argument lookup.
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "epl/device/cpu/cpu.hpp"
#include "epl/nn/context.hpp"
#include "epl/nn/parameter.hpp"
#include "epl/reflect/fields.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// The context archetype the concepts check layers against.
using CpuContext = Context<device::Cpu>;

/// \brief T satisfies leaf_layer if it has forward(ctx, x) and backward(ctx, dy), each
/// returning a Tensor, for a CPU context (the archetype every layer must run on).
template <class T>
concept leaf_layer = requires(T& l, CpuContext& ctx, const Tensor& x) {
  { l.forward(ctx, x) } -> std::same_as<Tensor>;
  { l.backward(ctx, x) } -> std::same_as<Tensor>;
};

template <class T> struct is_layer;

namespace detail {
template <class T>
consteval bool aggregate_of_layers() {
  if constexpr (reflect::is_reflectable_v<T>) {
    if constexpr (reflect::field_count_v<T> == 0) return false;
    else return reflect::all_fields<T, is_layer>();
  } else {
    return false;
  }
}
}  // namespace detail

/// \brief True when T is a layer: a leaf_layer or an aggregate of layers.
template <class T>
struct is_layer : std::bool_constant<leaf_layer<T> || detail::aggregate_of_layers<T>()> {};

/// \brief T satisfies layer if it is a leaf layer or an aggregate whose fields are layers.
template <class T>
concept layer = is_layer<std::remove_cvref_t<T>>::value;

namespace detail {
/// Fails with the parent aggregate, the field index and the field's type in the instantiation.
template <class Parent, std::size_t Index, class Field>
consteval void require_layer_field() {
  static_assert(is_layer<Field>::value,
                "epl: a field of a layer struct is not a layer. Each field needs forward(ctx, x) and "
                "backward(ctx, dy) members returning epl::Tensor, or must itself be an aggregate of "
                "layers. The offending field type is `Field` in this instantiation.");
}
template <class Parent>
consteval void require_fields() {
  static_assert(reflect::field_count_v<Parent> > 0, "epl: an empty struct is not a layer");
  []<std::size_t... I>(std::index_sequence<I...>) {
    (require_layer_field<Parent, I, reflect::field_t<I, Parent>>(), ...);
  }(std::make_index_sequence<reflect::field_count_v<Parent>>{});
}
}  // namespace detail

/// \brief Compile-time check with a readable message naming the first offending field type.
template <class L>
consteval void require_layer() {
  if constexpr (!leaf_layer<L>) {
    static_assert(reflect::is_reflectable_v<L>,
                  "epl: this type is not a layer: give it forward(ctx, x) and backward(ctx, dy) members "
                  "returning epl::Tensor, or make it an aggregate struct of layers");
    if constexpr (reflect::is_reflectable_v<L>) detail::require_fields<L>();
  }
}

/// \brief Runs layer l forward on x.
template <class L, class Ctx>
Tensor forward(L& l, Ctx& ctx, const Tensor& x) {
  require_layer<L>();
  if constexpr (leaf_layer<L>) {
    return l.forward(ctx, x);
  } else {
    Tensor h = x;
    reflect::for_each_field(l, [&](auto& field, auto) { h = nn::forward(field, ctx, h); });
    return h;
  }
}

template <class L, class Fn>
void visit_parameters(L& l, Fn&& fn, const std::string& prefix);

/// \brief Runs layer l backward: accumulates parameter gradients, returns the input gradient.
/// When the context listens, a leaf layer's parameters are announced as final once its
/// backward returns.
template <class L, class Ctx>
Tensor backward(L& l, Ctx& ctx, const Tensor& dy) {
  require_layer<L>();
  if constexpr (leaf_layer<L>) {
    Tensor dx = l.backward(ctx, dy);
    if (ctx.wants_gradients()) nn::visit_parameters(l, [&](std::string_view, Parameter& p) { ctx.gradient_ready(p); }, "");
    return dx;
  } else {
    Tensor g = dy;
    reflect::for_each_field_reverse(l, [&](auto& field, auto) { g = nn::backward(field, ctx, g); });
    return g;
  }
}

/// \brief Calls fn(path, Parameter&) for every parameter of l, in a fixed order. Leaf layers
/// list their members through `visit(v)`, calling v(name, member) for parameters and
/// sub-layers alike; aggregates are walked field by field (paths use field indices).
template <class L, class Fn>
void visit_parameters(L& l, Fn&& fn, const std::string& prefix) {
  if constexpr (std::is_same_v<std::remove_cvref_t<L>, Parameter>) {
    fn(std::string_view(prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1)), l);
  } else if constexpr (requires { l.visit([](std::string_view, auto&) {}); }) {
    l.visit([&](std::string_view name, auto& member) {
      nn::visit_parameters(member, fn, prefix + std::string(name) + ".");
    });
  } else if constexpr (reflect::is_reflectable_v<L>) {
    reflect::for_each_field(l, [&](auto& field, auto index) {
      nn::visit_parameters(field, fn, prefix + std::to_string(decltype(index)::value) + ".");
    });
  }
}

template <class L, class Fn>
void visit_parameters(L& l, Fn&& fn) {
  visit_parameters(l, std::forward<Fn>(fn), std::string());
}

/// \brief The number of scalar parameters of l.
template <class L>
std::int64_t parameter_count(L& l) {
  std::int64_t n = 0;
  visit_parameters(l, [&](std::string_view, Parameter& p) { n += p.numel(); });
  return n;
}

/// \brief Options of materialize: element type and the seed of the counter-based init.
struct MaterializeOptions {
  DType dtype = DType::kF32;
  std::uint64_t seed = 0;
};

/// \brief Allocates and initialises every parameter of l (and a zero gradient) on device d.
/// Parameter k draws from stream (seed, k), so every rank and every run agree.
template <class L, class D>
void materialize(L& l, const D& d, MaterializeOptions opt = {}) {
  std::uint64_t ordinal = 0;
  std::vector<double> host;
  visit_parameters(l, [&](std::string_view, Parameter& p) {
    auto key = stream_key(opt.seed, ordinal++);
    host.resize(static_cast<std::size_t>(p.numel()));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = p.init.value(key, i);
    device::Cpu cpu;
    Tensor staged = cpu.empty(p.shape, DType::kF64, MemoryCategory::kWorkspace);
    std::copy(host.begin(), host.end(), staged.data<double>());
    Tensor typed = staged;
    if (opt.dtype != DType::kF64) {
      typed = cpu.empty(p.shape, opt.dtype, MemoryCategory::kWorkspace);
      cpu.cast(staged, typed);
    }
    p.value = d.empty(p.shape, opt.dtype, MemoryCategory::kParameters);
    d.upload(typed.raw(), p.value);
    p.grad = d.zeros(p.shape, opt.dtype, MemoryCategory::kGradients);
  });
}

/// \brief Sets every gradient of l to zero.
template <class L, class D>
void zero_grad(L& l, const D& d) {
  visit_parameters(l, [&](std::string_view, Parameter& p) { d.fill(p.grad, 0.0); });
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
