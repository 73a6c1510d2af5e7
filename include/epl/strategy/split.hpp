#pragma once
/// \file
/// \brief epl::Split<N, L...> — tensor (operator) parallelism, EPL's split(device_count=N): the
/// layers L... sharded over the N ranks of the mesh's tensor axis, and the customization point
/// that says how a layer shards (epl::split_rule, the epl::splittable concept).
///
/// At plan time split_layer walks a Split's layers in forward order with the layout of the
/// activation between them (whole on every rank, or sharded along its last dimension) and applies
/// each layer's rule, which shards its parameters (each part draws exactly its slice of the
/// single-device initialisation) and returns its output's layout. A Linear on a whole input runs
/// column-parallel (its output sharded), on a sharded input row-parallel (its output whole, one
/// all-reduce): an Mlp's pair costs one all-reduce forward and one backward, as in Megatron-LM.
/// A layer that needs its whole input after a sharded one makes the Linear before it gather.
#include <type_traits>

#include "epl/nn/nn.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/strategy/replicate.hpp"

namespace epl {
inline namespace v0 {

namespace strategy {
/// \brief What split rules share while a split group's layers are sharded.
struct SplitContext {
  nn::SplitPart part;
  /// The split takes its rows from a replicated part that ran data parallel over the group.
  bool colocated = false;
  /// The column-parallel Linear whose output the current activation is (null when it is whole):
  /// a layer that needs the whole activation makes it gather.
  nn::Linear* sharded_by = nullptr;
  /// The first layer of the split has not been reached yet (a colocated split's boundary may
  /// leave the first column-parallel Linear's input gradient to its reduce-scatter).
  bool at_entry = true;
  bool defer_entry_grad = false;
  bool entry_grad_deferred = false;  ///< set when the first layer left its input gradient unreduced
};
/// \brief The activation must be whole here: a sharded one is gathered by the Linear that split it.
inline nn::Layout need_whole(SplitContext& sc, nn::Layout in) {
  if (in == nn::Layout::kLastDimSharded && sc.sharded_by) sc.sharded_by->gather_output(true);
  sc.sharded_by = nullptr;
  return nn::Layout::kWhole;
}
}  // namespace strategy

/// \brief How a layer type shards in a split group. A specialisation has
/// `static nn::Layout apply(L& layer, strategy::SplitContext& sc, nn::Layout in)`: it shards the
/// layer's parameters for part `sc.part` (Parameter::shard_along, or the layer's own
/// parallelize) and returns the layout of its output. Built in: Linear, Mlp,
/// CausalSelfAttention, Embedding (by vocabulary), LayerNorm and PositionEmbedding (replicated:
/// every rank holds and computes them), GELU, ReLU and Dropout (element-wise: any layout), and the
/// combinators. The primary template has no apply: a layer without a rule cannot be split.
template <class L, class = void>
struct split_rule {};

/// \brief L satisfies splittable if epl::split_rule<L> says how it shards.
template <class L>
concept splittable = requires(L& l, strategy::SplitContext& sc, nn::Layout in) {
  { split_rule<L>::apply(l, sc, in) } -> std::same_as<nn::Layout>;
};

namespace strategy {
namespace detail {
template <class T> inline constexpr bool no_rule = false;
}  // namespace detail

/// \brief Shards layer l (and everything in it) for sc.part, its input in layout `in`; returns
/// the layout of its output. Sequences shard their parts in order; a residual's body sees the whole
/// input and gives back the whole output; a recompute boundary shards as its layers do (recomputing
/// split layers would repeat their collectives, so training with recompute fails at the first step,
/// naming the parameter); a leaf layer shards by its split_rule.
template <class L>
nn::Layout split_layer(L& l, SplitContext& sc, nn::Layout in) {
  using T = std::remove_cvref_t<L>;
  using nn::NodeKind;
  constexpr NodeKind kind = nn::kind_of_v<T>;
  if constexpr (nn::is_sequence(kind) || kind == NodeKind::kRecompute) {
    nn::for_each_child(l, [&](auto& part) { in = split_layer(part, sc, in); });
    return in;
  } else if constexpr (kind == NodeKind::kResidual) {
    need_whole(sc, in);
    sc.at_entry = false;  // the input gradient is the body's plus the output's: it must be whole
    nn::Layout body = nn::Layout::kWhole;
    nn::for_each_child(l, [&](auto& part) { body = split_layer(part, sc, body); });
    return need_whole(sc, body);
  } else if constexpr (kind == NodeKind::kSplit) {
    return in;  // refused by plan::tensor_degree_v ("an epl::Split inside an epl::Split"), with one message
  } else if constexpr (kind == NodeKind::kReplicate || kind == NodeKind::kPipeline) {
    static_assert(detail::no_rule<T>, "epl::Split: an epl::Replicate or an epl::Pipeline inside epl::Split<N, ...>; a strategy "
                                      "holds layers, not other strategies: list the Split beside them");
    return in;
  } else if constexpr (splittable<T>) {
    const nn::Layout out = split_rule<T>::apply(l, sc, in);
    sc.at_entry = false;
    return out;
  } else {
    static_assert(detail::no_rule<T>, "epl::Split: a layer inside epl::Split<N, ...> has no rule that says how it shards; "
                                      "specialise epl::split_rule<Layer> (docs/split.md), or move the layer out of the Split. "
                                      "The layer type is T in this instantiation");
    return in;
  }
}
}  // namespace strategy

// ---- built-in rules -------------------------------------------------------------------------
template <>
struct split_rule<nn::Linear> {
  static nn::Layout apply(nn::Linear& l, strategy::SplitContext& sc, nn::Layout in) {
    if (in == nn::Layout::kWhole) {
      l.parallelize(nn::Linear::Parallel::kColumn, sc.part);
      if (sc.at_entry && sc.defer_entry_grad) {
        l.defer_input_grad_reduction(true);
        sc.entry_grad_deferred = true;
      }
      sc.sharded_by = &l;
      return nn::Layout::kLastDimSharded;
    }
    l.parallelize(nn::Linear::Parallel::kRow, sc.part);
    sc.sharded_by = nullptr;
    return nn::Layout::kWhole;
  }
};
template <>
struct split_rule<nn::Mlp> {
  static nn::Layout apply(nn::Mlp& l, strategy::SplitContext& sc, nn::Layout in) {
    strategy::need_whole(sc, in);
    l.parallelize(sc.part);
    return nn::Layout::kWhole;
  }
};
template <>
struct split_rule<nn::CausalSelfAttention> {
  static nn::Layout apply(nn::CausalSelfAttention& l, strategy::SplitContext& sc, nn::Layout in) {
    strategy::need_whole(sc, in);
    l.parallelize(sc.part);
    return nn::Layout::kWhole;
  }
};
template <>
struct split_rule<nn::MoE> {
  static nn::Layout apply(nn::MoE& l, strategy::SplitContext& sc, nn::Layout in) {
    strategy::need_whole(sc, in);
    l.parallelize(sc.part);  // experts over the group, tokens dispatched by all_to_all
    return nn::Layout::kWhole;
  }
};
template <>
struct split_rule<nn::Embedding> {
  static nn::Layout apply(nn::Embedding& l, strategy::SplitContext& sc, nn::Layout in) {
    strategy::need_whole(sc, in);
    l.parallelize(sc.part);
    return nn::Layout::kWhole;
  }
};
/// Layers every rank of the group holds whole and computes alike on the whole activation.
template <class L>
struct split_rule<L, std::enable_if_t<std::is_same_v<L, nn::LayerNorm> || std::is_same_v<L, nn::PositionEmbedding>>> {
  static nn::Layout apply(L&, strategy::SplitContext& sc, nn::Layout in) { return strategy::need_whole(sc, in); }
};
/// Element-wise layers run on whatever part of the activation a rank holds.
template <class K>
struct split_rule<nn::detail::Pointwise<K>> {
  static nn::Layout apply(nn::detail::Pointwise<K>&, strategy::SplitContext&, nn::Layout in) { return in; }
};
template <>
struct split_rule<nn::Dropout> {
  static nn::Layout apply(nn::Dropout& l, strategy::SplitContext& sc, nn::Layout in) {
    // a colocated split's rows come from every rank of the group: a pass's first sample does not
    // say where they sit in the batch, so the mask could not be the single-device one
    EPL_CHECK(!sc.colocated, "Dropout inside a colocated epl::Split (cluster.colocate_split_and_replicate) is not supported; "
              "put it in the replicated part before the Split");
    if (in == nn::Layout::kLastDimSharded) l.shard_columns(sc.part);  // draws at its whole-tensor positions
    return in;
  }
};
namespace detail {
/// The first layer of every Split: nothing, unless the split is colocated with a replicated part
/// that ran data parallel over the group (cluster.colocate_split_and_replicate): then its input is
/// this rank's rows, forward all-gathers the group's rows, and backward gives back this rank's
/// rows of the input gradient, reduce-scattered when the first layer left it as a share.
struct SplitEntry {
  bool colocated = false;
  bool reduce = false;
  nn::SplitPart part;

  template <class V> void visit(V&&) {}  // no parameters
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!colocated) return x;
    Shape s = x.shape();
    s[0] *= part.parts;
    Tensor all = ctx.empty(s, x.dtype());
    nn::detail::tensor_group(ctx, "a colocated epl::Split").all_gather(x, all);
    return all;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    if (!colocated || !dy.defined()) return dy;
    const std::int64_t rows = dy.dim(0) / part.parts;
    Tensor mine = ctx.empty(dy.shape().with_front(rows), dy.dtype());
    if (reduce) nn::detail::tensor_group(ctx, "a colocated epl::Split").reduce_scatter(dy, mine, comm::ReduceOp::kSum);
    else ctx.device().copy(dy.slice(part.index * rows, (part.index + 1) * rows), mine);
    return mine;
  }
};
}  // namespace detail
template <>
inline constexpr bool nn::is_structural_v<detail::SplitEntry> = true;
namespace detail {
}  // namespace detail

