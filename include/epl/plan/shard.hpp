#pragma once
/// \file
/// \brief plan::shard_model — a model's epl::Split parts sharded for this rank's place on the
/// tensor axis, before materialize: each Split's layers by their split rules, and what the
/// layout of activations between parts asks for. A Split whose output stays sharded (it ends in
/// a column-parallel Linear) makes that Linear gather when anything follows it; when nothing
/// does, the model's output is sharded and the loss runs vocabulary-parallel.
#include "epl/strategy/pipeline.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief What shard_model found.
struct ShardResult {
  /// The model's output is the last dimension's part `part.index` (a split classifier or LM
  /// head): the loss must run vocabulary-parallel.
  bool sharded_output = false;
};

namespace detail {
struct ShardWalk {
  strategy::SplitContext sc;
  nn::Layout layout = nn::Layout::kWhole;  // the activation so far, of region sc.region
  epl::detail::SplitExit* exit = nullptr;  // the Split it leaves, when it leaves one as sequence parts
  bool met_split = false;
  // What follows needs the activation whole: a column part is gathered by the Linear that split it;
  // sequence parts by the Split they leave when some layer computed on them, else never scattered.
  void need_whole() {
    layout = sc.now(layout, sc.region);
    if (layout == nn::Layout::kSequenceSharded && exit && sc.computed(sc.region) > 0) {
      exit->gather = true;
      sc.region = -1;
      layout = nn::Layout::kWhole;
    }
    layout = strategy::need_whole(sc, layout);
    exit = nullptr;
  }
};
template <class M>
void shard_walk(M& m, ShardWalk& w) {
  using nn::NodeKind;
  constexpr NodeKind kind = nn::kind_of_v<M>;
  auto children = [&] { nn::for_each_child(m, [&](auto& c) { shard_walk(c, w); }); };
  if constexpr (kind == NodeKind::kSplit) {
    // sequence parts go on into the next Split as they are; anything else arrives whole
    if (w.sc.now(w.layout, w.sc.region) != nn::Layout::kSequenceSharded) w.need_whole();
    w.exit = nullptr;
    w.layout = m.shard(w.sc, w.layout);
    if (w.layout == nn::Layout::kSequenceSharded) w.exit = &m.exit();
    w.met_split = true;
  } else if constexpr (kind == NodeKind::kReplicate) {
    // a replicated part that runs data parallel over the split group feeds the Split: it cannot follow one
    constexpr int devices = nn::node_traits<M>::degree;
    EPL_CHECK(!(w.sc.colocated && w.met_split && devices > 1), "an epl::Replicate<", devices, ", ...> part after an epl::Split part: a "
              "replicated part running on the split group's ranks must come before the Split it feeds");
    children();
  } else if constexpr (kind == NodeKind::kResidual) {
    w.need_whole();
    children();
    w.need_whole();
  } else if constexpr (kind == NodeKind::kLeaf) {
    w.need_whole();  // any other layer takes the whole
  } else {
    children();  // sequences, a pipeline's stages, a recompute boundary's layers (a split one inside is refused when it runs)
  }
}
}  // namespace detail

/// \brief Shards model's Split parts as part `part` of the tensor axis (a no-op with one part).
/// `colocated`: the Splits take this rank's rows from a replicated part that runs data parallel
/// over the tensor axis (cluster.colocate_split_and_replicate). `sequence`: split.sequence_parallel,
/// the token-wise layers between tensor-parallel blocks on this rank's part of the sequence; a
/// region of sequence parts that no layer computed on is never scattered (it would only move
/// bytes).
template <class Model>
ShardResult shard_model(Model& model, nn::SplitPart part, bool colocated, bool sequence = false) {
  if (part.whole()) return {};
  detail::ShardWalk w;
  w.sc.part = part;
  w.sc.colocated = colocated;
  w.sc.sequence = sequence;
  try {
    detail::shard_walk(model, w);
  } catch (Error& e) {
    nn::name_layer(model, e);  // "in the split of layer `mlp.0`: Linear(16 -> 33).weight (its outputs): ..."
    throw;
  }
  const nn::Layout out = w.sc.now(w.layout, w.sc.region);
  if (out == nn::Layout::kSequenceSharded) w.need_whole();  // the loss takes the whole output
  for (std::size_t r = 0; r < w.sc.regions.size(); ++r)
    if (w.sc.regions[r].layout == nn::Layout::kSequenceSharded && w.sc.computed(static_cast<int>(r)) == 0)
      w.sc.make_whole(static_cast<int>(r));
  return {out == nn::Layout::kLastDimSharded};
}

namespace detail {
// Calls fn for the parameters met before the first Split, in forward order; true once it is met.
template <class M, class Fn>
bool before_split(M& m, Fn& fn) {
  constexpr nn::NodeKind kind = nn::kind_of_v<M>;
  if constexpr (kind == nn::NodeKind::kSplit) {
    return true;
  } else if constexpr (kind == nn::NodeKind::kLeaf) {
    nn::for_each_parameter(m, fn);
    return false;
  } else {
    bool met = false;
    nn::for_each_child(m, [&](auto& c) { met = met || before_split(c, fn); });
    return met;
  }
}
}  // namespace detail

/// \brief Calls fn(Parameter&) for each parameter a model's forward meets before its first
/// epl::Split part (a colocated split's replicated part).
template <class Model, class Fn>
void for_each_parameter_before_split(Model& model, Fn&& fn) {
  detail::before_split(model, fn);
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
