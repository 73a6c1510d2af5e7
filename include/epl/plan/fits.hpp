#pragma once
/// \file
/// \brief plan::fits — the cost model at compile time, for a model type whose layers state their
/// costs in their types (strategy::static_cost<L> with a strategy::Cost):
///
///     static_assert(epl::plan::fits<MyModel, epl::Policies<epl::Zero<1>>>({.ranks = 8}, {.bytes = 16 << 30, .rows = 64}));
///
/// A model that does not fit stops the compile at a call whose name says what is largest and which
/// policy would shrink it (`optimizer_state_is_largest__add_epl_Zero_1`); at run time the same call
/// throws an epl::Error with the bytes and by how much they are over.
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/plan/cost.hpp"
#include "epl/plan/pieces.hpp"
#include "epl/strategy/partition.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief What a run may use: bytes per rank, and the work of one step.
struct Budget {
  std::int64_t bytes = 0;        ///< device bytes one rank may use (0: the cluster's bytes_per_rank)
  std::int64_t rows = 1;         ///< the global batch, rows (samples) per step
  int micro_batches = 1;         ///< pipeline.num_micro_batch
  int optimizer_slots = 2;       ///< state values per parameter element (AdamW: 2, SGD: 0 or 1)
  std::int64_t tokens_per_row = 1;  ///< tokens a row (a sample) holds: static costs are per token (static_search)
  /// communication.max_splits, which cuts ZeRO's blocks (about a rank's parameters over it); 0: the
  /// key's default (5), or static_search's StaticSearchOptions::buckets
  int max_splits = 0;
};

/// \brief What a model type's static costs add up to on one rank (no alignment padding).
struct StaticFootprint {
  StateBytes state;
  std::int64_t activations = 0;
  InFlightBytes in_flight;  ///< ZeRO's blocks a step holds beyond the state
  [[nodiscard]] constexpr std::int64_t total() const noexcept { return state.device() + activations + in_flight.total(); }
};

