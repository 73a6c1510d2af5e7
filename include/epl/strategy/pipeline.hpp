#pragma once
/// \file
/// \brief epl::Pipeline<Stages...> — pipeline parallelism (EPL's stages and
/// pipeline.num_micro_batch): each stage a strategy (Replicate<D, ...>) on its own devices,
/// micro-batches flowing through them on a schedule (pipeline.strategy).
///
/// The stages together form the model: run whole (on one device) a Pipeline is its stages in
/// order, so it trains equal to the same layers unannotated. Devices per pipeline replica = the
/// stages' devices together; the data-parallel degree over the whole pipeline is the world size
/// over that. A model without stage annotations is cut into pipeline.num_stages balanced stages
/// with auto.auto_parallel=true (strategy/partition.hpp).
#include <tuple>

#include "epl/strategy/replicate.hpp"
#include "epl/strategy/split.hpp"

namespace epl {
inline namespace v0 {

/// \brief True for a strategy type: a stage of a Pipeline.
template <class T> struct is_strategy : std::false_type {};
template <int D, class... L> struct is_strategy<Replicate<D, L...>> : std::true_type {};
template <int N, class... L> struct is_strategy<Split<N, L...>> : std::true_type {};
template <class T> inline constexpr bool is_strategy_v = is_strategy<T>::value;

/// \brief Pipeline stages, in order.
/// \tparam Stages each a strategy: Replicate<D, L...> (all with the same D) or Split<N, L...>
///         (a stage outside any Split is replicated over a Split stage's N devices)
template <class... Stages>
class Pipeline {
  static_assert(sizeof...(Stages) >= 1, "epl::Pipeline<Stages...>: give at least one stage");
  static_assert((is_strategy_v<Stages> && ...),
                "epl::Pipeline<Stages...>: every stage must be a strategy, epl::Replicate<D, Layers...> or "
                "epl::Split<N, Layers...> (a plain layer type as a stage does not say where it runs: wrap it as "
                "epl::Replicate<1, Layer>)");
  static_assert(((devices_per_replica_v<Stages> == devices_per_replica_v<std::tuple_element_t<0, std::tuple<Stages...>>>) && ...),
                "epl::Pipeline<Stages...>: every stage must span the same number of devices of one pipeline replica: a "
                "Replicate<D, ...> stage spans D, a Split<N, ...> stage 1 (its N ranks are the tensor axis, over which "
                "the other stages run replicated: beside a Split every stage is Replicate<1, ...> or a Split); uneven "
                "stages are not supported (a replicated backbone followed by a split part on other devices is a plain "
                "struct { Replicate<N, ...>; Split<N, ...>; } without cluster.colocate_split_and_replicate: docs/split.md)");

 public:
  static constexpr int kStages = static_cast<int>(sizeof...(Stages));
  std::tuple<Stages...> stages;

  Pipeline() = default;
  explicit Pipeline(Stages... s) : stages(std::move(s)...) {}

  template <class V> void visit(V&& v) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (v(std::to_string(I), std::get<I>(stages)), ...); }(
        std::index_sequence_for<Stages...>{});
  }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor h = x;
    std::apply([&](auto&... s) { ((h = nn::forward(s, ctx, h)), ...); }, stages);
    return h;
  }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) {
    Tensor g = dy;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      constexpr std::size_t n = sizeof...(Stages);
      ((g = nn::backward(std::get<n - 1 - I>(stages), ctx, g)), ...);
    }(std::index_sequence_for<Stages...>{});
    return g;
  }
};

namespace nn {
template <class... S>
struct node_traits<Pipeline<S...>> {
  static constexpr NodeKind kind = NodeKind::kPipeline;
  using children = type_list<S...>;
};
}  // namespace nn

template <class T> struct is_pipeline : std::false_type {};
template <class... S> struct is_pipeline<Pipeline<S...>> : std::true_type {};
template <class T> inline constexpr bool is_pipeline_v = is_pipeline<T>::value;

}  // namespace v0
}  // namespace epl
