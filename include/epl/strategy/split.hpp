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
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "epl/nn/nn.hpp"
#include "epl/reflect/type_name.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/strategy/replicate.hpp"

namespace epl {
inline namespace v0 {

namespace strategy {
/// \brief What split rules share while a split group's layers are sharded: this rank's part, the
/// run's choices, and the regions of sharded activations.
///
/// A sharded activation belongs to a region: the steps that sharded it (its producer's) and those
/// of the layers that ran on or read its shards. When a layer needs it whole, the region is made
/// whole: each step is undone (a sequence-parallel producer no longer scatters, the layers after it
/// run on the whole), or, for a column-parallel Linear's output, that Linear all-gathers it. A
/// residual joins its input's region and its body's output's.
struct SplitContext {
  nn::SplitPart part;
  /// The split takes its rows from a replicated part that ran data parallel over the group.
  bool colocated = false;
  /// split.sequence_parallel: the token-wise layers between tensor-parallel blocks run on this
  /// rank's part of the sequence.
  bool sequence = false;
  /// The first layer of the split has not been reached yet (a colocated split's boundary may
  /// leave the first column-parallel Linear's input gradient to its reduce-scatter).
  bool at_entry = true;
  bool defer_entry_grad = false;
  bool entry_grad_deferred = false;  ///< set when the first layer left its input gradient unreduced
  /// The region of the current activation (-1: it is whole).
  int region = -1;

  struct Region {
    std::vector<std::function<void()>> steps;  ///< what makes it whole (undone settings, a gather)
    std::string producer;                       ///< who sharded it, for messages
    int into = -1;                              ///< merged into that region
    int computed = 0;                           ///< layers that computed on its shards
    nn::Layout layout = nn::Layout::kWhole;     ///< how its producer sharded it
    bool whole = false;
  };
  std::vector<Region> regions;

  /// \brief The current activation is a producer's sharded `out`: a new region, made whole by
  /// `make_whole`. Returns out.
  nn::Layout open(nn::Layout out, std::function<void()> make_whole, std::string producer) {
    regions.push_back({{std::move(make_whole)}, std::move(producer), -1, 0, out});
    region = static_cast<int>(regions.size()) - 1;
    return out;
  }
  /// \brief A layer runs on the current region's shards (`computes`) or reads them (a
  /// column-parallel Linear gathering them); `undo` makes it take the whole activation instead.
  void use(std::function<void()> undo, bool computes) {
    EPL_CHECK(region >= 0, "SplitContext::use without a sharded activation");
    Region& r = regions[static_cast<std::size_t>(root(region))];
    r.steps.push_back(std::move(undo));
    r.computed += computes ? 1 : 0;
  }
  /// \brief The layout `in` of an activation of region `r`, now (it may have been made whole since).
  [[nodiscard]] nn::Layout now(nn::Layout in, int r) const {
    return in == nn::Layout::kWhole || r < 0 || regions[static_cast<std::size_t>(root(r))].whole ? nn::Layout::kWhole : in;
  }
  /// \brief Makes region r whole: each of its steps undone.
  void make_whole(int r) {
    if (r < 0) return;
    Region& g = regions[static_cast<std::size_t>(root(r))];
    if (g.whole) return;
    g.whole = true;
    for (auto it = g.steps.rbegin(); it != g.steps.rend(); ++it)
      if (*it) (*it)();
  }
  /// \brief Joins regions a and b (a residual adds activations of both); returns the joined one.
  int join(int a, int b) {
    a = root(a);
    b = root(b);
    if (a == b) return a;
    Region &ra = regions[static_cast<std::size_t>(a)], &rb = regions[static_cast<std::size_t>(b)];
    for (auto& f : rb.steps) ra.steps.push_back(std::move(f));
    rb.steps.clear();
    ra.computed += rb.computed;
    rb.into = a;
    return a;
  }
  /// \brief The layers that computed on region r's shards.
  [[nodiscard]] int computed(int r) const { return r < 0 ? 0 : regions[static_cast<std::size_t>(root(r))].computed; }
  [[nodiscard]] int root(int r) const {
    while (regions[static_cast<std::size_t>(r)].into >= 0) r = regions[static_cast<std::size_t>(r)].into;
    return r;
  }
};
/// \brief The activation must be whole here: a sharded one's region is made whole.
inline nn::Layout need_whole(SplitContext& sc, nn::Layout in) {
  if (sc.now(in, sc.region) != nn::Layout::kWhole) sc.make_whole(sc.region);
  sc.region = -1;
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

/// \brief A split rule that takes sequence parts (split.sequence_parallel) says so with
/// `static constexpr bool kSequenceParts = true`; any other rule gets a whole input.
template <class Rule>
concept takes_sequence_parts = requires { requires Rule::kSequenceParts; };

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
    // the body sees the input as it is (a sequence part stays one); the output is the input plus
    // the body's, so both must be alike: sequence parts of one region, or both whole
    if (sc.now(in, sc.region) == nn::Layout::kLastDimSharded) in = need_whole(sc, in);
    in = sc.now(in, sc.region);
    sc.at_entry = false;  // the input gradient is the body's plus the output's: it must be whole
    const int x_region = sc.region;
    nn::Layout body = in;
    nn::for_each_child(l, [&](auto& part) { body = split_layer(part, sc, body); });
    if (sc.now(in, x_region) == nn::Layout::kSequenceSharded && sc.now(body, sc.region) == nn::Layout::kSequenceSharded) {
      sc.region = sc.join(x_region, sc.region);
      sc.use({}, true);  // the addition runs on the parts
      return nn::Layout::kSequenceSharded;
    }
    sc.make_whole(x_region);
    return need_whole(sc, body);
  } else if constexpr (kind == NodeKind::kSplit) {
    return in;  // refused by plan::tensor_degree_v ("an epl::Split inside an epl::Split"), with one message
  } else if constexpr (kind == NodeKind::kReplicate || kind == NodeKind::kPipeline) {
    static_assert(detail::no_rule<T>, "epl::Split: an epl::Replicate or an epl::Pipeline inside epl::Split<N, ...>; a strategy "
                                      "holds layers, not other strategies: list the Split beside them");
    return in;
  } else if constexpr (splittable<T>) {
    in = sc.now(in, sc.region);
    if (in == nn::Layout::kSequenceSharded && !takes_sequence_parts<split_rule<T>>) in = need_whole(sc, in);
    const int before = sc.region;
    const std::size_t regions = sc.regions.size();
    const nn::Layout out = [&] {
      try {
        return split_rule<T>::apply(l, sc, in);
      } catch (Error& e) {  // sizes that do not divide: plan::shard_model names the layer by its path
        e.left_layer(&l, nn::layer_key<T>(), "split");
        throw;
      }
    }();
    sc.at_entry = false;
    if (out == nn::Layout::kWhole) {
      sc.region = -1;
    } else if (sc.regions.size() == regions && (out != in || before < 0)) {  // a rule of one's own that opened no region
      sc.open(out, [out] {
        EPL_FAIL("epl::Split: the output of ", reflect::type_name<T>(), " is ", nn::name_of(out), " and a later layer needs it whole, "
                 "but its split_rule says no way to gather it: open a region for it with sc.open(layout, make_whole, name) "
                 "(docs/split.md), or give that layer a whole input");
      }, std::string(reflect::type_name<T>()));
    }
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
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::Linear& l, strategy::SplitContext& sc, nn::Layout in) {
    if (in == nn::Layout::kLastDimSharded) {  // its input's columns: row-parallel
      l.parallelize(nn::Linear::Parallel::kRow, sc.part);
      sc.region = -1;
      if (!sc.sequence) return nn::Layout::kWhole;
      l.scatter_sequence_output(true);
      return sc.open(nn::Layout::kSequenceSharded, [&l] { l.scatter_sequence_output(false); }, "a row-parallel Linear");
    }
    l.parallelize(nn::Linear::Parallel::kColumn, sc.part);
    if (in == nn::Layout::kSequenceSharded) {
      l.gather_sequence_input(true);
      sc.use([&l] { l.gather_sequence_input(false); }, false);
    }
    if (sc.at_entry && sc.defer_entry_grad) {
      l.defer_input_grad_reduction(true);
      sc.entry_grad_deferred = true;
    }
    return sc.open(nn::Layout::kLastDimSharded, [&l] { l.gather_output(true); }, "a column-parallel Linear");
  }
};
namespace strategy {
/// \brief A block of a column-parallel Linear `in` and a row-parallel `out` (Mlp, attention):
/// it reads a whole input or gathers a sequence part, and gives a whole output or, under
/// sequence parallelism, a sequence part.
inline nn::Layout split_block(SplitContext& sc, nn::Layout input, nn::Linear& in, nn::Linear& out, const char* name) {
  if (input == nn::Layout::kLastDimSharded) input = need_whole(sc, input);
  if (input == nn::Layout::kSequenceSharded) {
    in.gather_sequence_input(true);
    sc.use([&in] { in.gather_sequence_input(false); }, false);
  }
  sc.region = -1;
  if (!sc.sequence) return nn::Layout::kWhole;
  out.scatter_sequence_output(true);
  return sc.open(nn::Layout::kSequenceSharded, [&out] { out.scatter_sequence_output(false); }, name);
}
/// \brief A layer that runs on the tokens it is given: on a sequence part it runs on this rank's
/// tokens (`shard` sets it, `unshard` undoes it); a column part must be gathered first.
template <class Shard, class Unshard>
nn::Layout split_tokenwise(SplitContext& sc, nn::Layout in, Shard&& shard, Unshard&& unshard) {
  if (in != nn::Layout::kSequenceSharded) return need_whole(sc, in);
  shard();
  sc.use(std::forward<Unshard>(unshard), true);
  return in;
}
}  // namespace strategy
template <>
struct split_rule<nn::Mlp> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::Mlp& l, strategy::SplitContext& sc, nn::Layout in) {
    l.parallelize(sc.part);
    return strategy::split_block(sc, in, l.fc, l.proj, "Mlp's row-parallel proj");
  }
};
template <>
struct split_rule<nn::CausalSelfAttention> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::CausalSelfAttention& l, strategy::SplitContext& sc, nn::Layout in) {
    l.parallelize(sc.part);
    return strategy::split_block(sc, in, l.qkv, l.proj, "CausalSelfAttention's row-parallel proj");
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
    strategy::need_whole(sc, in);  // the ids, whole
    l.parallelize(sc.part);
    if (!sc.sequence) return nn::Layout::kWhole;
    l.scatter_sequence_output(true);
    return sc.open(nn::Layout::kSequenceSharded, [&l] { l.scatter_sequence_output(false); }, "a vocabulary-parallel Embedding");
  }
};
/// Layers every rank of the group holds whole: on a whole activation every rank computes them
/// alike; on a sequence part (split.sequence_parallel) each its own tokens.
template <>
struct split_rule<nn::LayerNorm> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::LayerNorm& l, strategy::SplitContext& sc, nn::Layout in) {
    return strategy::split_tokenwise(sc, in, [&] { l.shard_sequence(sc.part); }, [&l] { l.shard_sequence({}); });
  }
};
template <>
struct split_rule<nn::PositionEmbedding> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::PositionEmbedding& l, strategy::SplitContext& sc, nn::Layout in) {
    return strategy::split_tokenwise(sc, in, [&] { l.shard_sequence(sc.part); }, [&l] { l.shard_sequence({}); });
  }
};
/// Element-wise layers run on whatever part of the activation a rank holds.
template <class K>
struct split_rule<nn::detail::Pointwise<K>> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::detail::Pointwise<K>&, strategy::SplitContext& sc, nn::Layout in) {
    if (in != nn::Layout::kWhole) sc.use({}, true);
    return in;
  }
};
/// nn::SizedLinear and the sized pointwise layers shard as the layers they are.
template <std::int64_t In, std::int64_t Out, bool Bias, std::int64_t T>
struct split_rule<nn::SizedLinear<In, Out, Bias, T>> : split_rule<nn::Linear> {};
template <class K, std::int64_t Width>
struct split_rule<nn::SizedPointwise<K, Width>> : split_rule<nn::detail::Pointwise<K>> {};
template <>
struct split_rule<nn::Dropout> {
  static constexpr bool kSequenceParts = true;
  static nn::Layout apply(nn::Dropout& l, strategy::SplitContext& sc, nn::Layout in) {
    // a colocated split's rows come from every rank of the group: a pass's first sample does not
    // say where they sit in the batch, so the mask could not be the single-device one
    EPL_CHECK(!sc.colocated, "Dropout inside a colocated epl::Split (cluster.colocate_split_and_replicate) is not supported; "
              "put it in the replicated part before the Split");
    // draws at its whole-tensor positions
    if (in == nn::Layout::kLastDimSharded) {
      l.shard_columns(sc.part);
      sc.use([&l] { l.shard_columns({}); }, true);
    } else if (in == nn::Layout::kSequenceSharded) {
      l.shard_sequence(sc.part);
      sc.use([&l] { l.shard_sequence({}); }, true);
    }
    return in;
  }
};
namespace detail {
/// The first layer of every Split: nothing, unless
/// - the split is colocated with a replicated part that ran data parallel over the group
///   (cluster.colocate_split_and_replicate): then its input is this rank's rows, forward
///   all-gathers the group's rows, and backward gives back this rank's rows of the input gradient,
///   reduce-scattered when the first layer left it as a share;
/// - or the split runs sequence-parallel on a whole input (`scatter`): forward takes this rank's
///   part of the sequence, backward all-gathers the parts of the input gradient.
struct SplitEntry {
  bool colocated = false;
  bool reduce = false;
  nn::SplitPart part;
  bool scatter = false;