namespace detail {
// The largest parameter count or per-row byte count a static cost may state (2^50): what the
// planner's sums multiply by rows, slots and element sizes stays within 64 bits.
inline constexpr std::int64_t kMostCounted = std::int64_t{1} << 50;
inline void cost_is_out_of_range(std::int64_t parameters, std::int64_t activation_bytes) {
  EPL_FAIL("a layer's strategy::Cost is out of range (parameters ", parameters, ", activation bytes ", activation_bytes, "): each count "
           "must be 0 or more and at most 2^50, macs_per_token 0 or more; the planner's sums of them must fit 64 bits");
}
// A layer's stated cost in range (what fits and static_search sum stays within 64 bits).
constexpr void check_cost(const strategy::Cost& c) {
  if (c.parameters < 0 || c.activation_bytes < 0 || c.output_bytes < 0 || c.tensor_bytes < 0 || c.tensor_collectives < 0 ||
      c.backward_bytes < 0 || c.weight_bytes < 0 || c.parameters > kMostCounted || c.activation_bytes > kMostCounted ||
      c.output_bytes > kMostCounted || c.tensor_bytes > kMostCounted || c.backward_bytes > kMostCounted || c.weight_bytes > kMostCounted || !(c.macs_per_token >= 0) || !(c.macs_per_token < 1e30))
    cost_is_out_of_range(c.parameters, c.activation_bytes);
}
[[noreturn]] inline void budget_is_not_valid(const char* who, const char* what) { EPL_FAIL(who, ": ", what); }
inline void bytes_do_not_fit_64_bits(double bytes) {
  EPL_FAIL("the planner's sum of a rank's bytes comes to ", bytes, ", past what 64 bits count: the model's static costs or the "
           "batch are too large (or wrong)");
}
// bytes computed in double first: past 2^62 is an error, not a wrapped count
constexpr void check_countable(double bytes) {
  if (!(bytes < 4.6e18)) bytes_do_not_fit_64_bits(bytes);
}
// The one walk of a model type's units as the partitioner cuts them, for every compile-time
// reader (static_search, static_profile, check_twin): visit(cost, stage, tensor) for each unit in
// model order, its stated cost (whole, not yet divided among a split's ranks), its declared
// Pipeline stage (-1: none) and the split degree it runs under. A Split's entry and exit are no
// units; a layer that states a cost is one, a Residual or Recompute of costed parts too.
template <class M, class V>
constexpr void for_each_static_unit(V& visit, int stage = -1, int tensor = 1) {
  using N = nn::node_traits<M>;
  if constexpr (nn::is_structural_v<M>) {
    return;
  } else if constexpr (strategy::has_static_cost<M>) {
    visit(strategy::static_cost_of<M>(), stage, tensor);
  } else if constexpr (N::kind == nn::NodeKind::kSequence || N::kind == nn::NodeKind::kPipeline || N::kind == nn::NodeKind::kSplit ||
                       N::kind == nn::NodeKind::kReplicate) {
    constexpr bool stages = N::kind == nn::NodeKind::kPipeline;
    constexpr int degree = N::kind == nn::NodeKind::kSplit ? tensor_degree_v<M> : 0;
    int s = 0;
    [&]<class... C>(nn::type_list<C...>) {
      (for_each_static_unit<C>(visit, stages ? s++ : stage, degree ? degree : tensor), ...);
    }(typename N::children{});
  } else {
    static_assert(strategy::has_static_cost<M>, "epl: planning at compile time (plan::static_search, plan::check_twin) needs every "
                                                "layer's costs in its type (or a fixed sequence of such layers): specialise "
                                                "epl::strategy::static_cost<Layer> with a strategy::Cost (the layer is M here; "
                                                "an nn::Repeat's count is a run-time value: write its layers out as fields, or "
                                                "plan a twin)");
  }
}
// Whether every unit for_each_static_unit would visit states its costs. Where one does not, a
// search instantiates that walk alone (its static_assert names the layer) and stops there, not in
// the errors of everything priced from the units after it (a stranger's finding: 21 kB of them).
// It follows for_each_static_unit's recursion above, node kind for node kind: change them together.
template <class M>
constexpr bool statically_costed() {
  using N = nn::node_traits<M>;
  if constexpr (nn::is_structural_v<M> || strategy::has_static_cost<M>) return true;
  else if constexpr (N::kind == nn::NodeKind::kSequence || N::kind == nn::NodeKind::kPipeline || N::kind == nn::NodeKind::kSplit ||
                     N::kind == nn::NodeKind::kReplicate)
    return []<class... C>(nn::type_list<C...>) { return (statically_costed<C>() && ...); }(typename N::children{});
  else return false;
}
template <class M>
constexpr void name_the_uncosted_layer() {
  auto none = [](const strategy::Cost&, int, int) {};
  for_each_static_unit<M>(none);
}
// The units for_each_static_unit visits.
template <class M>
constexpr std::size_t static_unit_count() {
  std::size_t n = 0;
  auto count = [&](const strategy::Cost&, int, int) { ++n; };
  for_each_static_unit<M>(count);
  return n;
}
// One sequential unit of a model type, from its static cost: its part on one rank of a split.
struct StaticUnit {
  strategy::Cost cost;  // macs and parameters already divided by the split degree
  int stage = -1;       // the declared Pipeline stage, or -1
  bool split = false;   // inside an epl::Split: its tensor traffic is real
};
template <class Model>
constexpr auto static_units() {
  std::array<StaticUnit, static_unit_count<Model>()> units{};
  std::size_t at = 0;
  auto keep = [&](strategy::Cost cost, int stage, int tensor) {
    cost.macs_per_token /= tensor;
    cost.parameters /= tensor;
    units[at++] = {cost, stage, tensor > 1};
  };
  for_each_static_unit<Model>(keep);
  return units;
}
// ZeRO's blocks of a rank's arena holding `parameters` elements, with units [first, end) of `units`
// added in backward order (the last first), each unit whole, as one chunk: the arena closes a block at
// a chunk's end. `max_splits` is communication.max_splits.
template <std::size_t N>
constexpr void add_blocks(ZeroBlocks& blocks, const std::array<StaticUnit, N>& units, std::size_t first, std::size_t end,
                          std::vector<std::int64_t>* closed = nullptr) {
  // each block it closes, in order, when `closed` is given
  const auto record = [&](std::int64_t before) {
    if (closed != nullptr && blocks.count > before) closed->push_back(blocks.recent[0]);
  };
  for (std::size_t i = end; i-- > first;) {
    const std::int64_t before = blocks.count;
    blocks.add(units[i].cost.parameters);
    record(before);
  }
  const std::int64_t before = blocks.count;
  blocks.close();
  record(before);
}
constexpr ZeroBlocks zero_blocks_of(std::int64_t parameters, int max_splits) {
  return ZeroBlocks{.block_elements = (parameters + max_splits - 1) / max_splits};
}
// communication.max_splits as a Budget gives it (0: the key's default).
constexpr int max_splits_of(const Budget& b, int otherwise = static_cast<int>(policy::home::Communication::kDefaultSplits)) {
  return b.max_splits > 0 ? b.max_splits : otherwise;
}
// What a rank's chunks add to their units' own activations at their ends (bytes per row): the
// input a chunk after the model's first receives and keeps (its first unit saves it), the output a
// chunk before the model's last sends on (the next rank's to keep, not this one's), and the most
// one of them sends (whose gradient comes back from the next rank and is held while its backward
// runs).
struct StageEnds {
  std::int64_t received = 0, sent = 0, boundary = 0;
  // adds the chunk of units [first, end) of the model's `units`
  template <class Units>
  constexpr void add(const Units& units, std::size_t first, std::size_t end) {
    if (first >= end) return;
    if (first > 0) received += units[first - 1].cost.output_bytes;
    if (end < units.size()) {
      sent += units[end - 1].cost.output_bytes;
      boundary = units[end - 1].cost.output_bytes > boundary ? units[end - 1].cost.output_bytes : boundary;
    }
  }
};
// A rank's compile-time activation peak: each of `flight` micro-batches in flight keeps `kept` (its
// units' own, per row) with its chunks' ends, and over them one backward allocates the most one
// unit's does (`transient`: its input's gradient; a recomputed unit's forward again too) and holds
// the gradient of what its chunk sent on; micro-batches of `rows` rows. Under a schedule that
// splits backward into B and W (`weight` > 0: what its units' B passes leave for W, per row), a
// micro-batch past B holds that until its W, and the one in B gathers it as it goes, over what it
// keeps: a bound (a stranger's ZeroBubble plans peaked up to 43% over the rule without it). The
// run-time planner walks the schedule's actions over the same terms (plan::estimate); this rule
// takes the busiest rank's micro-batches in flight for every rank (a bound where later ranks hold
// fewer).
// `held` is what a micro-batch holds, its chunks' ends included, and `boundary` the gradient of the
// most one sends on.
constexpr std::int64_t activation_peak_of_held(std::int64_t held, std::int64_t transient, std::int64_t boundary, double flight,
                                               std::int64_t rows, std::int64_t weight = 0) {
  if (weight == 0) return static_cast<std::int64_t>(static_cast<double>(held * rows) * flight) + (transient + boundary) * rows;
  const std::int64_t waiting = held > weight ? held : weight;  // a micro-batch before its B, or between B and W
  const double others = flight > 1 ? flight - 1 : 0;
  return static_cast<std::int64_t>(static_cast<double>(waiting * rows) * others) + (held + weight + transient + boundary) * rows;
}
constexpr std::int64_t activation_peak_bytes(std::int64_t kept, const StageEnds& ends, std::int64_t transient, double flight,
                                             std::int64_t rows, std::int64_t weight = 0) {
  return activation_peak_of_held(kept + ends.received - ends.sent, transient, ends.boundary, flight, rows, weight);
}
// What the chunk of units [first, end) of `units` holds a micro-batch, per row, walked in `pieces`
// (the chunk's indices; none: each unit a piece of its own) as plan::estimate walks a profile's
// units: a unit's B pass allocates its input's gradient, as its whole backward does, and the model's
// last chunk ends with the loss, which keeps nothing and whose backward allocates the gradient of
// the model's output (what plan::profile measures of a cross-entropy).
template <std::size_t N>
constexpr PieceBytes chunk_bytes(const std::array<StaticUnit, N>& units, std::size_t first, std::size_t end, std::vector<Piece> pieces = {}) {
  std::vector<UnitBytes> bytes;
  for (std::size_t i = first; i < end; ++i) {
    const auto& c = units[i].cost;
    bytes.push_back({c.activation_bytes, c.output_bytes, c.backward_bytes, c.backward_bytes, c.weight_bytes});
  }
  if (pieces.empty())
    for (std::size_t i = 0; i < bytes.size(); ++i) pieces.push_back({i, i + 1, false});
  const bool last = end == N;
  if (last && N > 0) {
    const std::int64_t gradient = units[N - 1].cost.output_bytes;
    bytes.push_back({0, 0, gradient, gradient, 0});
    pieces.push_back({end - first, end - first + 1, false});
  }
  return walk_pieces(bytes, pieces, first > 0 ? units[first - 1].cost.output_bytes : 0, last, last);
}
struct StaticSums {
  std::int64_t parameters = 0;        // elements this rank holds (its stage's, its tensor part)
  std::int64_t activation_bytes = 0;  // per row, this rank's stage
  PieceBytes held;                    // what its stage holds a micro-batch (chunk_bytes)
  std::int64_t backward_bytes = 0;    // the most a unit's backward allocates a while, per row
  StageEnds ends;                     // what it receives and sends on
  ZeroBlocks blocks;                  // ZeRO's blocks of its arena
};
// Each of a Pipeline's declared stages' sums (the whole model's when it declares none), each unit's
// parameters divided among the ranks of the split it runs under; its arena cut into ZeRO's blocks
// by `max_splits`.
template <class M>
constexpr auto static_sums(int max_splits) {
  std::array<StaticSums, static_cast<std::size_t>(declared_stages_v<M>)> per{};
  std::array<std::size_t, static_cast<std::size_t>(declared_stages_v<M>)> first{}, end{};  // each stage's units, [first, end) of static_units (a stage's are consecutive)
  std::size_t at = 0;
  auto add = [&](const strategy::Cost& c, int stage, int tensor) {
    check_cost(c);
    const auto k = static_cast<std::size_t>(stage < 0 ? 0 : stage);
    if (end[k] == 0) first[k] = at;
    end[k] = ++at;
    auto& s = per[k];
    s.parameters += c.parameters / tensor;
    s.activation_bytes += c.activation_bytes;
    s.backward_bytes = c.backward_bytes > s.backward_bytes ? c.backward_bytes : s.backward_bytes;
  };
  for_each_static_unit<M>(add);
  constexpr auto units = static_units<M>();
  for (std::size_t s = 0; s < per.size(); ++s) {  // each stage one chunk
    per[s].blocks = zero_blocks_of(per[s].parameters, max_splits);
    add_blocks(per[s].blocks, units, first[s], end[s]);
    per[s].ends.add(units, first[s], end[s]);
    per[s].held = chunk_bytes(units, first[s], end[s]);
  }
  return per;
}

// What does not fit, named so a compile error says it (these are not constexpr: calling one
// ends constant evaluation at its name); at run time each throws the message.
[[noreturn]] inline void does_not_fit(const char* what, std::int64_t need, std::int64_t budget) {
  EPL_FAIL("the model does not fit: a rank needs ", need, " bytes, ", need - budget, " more than its budget of ", budget,
           " (the smaller of Budget::bytes and Cluster::bytes_per_rank); ", what);
}
inline void optimizer_state_is_largest__add_epl_Zero_1(std::int64_t need, std::int64_t budget) {
  does_not_fit("the optimizer state is the largest part: add epl::Zero<1> (zero.level=v0) to shard it over the replicas", need, budget);
}
inline void gradients_are_largest__add_epl_Zero_2(std::int64_t need, std::int64_t budget) {
  does_not_fit("the gradients are the largest part: add epl::Zero<2> (zero.level=v1) to shard them over the replicas", need, budget);
}
inline void parameters_are_largest__add_epl_Zero_3(std::int64_t need, std::int64_t budget) {
  does_not_fit("the parameters are the largest part: add epl::Zero<3> (zero.level=v2) to shard them over the replicas", need, budget);
}
inline void state_is_sharded__add_epl_Offload(std::int64_t need, std::int64_t budget) {
  does_not_fit("add epl::Offload<epl::offload::V0>, with the epl::Zero<3> it needs, to keep the training state in host memory",
               need, budget);
}
inline void activations_are_largest__mark_epl_Recompute_or_raise_micro_batches(std::int64_t need, std::int64_t budget) {
  does_not_fit("the activations are the largest part: mark blocks epl::Recompute<...> (or gradient_checkpoint.type=auto), or "
               "raise pipeline.num_micro_batch", need, budget);
}
inline void blocks_in_flight_are_largest__raise_communication_max_splits(std::int64_t need, std::int64_t budget) {
  does_not_fit("ZeRO's blocks in flight are the largest part (stage 3's gathered layers, stages 2 and 3's gradient blocks being "
               "reduced, about 1/communication.max_splits of a rank's parameters each): raise communication.max_splits "
               "(Budget::max_splits) for smaller blocks", need, budget);
}
inline void blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage(std::int64_t need, std::int64_t budget) {
  does_not_fit("ZeRO's blocks in flight outweigh what this stage shards (a block never splits a parameter: a model of few large "
               "layers), so a lower ZeRO stage needs less: lower zero.level (epl::Zero<k> runs every stage up to k)", need, budget);
}
inline void state_is_sharded_already__add_ranks_or_split_the_model(std::int64_t need, std::int64_t budget) {
  does_not_fit("every policy that shrinks it is on: use more ranks, or split the model (epl::Split, epl::Pipeline)", need, budget);
}
inline void one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model(std::int64_t need, std::int64_t budget) {
  does_not_fit("the training state is the largest part and there is one replica, so ZeRO has nothing to shard it over: use more "
               "ranks (replicas), or split the model (epl::Split, epl::Pipeline)", need, budget);
}
// `micro` says where the micro-batch count came from (Budget::micro_batches, or a combination's).
inline void batch_does_not_divide__use_a_multiple_of_replicas_times_micro_batches(const char* who, std::int64_t rows, std::int64_t data,
                                                                                   std::int64_t micro_batches, const char* micro) {
  EPL_FAIL(who, ": a global batch of ", rows, rows == 1 ? " row" : " rows", " (Budget::rows) does not divide into ", data,
           data == 1 ? " data-parallel replica" : " data-parallel replicas", " x ", micro_batches,
           micro_batches == 1 ? " micro-batch" : " micro-batches", " (", micro, "); give a batch that is a multiple of ", data * micro_batches,
           rows % data == 0 ? ", or a micro-batch count that divides the " + std::to_string(rows / data) + " rows a replica gets"
                            : std::string());
}
inline void world_size_does_not_hold_a_replica__use_a_multiple(const char* who, std::int64_t ranks, std::int64_t replica) {
  EPL_FAIL(who, ": a cluster of ", ranks, " ranks cannot hold replicas of ", replica, " ranks (pipeline stages x split "
           "degree); use a multiple of ", replica);
}
// In a constant expression a model that does not fit reads element `need` of a one-element array
// named for the reason, which the compilers refuse naming the array and printing the index: g++'s
// error shows the reason and the bytes a rank needs, and clang's note on this call shows the
// budget too (fits_v shows all three as template arguments).
namespace misfit {
inline constexpr char activations_are_largest__mark_epl_Recompute_or_raise_micro_batches[1]{};
inline constexpr char one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model[1]{};
inline constexpr char optimizer_state_is_largest__add_epl_Zero_1[1]{};
inline constexpr char gradients_are_largest__add_epl_Zero_2[1]{};
inline constexpr char parameters_are_largest__add_epl_Zero_3[1]{};
inline constexpr char state_is_sharded__add_epl_Offload[1]{};
inline constexpr char state_is_sharded_already__add_ranks_or_split_the_model[1]{};
inline constexpr char blocks_in_flight_are_largest__raise_communication_max_splits[1]{};
inline constexpr char blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage[1]{};
inline constexpr char no_combination_fits__add_ranks_or_memory[1]{};  // static_search's
}  // namespace misfit
constexpr bool does_not_fit__the_index_is_the_bytes_a_rank_needs(const char* reason, std::int64_t need, std::int64_t budget) {
  return need <= budget || reason[need] == 0;
}
// The budget's own checks, shared by fits and static_search.
constexpr void check_budget(const Budget& b, const char* who) {
  if (b.bytes < 0) budget_is_not_valid(who, "Budget::bytes must be 0 (the cluster's bytes_per_rank) or more");
  if (b.rows < 1 || b.rows > kMostCounted) budget_is_not_valid(who, "Budget::rows (the global batch) must be from 1 to 2^50");
  if (b.micro_batches < 1) budget_is_not_valid(who, "Budget::micro_batches must be at least 1");
  if (b.tokens_per_row < 1 || b.tokens_per_row > kMostCounted)
    budget_is_not_valid(who, "Budget::tokens_per_row must be from 1 to 2^50");
  if (b.optimizer_slots < 0 || b.optimizer_slots > kMostStateSlots)
    budget_is_not_valid(who, "Budget::optimizer_slots (the optimizer's state slots an element) must be from 0 to 64");
  if (b.max_splits < 0 || b.max_splits > policy::home::Communication::kMostSplits)
    budget_is_not_valid(who, "Budget::max_splits (communication.max_splits) must be from 1 to 2^20, or 0 for the key's default");
}
// The bytes a rank may use: the budget's, at most the cluster's (0: the cluster's).
constexpr std::int64_t limit_of(const Cluster& c, const Budget& b) {
  return b.bytes > 0 && b.bytes < c.bytes_per_rank ? b.bytes : c.bytes_per_rank;
}
}  // namespace detail