/// \brief Tensor-parallel layers L... over N devices of the mesh's tensor axis (EPL's
/// split(device_count=N)). Outside the Split, a model's layers are replicated over those N
/// devices (every rank holds and computes them alike, as Megatron-LM runs them). Each layer needs
/// a split_rule: a layer without one fails to compile naming it; sizes that do not divide by N
/// are a run-time error naming the dimension and N.
/// \tparam N the devices (ranks) of the tensor-parallel group, >= 1
/// \tparam L the layers, run in order
template <int N, class... L>
class Split {
  static_assert(N >= 1, "epl::Split<N, ...>: N, the devices of the split group, must be at least 1");
  static_assert(sizeof...(L) >= 1, "epl::Split<N, ...>: give at least one layer");

 public:
  using Body = nn::Seq<detail::SplitEntry, L...>;
  static constexpr int kDevices = N;

  Split() = default;
  explicit Split(L... layers) : body_(detail::SplitEntry{}, std::move(layers)...) { (nn::require_layer<L>(), ...); }

  [[nodiscard]] Body& body() noexcept { return body_; }
  template <class V> void visit(V&& v) { v("", body_); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { return nn::forward(body_, ctx, x); }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return nn::backward(body_, ctx, dy); }

  /// \brief Shards the layers for part `sc.part` of the group (plan time, before materialize);
  /// returns the layout of the output. `colocated`: the input is this rank's rows (see SplitEntry).
  nn::Layout shard(strategy::SplitContext& sc, bool colocated = false) {
    EPL_CHECK(sc.part.parts == N, "epl::Split<", N, ", ...> on a tensor-parallel group of ", sc.part.parts,
              " ranks; every Split of a model must use the same N");
    auto& entry = std::get<0>(body_.layers);
    sc.defer_entry_grad = sc.colocated = colocated;
    sc.at_entry = true;
    nn::Layout out = nn::Layout::kWhole;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((out = strategy::split_layer(std::get<I + 1>(body_.layers), sc, out)), ...);
    }(std::index_sequence_for<L...>{});
    entry = {colocated, sc.entry_grad_deferred, sc.part};
    return out;
  }

 private:
  Body body_;
};

namespace nn {
template <int N, class... L>
struct node_traits<Split<N, L...>> {
  static constexpr NodeKind kind = NodeKind::kSplit;
  using children = type_list<typename Split<N, L...>::Body>;
  static constexpr int degree = N;
};
}  // namespace nn

template <class T> struct is_split : std::false_type {};
template <int N, class... L> struct is_split<Split<N, L...>> : std::true_type {};
template <class T> inline constexpr bool is_split_v = is_split<T>::value;

}  // namespace v0
}  // namespace epl
