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
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "epl/device/archetype.hpp"
#include "epl/nn/pass.hpp"
#include "epl/nn/parameter.hpp"
#include "epl/nn/walk.hpp"
#include "epl/reflect/fields.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// The pass the concepts check layers against: a pass on device::Archetype, which declares a
/// device's memory interface and defines nothing. A layer written `template <class Ctx>` runs on
/// every pass and satisfies the concepts; checking it instantiates none of its body.
using ArchetypePass = Pass<device::Archetype>;

/// \brief T satisfies leaf_layer if it has forward(ctx, x) and backward(ctx, dy), each
/// returning a Tensor, for a pass context of type Ctx (by default the archetype: layers written
/// `template <class Ctx>` run on every pass).
template <class T, class Ctx = ArchetypePass>
concept leaf_layer = requires(T& l, Ctx& ctx, const Tensor& x) {
  { l.forward(ctx, x) } -> std::same_as<Tensor>;
  { l.backward(ctx, x) } -> std::same_as<Tensor>;
};

namespace detail {
template <class Ctx>
struct layer_for {
  template <class T>
  struct test;
};
template <class T, class Ctx>
consteval bool aggregate_of_layers() {
  if constexpr (!leaf_layer<T, Ctx> && reflect::is_reflectable_v<T>) {
    if constexpr (reflect::field_count_v<T> == 0) return false;
    else return reflect::all_fields<T, layer_for<Ctx>::template test>();
  } else {
    return false;
  }
}
template <class Ctx>
template <class T>
struct layer_for<Ctx>::test : std::bool_constant<leaf_layer<T, Ctx> || aggregate_of_layers<T, Ctx>()> {};
}  // namespace detail

/// \brief True when T is a layer (for the archetype pass): a leaf_layer or an aggregate of layers.
template <class T>
struct is_layer : detail::layer_for<ArchetypePass>::template test<T> {};

/// \brief T satisfies layer if it is a leaf layer or an aggregate whose fields are layers.
template <class T>
concept layer = is_layer<std::remove_cvref_t<T>>::value;

namespace detail {
template <class Parent, class Ctx>
consteval void require_fields();
/// Fails with the parent aggregate, the field index and the field's type in the instantiation: the
/// innermost one, where the field is an aggregate holding a field that is not a layer (else only
/// the outermost aggregate was named, a stranger's finding).
template <class Parent, std::size_t Index, class Field, class Ctx>
consteval void require_layer_field() {
  if constexpr (!layer_for<Ctx>::template test<Field>::value && reflect::is_reflectable_v<Field> && !leaf_layer<Field, Ctx>) {
    static_assert(reflect::field_count_v<Field> > 0,
                  "epl: a field of a layer struct is an empty struct, which is not a layer (a placeholder with no members "
                  "computes nothing): remove it, or give it forward(ctx, x) and backward(ctx, dy). The empty type is `Field` in "
                  "this instantiation.");
    if constexpr (reflect::field_count_v<Field> > 0) require_fields<Field, Ctx>();
  } else {
    static_assert(layer_for<Ctx>::template test<Field>::value,
                  "epl: a field of a layer struct is not a layer. Each field needs forward(ctx, x) and "
                  "backward(ctx, dy) members returning epl::Tensor, templates over the pass type "
                  "(template <class Ctx> epl::Tensor forward(Ctx& ctx, const epl::Tensor& x); one taking "
                  "nn::Pass<device::Cpu>& is not enough), or must itself be an aggregate of "
                  "layers. The offending field type is `Field` in this instantiation.");
  }
}
template <class Parent, class Ctx>
consteval void require_fields() {
  static_assert(reflect::field_count_v<Parent> > 0 || !reflect::detail::countable_v<Parent>,  // that error is its own
                "epl: an empty struct is not a layer");
  []<std::size_t... I>(std::index_sequence<I...>) {
    (require_layer_field<Parent, I, reflect::field_t<I, Parent>, Ctx>(), ...);
  }(std::make_index_sequence<reflect::field_count_v<Parent>>{});
}
}  // namespace detail