/// \brief One rank's bytes for Model with Policy on `cluster`, from the layers' static costs:
/// ZeRO's and offload's compiled stage shard the state over the data-parallel ranks (the ranks
/// over pipeline stages x split degree); activations are the busiest stage's per row (with the
/// input it receives, without the output it sends on), times the rows of a
/// micro-batch, times the micro-batches a first stage of 1F1B keeps in flight, plus the most one
/// unit's backward allocates for a while (strategy::Cost::backward_bytes) and the gradient of the
/// output it sent on.
template <class Model, class Policy = Policies<>>
constexpr StaticFootprint static_footprint(const Cluster& cluster, const Budget& budget);

namespace detail {
// static_footprint at ZeRO `zero`, with or without `offload`, `slots` state values an element, the
// blocks cut by `max_splits`: what fits' advice weighs against the compiled policies' footprint.
template <class Model>
constexpr StaticFootprint footprint_under(const Cluster& cluster, const Budget& budget, int zero, bool offload, int slots, int max_splits) {
  constexpr int t = tensor_degree_v<Model>;
  constexpr int p = declared_stages_v<Model>;
  check_cluster(cluster, "plan::fits");
  check_budget(budget, "plan::fits");
  if (cluster.ranks % (p * t) != 0) world_size_does_not_hold_a_replica__use_a_multiple("plan::fits", cluster.ranks, p * t);
  const int data = cluster.ranks / (p * t);
  if (budget.rows % (static_cast<std::int64_t>(data) * budget.micro_batches) != 0)
    batch_does_not_divide__use_a_multiple_of_replicas_times_micro_batches("plan::fits", budget.rows, data, budget.micro_batches,
                                                                          "Budget::micro_batches");
  // the busiest stage: the one whose footprint is largest
  const std::int64_t micro_rows = budget.rows / data / budget.micro_batches;
  StaticFootprint most;
  for (const auto& sums : static_sums<Model>(max_splits)) {
    check_countable(static_cast<double>(sums.parameters) * 4.0 * (2 + slots));
    check_countable(static_cast<double>(sums.activation_bytes + sums.backward_bytes + sums.ends.received + sums.ends.boundary) *
                    static_cast<double>(budget.rows));
    StaticFootprint f;
    f.state = state_bytes(sums.parameters, data, zero, offload, slots);
    f.activations = activation_peak_of_held(sums.held.kept, sums.held.transient, sums.ends.boundary, p == 1 ? 1 : std::min(budget.micro_batches, p),
                                            micro_rows);
    f.in_flight = in_flight_bytes(sums.blocks, data, zero, offload, budget.micro_batches);
    if (f.total() > most.total()) most = f;
  }
  return most;
}
// The state values an element: the optimizer's and the policies' (an EMA's copy).
template <class Policy>
constexpr int slots_of(const Budget& budget) {
  return budget.optimizer_slots + policy::state_slots(policy::compiled<Policy>(false));
}
}  // namespace detail

