#pragma once
/// \file
/// \brief Combinators for what a field list cannot say: Seq<L...> (a sequence as one type)
/// and Residual<L...> (x + Seq<L...>(x)).
#include <tuple>

#include "epl/nn/layer.hpp"

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

}  // namespace nn
}  // namespace v0
}  // namespace epl
