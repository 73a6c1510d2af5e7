#pragma once
/// \file
/// \brief Combinators for what a field list cannot say: Seq<L...> (a sequence as one type),
/// Repeat<L> (n layers of one type, n at run time) and Residual<L...> (x + Seq<L...>(x)), with
/// their node kinds (nn/tree.hpp).
#include <array>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "epl/nn/tree.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Layers applied in order; backward in reverse. Parameters are named by position.
/// \tparam L each a layer (checked with a readable message).
template <class... L>
class Seq {
 public:
  std::tuple<L...> layers;

  Seq() = default;
  explicit Seq(L... ls) : layers(std::move(ls)...) { (require_layer<L>(), ...); }

  template <class V> void visit(V&& v) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (v(std::to_string(I), std::get<I>(layers)), ...);
    }(std::index_sequence_for<L...>{});
  }
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor h = x;
    std::apply([&](auto&... l) { ((h = nn::forward(l, ctx, h)), ...); }, layers);
    return h;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Tensor g = dy;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      constexpr std::size_t n = sizeof...(L);
      ((g = nn::backward(std::get<n - 1 - I>(layers), ctx, g)), ...);
    }(std::index_sequence_for<L...>{});
    return g;
  }
};

/// \brief n layers of one type applied in order, n chosen at run time (a transformer's blocks).
/// A pipeline can cut between its layers.
template <class L>
class Repeat {
 public:
  using value_type = L;
  std::vector<L> layers;

  Repeat() = default;
  explicit Repeat(std::vector<L> ls) : layers(std::move(ls)) { require_layer<L>(); }
  /// \brief n layers, layer i made by make(i).
  template <class Make>
    requires std::is_invocable_r_v<L, Make, std::int64_t>
  Repeat(std::int64_t n, Make&& make) {
    require_layer<L>();
    EPL_CHECK(n >= 0, "Repeat: the count ", n, " must not be negative");
    for (std::int64_t i = 0; i < n; ++i) layers.push_back(make(i));
  }
  [[nodiscard]] std::size_t size() const noexcept { return layers.size(); }

  template <class V> void visit(V&& v) {
    for (std::size_t i = 0; i < layers.size(); ++i) v(std::to_string(i), layers[i]);
  }
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor h = x;
    for (auto& l : layers) h = nn::forward(l, ctx, h);
    return h;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Tensor g = dy;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = nn::backward(*it, ctx, g);
    return g;
  }
};

/// \brief y = x + Seq<L...>(x). The body must keep the shape of its input.
template <class... L>
class Residual {
 public:
  Seq<L...> body;

  Residual() = default;
  explicit Residual(L... ls) : body(std::move(ls)...) {}

  template <class V> void visit(V&& v) { body.visit(v); }
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor h = body.forward(ctx, x);
    EPL_CHECK(h.shape() == x.shape(), "Residual: the body maps ", x.shape(), " to ", h.shape(),
              "; a residual body must keep the shape");
    Tensor y = ctx.empty_like(x);
    ctx.device().add(x, h, y);
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Tensor g = body.backward(ctx, dy);
    Tensor dx = ctx.empty_like(dy);
    ctx.device().add(g, dy, dx);
    return dx;
  }
};

template <class... L>
struct node_traits<Seq<L...>> {
  static constexpr NodeKind kind = NodeKind::kSequence;
  using children = type_list<L...>;
};
/// A wrapper's own Seq names its layers as the layers alone would be (see body_names).
template <class... L>
struct body_names<Seq<L...>> {
  static constexpr bool kRenames = true;
  static constexpr std::array<bool, sizeof...(L)> structural{is_structural_v<L>...};
  static constexpr std::size_t named = (std::size_t{0} + ... + (is_structural_v<L> ? 0 : 1));
  template <std::size_t I>
  static constexpr std::string_view name_at() {
    if constexpr (is_structural_v<std::tuple_element_t<I, std::tuple<L...>>> || named == 1) {
      return "";
    } else {
      constexpr std::size_t rank = [] {
        std::size_t r = 0;
        for (std::size_t k = 0; k != I; ++k) r += structural[k] ? 0 : 1;  // (!=: nvcc warns of k < 0 when I is 0)
        return r;
      }();
      return reflect::IndexText<rank>::value;
    }
  }
  static constexpr std::array<std::string_view, sizeof...(L)> names = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(L)>{name_at<I>()...};
  }(std::index_sequence_for<L...>{});
};
template <class L>
struct node_traits<Repeat<L>> {
  static constexpr NodeKind kind = NodeKind::kRepeat;
  using children = type_list<L>;
};
template <class... L>
struct node_traits<Residual<L...>> {
  static constexpr NodeKind kind = NodeKind::kResidual;
  using children = type_list<L...>;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