template <class Model, class Policy>
constexpr StaticFootprint static_footprint(const Cluster& cluster, const Budget& budget) {
  constexpr policy::Compiled c = policy::compiled<Policy>(false);
  return detail::footprint_under<Model>(cluster, budget, c.zero, c.offload, detail::slots_of<Policy>(budget), detail::max_splits_of(budget));
}

namespace detail {
// Why a footprint does not fit: its largest part, and what shrinks it.
enum class Misfit { kActivations, kInFlight, kOneReplica, kOptimizerState, kGradients, kParameters, kOffload, kLowerStage, kEverything };
constexpr const char* misfit_array(Misfit m) {
  switch (m) {
    case Misfit::kActivations: return misfit::activations_are_largest__mark_epl_Recompute_or_raise_micro_batches;
    case Misfit::kInFlight: return misfit::blocks_in_flight_are_largest__raise_communication_max_splits;
    case Misfit::kLowerStage: return misfit::blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage;
    case Misfit::kOneReplica: return misfit::one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model;
    case Misfit::kOptimizerState: return misfit::optimizer_state_is_largest__add_epl_Zero_1;
    case Misfit::kGradients: return misfit::gradients_are_largest__add_epl_Zero_2;
    case Misfit::kParameters: return misfit::parameters_are_largest__add_epl_Zero_3;
    case Misfit::kOffload: return misfit::state_is_sharded__add_epl_Offload;
    case Misfit::kEverything: break;
  }
  return misfit::state_is_sharded_already__add_ranks_or_split_the_model;
}
template <class Model, class Policy>
constexpr Misfit misfit_of(const StaticFootprint& f, const Cluster& cluster, const Budget& budget) {
  constexpr policy::Compiled c = policy::compiled<Policy>(false);
  const auto& s = f.state;
  constexpr int p = declared_stages_v<Model>;
  const bool replicas = cluster.ranks / (p * tensor_degree_v<Model>) > 1;  // ZeRO shards over them: none, nothing to shard
  if (f.activations >= s.parameters && f.activations >= s.gradients && f.activations >= s.optimizer_state &&
      f.activations >= f.in_flight.total())
    return Misfit::kActivations;
  if (!replicas) return Misfit::kOneReplica;
  // Each change a message can advise, with what a rank would need after it: a stage up shards more
  // but adds blocks in flight, which on a model of few large layers outweigh it (a stranger's
  // finding: "add epl::Zero<2>" raised the need). The first in this order that fits is advised,
  // else the one that needs least, if any needs less than now.
  const auto need = [&](int zero, bool offload, int max_splits) {
    return footprint_under<Model>(cluster, budget, zero, offload, slots_of<Policy>(budget), max_splits).total();
  };
  const int splits = max_splits_of(budget);
  struct Option {
    Misfit why;
    bool open;
    std::int64_t need;
  };
  std::int64_t lower = f.total();
  for (int z = 0; z < c.zero; ++z) lower = std::min(lower, need(z, false, splits));
  const Option options[] = {
      {Misfit::kOptimizerState, c.zero < 1 && s.optimizer_state >= s.parameters && s.optimizer_state >= s.gradients, need(1, false, splits)},
      {Misfit::kGradients, c.zero < 2, need(2, false, splits)},
      {Misfit::kParameters, c.zero < 3, need(3, false, splits)},
      {Misfit::kOffload, !c.offload, need(3, true, splits)},
      {Misfit::kLowerStage, c.zero > 0, lower},
      {Misfit::kInFlight, f.in_flight.total() > 0,  // the smallest blocks: a block never splits a parameter
       need(c.zero, c.offload, static_cast<int>(policy::home::Communication::kMostSplits))},
  };
  const std::int64_t limit = limit_of(cluster, budget);
  for (const auto& o : options)
    if (o.open && o.need <= limit) return o.why;
  const Option* least = nullptr;
  for (const auto& o : options)
    if (o.open && o.need < f.total() && (!least || o.need < least->need)) least = &o;
  return least ? least->why : Misfit::kEverything;
}
}  // namespace detail