  template <class V> void visit(V&&) {}  // no parameters
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (scatter) return nn::sequence_own(ctx, x, part, "an epl::Split's entry");
    if (!colocated) return x;
    Shape s = x.shape();
    s[0] *= part.parts;
    Tensor all = ctx.empty(s, x.dtype());
    nn::detail::tensor_group(ctx, "a colocated epl::Split").all_gather(x, all);
    return all;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    if (scatter && dy.defined()) return nn::sequence_gather(ctx, dy, part, "an epl::Split's entry");
    if (!colocated || !dy.defined()) return dy;
    const std::int64_t rows = dy.dim(0) / part.parts;
    Tensor mine = ctx.empty(dy.shape().with_front(rows), dy.dtype());
    if (reduce) nn::detail::tensor_group(ctx, "a colocated epl::Split").reduce_scatter(dy, mine, comm::ReduceOp::kSum);
    else ctx.device().copy(dy.slice(part.index * rows, (part.index + 1) * rows), mine);
    return mine;
  }
};
/// The last layer of every Split: nothing, unless the split runs sequence-parallel and what
/// follows it needs its output whole (`gather`): forward all-gathers the sequence parts, backward
/// takes this rank's part of the output gradient.
struct SplitExit {
  nn::SplitPart part;
  bool gather = false;

