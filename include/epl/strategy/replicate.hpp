#pragma once
/// \file
/// \brief epl::Replicate<D, L...> — data parallelism (EPL's replicate(device_count=D)).
///
/// The layers L... form one model replica spanning D devices; the number of replicas is
/// inferred from the world size (world / D). Each replica's batch is split D ways, so the
/// global batch is replicas x micro-batch x pipeline.num_micro_batch, as EPL defines it, and
/// every one of the world's ranks trains on world-size-th of it. A model with no strategy
/// type trains as Replicate<1, Model> (EPL's set_default_strategy(replicate(1))).
#include "epl/nn/combinators.hpp"

namespace epl {
inline namespace v0 {

namespace detail {
template <class... L> struct replica_body { using type = nn::Seq<L...>; };
template <class L> struct replica_body<L> { using type = L; };
}  // namespace detail

/// \brief Data-parallel replicas of the layers L..., each replica over D devices.
/// \tparam D devices per replica (>= 1)
/// \tparam L the layers of one replica, run in order
template <int D, class... L>
class Replicate {
  static_assert(D >= 1, "epl::Replicate<D, ...>: D, the devices per replica, must be at least 1");
  static_assert(sizeof...(L) >= 1, "epl::Replicate<D, ...>: give at least one layer");

 public:
  using Body = typename detail::replica_body<L...>::type;
  static constexpr int kDevicesPerReplica = D;

  Replicate() = default;
  explicit Replicate(L... layers) : body_(std::move(layers)...) { (nn::require_layer<L>(), ...); }

  [[nodiscard]] Body& body() noexcept { return body_; }
  template <class V> void visit(V&& v) { v("", body_); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { return nn::forward(body_, ctx, x); }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return nn::backward(body_, ctx, dy); }

 private:
  Body body_;
};

namespace nn {
template <int D, class... L>
struct node_traits<Replicate<D, L...>> {
  static constexpr NodeKind kind = NodeKind::kReplicate;
  using children = type_list<typename Replicate<D, L...>::Body>;
  static constexpr int degree = D;
};
}  // namespace nn

/// \brief Devices per model replica of a model type: D for Replicate<D, ...>, 1 for a bare model.
template <class M> struct devices_per_replica : std::integral_constant<int, 1> {};
template <int D, class... L> struct devices_per_replica<Replicate<D, L...>> : std::integral_constant<int, D> {};
template <class M> inline constexpr int devices_per_replica_v = devices_per_replica<M>::value;

}  // namespace v0
}  // namespace epl