/// \brief True when Model with Policy fits `budget` on `cluster`; otherwise, in a constant
/// expression, a compile error that names the largest part and the policy that shrinks it, and
/// prints the bytes a rank needs (as an array index; clang prints the budget too), and at run time
/// an epl::Error that says so with the bytes. (fits_v shows the reason, the bytes and the budget
/// as template arguments.)
template <class Model, class Policy = Policies<>>
constexpr bool fits(const Cluster& cluster, const Budget& budget) {
  const auto f = static_footprint<Model, Policy>(cluster, budget);
  const std::int64_t need = f.total(), limit = detail::limit_of(cluster, budget);
  if (need <= limit) return true;
  using detail::Misfit;
  const Misfit why = detail::misfit_of<Model, Policy>(f, cluster, budget);
  if (std::is_constant_evaluated()) return detail::does_not_fit__the_index_is_the_bytes_a_rank_needs(detail::misfit_array(why), need, limit);
  switch (why) {
    case Misfit::kActivations: detail::activations_are_largest__mark_epl_Recompute_or_raise_micro_batches(need, limit); break;
    case Misfit::kInFlight: detail::blocks_in_flight_are_largest__raise_communication_max_splits(need, limit); break;
    case Misfit::kLowerStage: detail::blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage(need, limit); break;
    case Misfit::kOneReplica: detail::one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model(need, limit); break;
    case Misfit::kOptimizerState: detail::optimizer_state_is_largest__add_epl_Zero_1(need, limit); break;
    case Misfit::kGradients: detail::gradients_are_largest__add_epl_Zero_2(need, limit); break;
    case Misfit::kParameters: detail::parameters_are_largest__add_epl_Zero_3(need, limit); break;
    case Misfit::kOffload: detail::state_is_sharded__add_epl_Offload(need, limit); break;
    case Misfit::kEverything: detail::state_is_sharded_already__add_ranks_or_split_the_model(need, limit); break;
  }
  return false;
}