  template <class V> void visit(V&&) {}  // no parameters
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    return gather ? nn::sequence_gather(ctx, x, part, "an epl::Split's exit") : x;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    return gather && dy.defined() ? nn::sequence_own(ctx, dy, part, "an epl::Split's exit") : dy;
  }
};
}  // namespace detail
template <>
inline constexpr bool nn::is_structural_v<detail::SplitEntry> = true;
template <>
inline constexpr bool nn::is_structural_v<detail::SplitExit> = true;

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
  using Body = nn::Seq<detail::SplitEntry, L..., detail::SplitExit>;
  static constexpr int kDevices = N;

  Split() = default;
  explicit Split(L... layers) : body_(detail::SplitEntry{}, std::move(layers)..., detail::SplitExit{}) { (nn::require_layer<L>(), ...); }

  [[nodiscard]] Body& body() noexcept { return body_; }
  template <class V> void visit(V&& v) { v("", body_); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { return nn::forward(body_, ctx, x); }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return nn::backward(body_, ctx, dy); }

  /// \brief Shards the layers for part `sc.part` of the group (plan time, before materialize),
  /// the input in layout `in` (a sequence part of region sc.region, carried from the Split before
  /// it); returns the layout of the output. sc.colocated: the input is this rank's rows (see
  /// SplitEntry). An output left as sequence parts is gathered by exit() when what follows needs it.
  nn::Layout shard(strategy::SplitContext& sc, nn::Layout in = nn::Layout::kWhole) {
    EPL_CHECK(sc.part.parts == N, "epl::Split<", N, ", ...> on a tensor-parallel group of ", sc.part.parts,
              " ranks; every Split of a model must use the same N");
    EPL_CHECK(!(sc.colocated && sc.sequence), "split.sequence_parallel on an epl::Split that takes a replicated part's rows (a "
              "Replicate<N> part beside it): its input is each rank's own rows, not one sequence; set split.sequence_parallel=false");
    auto& entry = std::get<0>(body_.layers);
    auto& exit = std::get<sizeof...(L) + 1>(body_.layers);
    entry = {sc.colocated, false, sc.part, false};
    exit = {sc.part, false};
    sc.defer_entry_grad = sc.colocated;
    sc.at_entry = true;
    sc.entry_grad_deferred = false;
    nn::Layout out = sc.now(in, sc.region);
    if (sc.sequence && out == nn::Layout::kWhole) {  // this rank's part of the sequence from here
      entry.scatter = true;
      out = sc.open(nn::Layout::kSequenceSharded, [&entry] { entry.scatter = false; }, "the epl::Split's entry");
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((out = strategy::split_layer(std::get<I + 1>(body_.layers), sc, out)), ...);
    }(std::index_sequence_for<L...>{});
    entry.reduce = sc.entry_grad_deferred;
    return sc.now(out, sc.region);
  }
  /// \brief The last layer: it gathers a sequence-parallel output for what follows (plan::shard_model decides).
  [[nodiscard]] detail::SplitExit& exit() noexcept { return std::get<sizeof...(L) + 1>(body_.layers); }

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