namespace detail {
// A class layer whose members epl cannot see: not an aggregate (PFR cannot list its fields), not
// empty, and without visit(v). A Parameter among them would silently not train.
template <class L>
inline constexpr bool hides_members_v = std::is_class_v<L> && !std::is_empty_v<L> && !reflect::is_reflectable_v<L> && !visitable<L>;
}  // namespace detail

/// \brief Compile-time check with a readable message naming the first offending field type.
template <class L, class Ctx = ArchetypePass>
consteval void require_layer() {
  if constexpr (leaf_layer<L, Ctx>) {
    static_assert(!detail::hides_members_v<L>,
                  "epl: this layer is a class with data members but no visit(v), so epl cannot see them: a Parameter, "
                  "RandomStream or sub-layer among them would be left out of initialisation, training and checkpoints. "
                  "Give it `template <class V> void visit(V&& v) { v(\"weight\", weight_); }` naming each of them (an "
                  "empty visit when it holds none), or make it an aggregate struct. The layer type is L in this instantiation");
  } else {
    static_assert(reflect::is_reflectable_v<L>,
                  "epl: this type is not a layer: give it forward(ctx, x) and backward(ctx, dy) members "
                  "returning epl::Tensor, or make it an aggregate struct of layers");
    if constexpr (reflect::is_reflectable_v<L>) detail::require_fields<L, Ctx>();
  }
}

namespace detail {
template <class L>
inline constexpr char layer_key_of = 0;
}  // namespace detail

/// \brief A key of layer type L, unique to it (the address of a variable of its own): what an
/// epl::Error records, beside the layer's address, of the layer it left.
template <class L>
[[nodiscard]] constexpr const void* layer_key() noexcept {
  return &detail::layer_key_of<std::remove_cvref_t<L>>;
}

namespace detail {
// nn::backward's check of a leaf's backward against what its forward recorded (Pass::Frame): else
// the layer before it would be blamed for the gradient it then gets, or for the frame it finds.
template <class Ctx>
void check_backward(Ctx& ctx, const void* layer, const Tensor& dx) {
  bool last = false;
  const auto frame = ctx.close_frame(layer, last);
  if (!frame) return;
  EPL_CHECK(!last || ctx.saved_count() <= frame->saved, "its backward left ", ctx.saved_count() - frame->saved,
            " of the activation frames its forward saved; a layer's backward takes back each with ctx.restore(this), "
            "in the reverse order of its saves");
  EPL_CHECK(!dx.defined() || dx.shape() == frame->input, "its backward returned an input gradient of shape ", dx.shape(),
            " for an input of shape ", frame->input,
            "; a layer's backward returns the loss's gradient with respect to its input, shaped as the input (or an "
            "undefined tensor when none flows back)");
}
}  // namespace detail

/// \brief Runs layer l forward on x: the context's hooks see each leaf layer first (a ZeRO-3
/// gather, an offload prefetch) and, a hooks type with after_forward(layer, ctx), last (a leaf may
/// run others inside its own forward: ZeRO-3 keeps its parameters until then), then an
/// aggregate's fields run in order. An epl::Error leaving a leaf layer records it (Error::layer),
/// for nn::name_layer to name.
template <class L, class Ctx>
Tensor forward(L& l, Ctx& ctx, const Tensor& x) {
  require_layer<L, Ctx>();
  if constexpr (leaf_layer<L, Ctx>) {
    try {
      ctx.hooks().before_forward(l, ctx);
      if constexpr (requires { ctx.open_frame(&l, x); }) ctx.open_frame(&l, x);
      Tensor y = l.forward(ctx, x);
      // else the next layer would be blamed for an input of shape [] (a stranger's finding)
      EPL_CHECK(y.defined(), "its forward returned an undefined tensor; a layer's forward returns its output");
      if constexpr (requires { ctx.hooks().after_forward(l, ctx); }) ctx.hooks().after_forward(l, ctx);
      return y;
    } catch (Error& e) {
      e.left_layer(&l, layer_key<L>(), "forward");
      throw;
    }
  } else {
    Tensor h = x;
    reflect::for_each_field(l, [&](auto& field, auto) { h = nn::forward(field, ctx, h); });
    return h;
  }
}