/// \brief The reasons a model does not fit, as types: a compile error names one among the
/// template arguments of does_not_fit, with the bytes.
namespace does_not_fit_because {
struct activations_are_largest__mark_epl_Recompute_or_raise_micro_batches {};
struct blocks_in_flight_are_largest__raise_communication_max_splits {};
struct blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage {};
struct one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model {};
struct optimizer_state_is_largest__add_epl_Zero_1 {};
struct gradients_are_largest__add_epl_Zero_2 {};
struct parameters_are_largest__add_epl_Zero_3 {};
struct state_is_sharded__add_epl_Offload {};
struct state_is_sharded_already__add_ranks_or_split_the_model {};
}  // namespace does_not_fit_because

/// \brief Instantiated where a model does not fit: its arguments are the reason, the bytes a rank
/// needs and the bytes it may use, so the compiler's "required from" line shows them, as
/// `does_not_fit<...::optimizer_state_is_largest__add_epl_Zero_1, 17179869184, 8589934592>`.
template <class Reason, std::int64_t NeedBytes, std::int64_t BudgetBytes>
struct does_not_fit {
  static_assert(NeedBytes <= BudgetBytes, "epl: the model does not fit its budget; this template's arguments say why (the largest "
                                          "part and the policy that shrinks it), the bytes a rank needs, and the bytes it may use");
  static constexpr bool value = true;  // the static_assert above is the one error
};

namespace detail {
template <Misfit M>
constexpr auto reason_type() {
  namespace why = does_not_fit_because;
  if constexpr (M == Misfit::kActivations) return why::activations_are_largest__mark_epl_Recompute_or_raise_micro_batches{};
  else if constexpr (M == Misfit::kInFlight) return why::blocks_in_flight_are_largest__raise_communication_max_splits{};
  else if constexpr (M == Misfit::kLowerStage) return why::blocks_in_flight_outweigh_their_shards__use_a_lower_zero_stage{};
  else if constexpr (M == Misfit::kOneReplica) return why::one_replica_has_nothing_to_shard_over__add_ranks_or_split_the_model{};
  else if constexpr (M == Misfit::kOptimizerState) return why::optimizer_state_is_largest__add_epl_Zero_1{};
  else if constexpr (M == Misfit::kGradients) return why::gradients_are_largest__add_epl_Zero_2{};
  else if constexpr (M == Misfit::kParameters) return why::parameters_are_largest__add_epl_Zero_3{};
  else if constexpr (M == Misfit::kOffload) return why::state_is_sharded__add_epl_Offload{};
  else return why::state_is_sharded_already__add_ranks_or_split_the_model{};
}
template <class Model, class Policy, const Cluster& C, const Budget& B>
constexpr bool fits_with_figures() {
  constexpr auto f = static_footprint<Model, Policy>(C, B);
  constexpr std::int64_t need = f.total(), limit = limit_of(C, B);
  if constexpr (need <= limit) {
    return true;
  } else {
    using Reason = decltype(reason_type<misfit_of<Model, Policy>(f, C, B)>());
    return ::epl::plan::does_not_fit<Reason, need, limit>::value;
  }
}
}  // namespace detail

/// \brief fits<Model, Policy>(cluster, budget) for a cluster and budget that are constants of
/// static storage (`constexpr plan::Cluster cluster{...};` at namespace scope, or `static
/// constexpr`): true when it fits, else a compile error whose does_not_fit<Reason, NeedBytes,
/// BudgetBytes> shows the reason and the bytes:
///
///     constexpr epl::plan::Cluster kCluster{.ranks = 8};
///     constexpr epl::plan::Budget kBudget{.bytes = 16ll << 30, .rows = 64};
///     static_assert(epl::plan::fits_v<MyModel, MyPolicies, kCluster, kBudget>);
template <class Model, class Policy, const Cluster& C, const Budget& B>
inline constexpr bool fits_v = detail::fits_with_figures<Model, Policy, C, B>();

}  // namespace plan
}  // namespace v0
}  // namespace epl