/// \brief Runs layer l backward: accumulates parameter gradients, returns the input gradient.
/// A hooks type with before_backward(layer, ctx) sees each leaf first (ZeRO gathers its
/// parameters and makes room for its gradients). Once a leaf layer's backward returns, its gradients are final for this pass, and the
/// context's hooks are told (data parallelism starts reducing them then).
template <class L, class Ctx>
Tensor backward(L& l, Ctx& ctx, const Tensor& dy) {
  require_layer<L, Ctx>();
  if constexpr (leaf_layer<L, Ctx>) {
    try {
      // else its first product would fail on an empty tensor, blamed on a parameter left out of
      // visit (a stranger's finding); a structural layer (a Split's entry) passes none on
      if constexpr (!is_structural_v<L>)
        EPL_CHECK(dy.defined(), "it was given no output gradient (an undefined tensor): the layer after it returned none from "
                  "its backward, which is for a layer whose input is ids (an embedding's, first in a model); a layer with "
                  "others before it returns a gradient shaped as its input (zeros where none flows)");
      if constexpr (requires { ctx.hooks().before_backward(l, ctx); }) ctx.hooks().before_backward(l, ctx);
      Tensor dx = l.backward(ctx, dy);
      if constexpr (requires { ctx.open_frame(&l, dy); }) detail::check_backward(ctx, &l, dx);
      if constexpr (requires { ctx.backward_done(l); }) ctx.backward_done(l);  // now, or after its W pass
      else ctx.hooks().after_backward(l, ctx);
      return dx;
    } catch (Error& e) {
      e.left_layer(&l, layer_key<L>(), "backward");
      throw;
    }
  } else {
    Tensor g = dy;
    reflect::for_each_field_reverse(l, [&](auto& field, auto) { g = nn::backward(field, ctx, g); });
    return g;
  }
}

namespace detail {
// name_layer's visitor: a type of its own, so each node type's walk is compiled once.
struct FindLayer {
  const void* layer;
  const void* key;
  std::optional<std::string> path;
  template <class N>
  void operator()(std::string_view at, N& node) {
    if (!path && static_cast<const void*>(&node) == layer && layer_key<N>() == key) path.emplace(at);
  }
};
}  // namespace detail

/// \brief Names, in e, the layer of `model` it left (Error::layer) by its path, the one its
/// parameters' names begin with: "in the forward of layer `blocks.1.fc`: Linear(...) got input
/// [...]". The Trainer does this to every error its passes raise; a program running nn::forward
/// itself may call it on its model. Nothing when e left no layer of `model`, or names one already.
template <class M>
void name_layer(M& model, Error& e) {
  if (!e.layer()) return;
  detail::FindLayer find{e.layer(), e.layer_key(), std::nullopt};
  visit_nodes(model, find);
  if (find.path) e.name_layer(*find.path);
}

/// \brief Calls fn(Parameter&) for the parameters leaf layer l holds itself: those not inside a
/// sub-layer, whose own hooks see them (attention's projections are its Linears'). Each
/// parameter of a model is some leaf's own, so per-layer hooks that act on own parameters act
/// on each parameter once per pass.
template <class L, class Fn>
void for_each_own_parameter(L& l, Fn&& fn) {
  for_each_member(l, [&](std::string_view, auto& member) {
    using M = std::remove_cvref_t<decltype(member)>;
    if constexpr (std::is_same_v<M, Parameter>) fn(member);
    else if constexpr (!layer<M>) for_each_own_parameter(member, fn);
  });
}

}  // namespace nn
}  // namespace v0
}  // namespace epl
