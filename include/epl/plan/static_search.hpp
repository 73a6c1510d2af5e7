#pragma once
/// \file
/// \brief plan::static_search — the planner's search at compile time, for a model type whose
/// layers state their costs in their types (strategy::static_cost<L> with a strategy::Cost) and a
/// cluster described by constants:
///
///     constexpr auto found = epl::plan::static_search<MyModel, epl::Policies<epl::Zero<3>>>(
///         {.ranks = 8, .bytes_per_rank = 16 << 30, .macs_per_second = 2e12}, {.bytes = 16 << 30, .rows = 64, .tokens_per_row = 1024});
///     static_assert(found.best().pipeline == 1, "the planner says MyModel wants no pipeline here");
///
/// It tries every data-parallel degree, pipeline depth (the model's own Pipeline stages, or a
/// balanced cut of its units), micro-batch count, schedule, ZeRO stage and offload the policies
/// compile, and recompute; prices each from the costs (roofline compute at the cluster's GEMM
/// rate, α-β collectives, the schedule's bubble and in-flight micro-batches) and keeps the fastest
/// that fit the budget. The tensor-parallel degree is the model type's (its epl::Split parts):
/// search each type and merge() them to compare degrees. When nothing fits, a compile error names
/// it (`no_combination_fits__add_ranks_or_memory`) and prints the bytes the smallest plan needs (an
/// array index); at run time an epl::Error says by how much the smallest is over. The run-time search
/// (plan::search) does the same from a measured profile, more exactly.
#include <array>
#include <iterator>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "epl/plan/fits.hpp"
#include "epl/plan/pieces.hpp"
#include "epl/plan/price.hpp"
#include "epl/reflect/type_name.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief One combination as the compile-time search prices it (per step, its busiest rank).
struct StaticPlan {
  int data = 1, tensor = 1, pipeline = 1, micro_batches = 1;
  const strategy::ScheduleEntry* schedule = &strategy::kDefaultSchedule;  ///< its schedule (pipeline > 1), of strategy::kSchedules
  int virtual_stages = 1;  ///< chunks per rank (Interleaved: 2)
  policy::Choice policies = {};  ///< the policy axes' values (policy/axes.hpp; amp always off)
  StaticFootprint bytes = {};  ///< state and peak activations
  double compute_seconds = 0, tensor_seconds = 0, pipeline_seconds = 0, data_seconds = 0, host_seconds = 0;
  double bubble = 0;
  double seconds = 0;      ///< the step
  bool refused = false;    ///< a combination plan::make would refuse (recompute with no chunk of 2 units): priced, never kept
  [[nodiscard]] constexpr std::string_view schedule_name() const { return schedule->name; }
  /// \brief The same combination as the run-time search's candidate (its keys, its name).
  [[nodiscard]] Candidate candidate() const {
    return {.data = data, .pipeline = pipeline, .micro_batches = micro_batches, .tensor = tensor, .schedule = std::string(schedule_name()),
            .virtual_stages = pipeline > 1 && schedule->virtual_stages ? virtual_stages : 2, .policies = policies};
  }
};

/// \brief What static_search found: the K fastest fitting plans, fastest first (as fast: the
/// smaller first).
template <std::size_t K>
struct StaticSearch {
  std::array<StaticPlan, K> plans{};
  int count = 0;                  ///< plans held (at most K)
  int tried = 0, fit = 0, too_big = 0;
  int refused = 0;                ///< tried, but refused as plan::make would (recompute with no chunk of 2 units to cut)
  StaticPlan smallest_over{};     ///< the smallest of those over the budget
  [[nodiscard]] constexpr const StaticPlan& best() const { return plans[0]; }
  /// \brief Whether a comes before b: faster, or as fast and smaller (as plan::search ranks).
  static constexpr bool before(const StaticPlan& a, const StaticPlan& b) {
    return a.seconds < b.seconds || (a.seconds == b.seconds && a.bytes.total() < b.bytes.total());
  }
  /// \brief Keeps p when it is among the K fastest.
  constexpr void offer(const StaticPlan& p) {
    int at = count < static_cast<int>(K) ? count : static_cast<int>(K) - 1;
    if (count == static_cast<int>(K) && !before(p, plans[K - 1])) return;
    while (at > 0 && before(p, plans[static_cast<std::size_t>(at - 1)])) {
      plans[static_cast<std::size_t>(at)] = plans[static_cast<std::size_t>(at - 1)];
      --at;
    }
    plans[static_cast<std::size_t>(at)] = p;
    if (count < static_cast<int>(K)) ++count;
  }
};

/// \brief The plans of two searches (of two model types: two split degrees), the K fastest.
template <std::size_t K>
constexpr StaticSearch<K> merge(const StaticSearch<K>& a, const StaticSearch<K>& b) {
  StaticSearch<K> m = a;
  for (int i = 0; i < b.count; ++i) m.offer(b.plans[static_cast<std::size_t>(i)]);
  m.tried += b.tried;
  m.fit += b.fit;
  m.too_big += b.too_big;
  m.refused += b.refused;
  if (b.too_big > 0 && (a.too_big == 0 || b.smallest_over.bytes.total() < a.smallest_over.bytes.total())) m.smallest_over = b.smallest_over;
  return m;
}

/// \brief What the search tries besides the mesh and the policies.
struct StaticSearchOptions {
  std::array<int, 8> micro_batches{1, 2, 4, 8, 16};  ///< counts to try (0: an unused entry)
  /// Rows a micro-batch to try besides (0: an unused entry): each data-parallel degree's count that
  /// gives micro-batches of that many rows (a large batch's micro-batches of 1 or 2 rows, as
  /// Megatron runs them).
  std::array<int, 4> micro_batch_rows{};
  /// communication.max_splits: the reduction's messages a ring pass, all but the last hidden by
  /// backward, and ZeRO's blocks (Budget::max_splits instead, when given)
  int buckets = 5;
  bool pipelines = true;  ///< cut an unannotated model into stages, as auto.auto_parallel does
  bool recompute = true;  ///< try gradient_checkpoint.type = "auto"
};

namespace detail {
// What one stage of a cut adds up to.
struct StageSums {
  double macs = 0;  // per token, this rank's part
  std::int64_t parameters = 0, activation_bytes = 0, output_bytes = 0, tensor_bytes = 0;
  std::int64_t backward_bytes = 0;  // the most one unit's backward allocates for a while, per row
  std::int64_t weight_bytes = 0;    // what its units' B passes leave for W, per row
  int collectives = 0;
  // the rank's slowest chunk (an Interleaved rank holds v): its multiply-adds a token, its split
  // group's traffic; and the most units any of its chunks holds (recompute needs 2 to cut one)
  double chunk_macs = 0;
  double chunk_recompute_macs = 0;  // the most of a chunk's 3 x its multiply-adds + its recomputed segments' again
  std::int64_t chunk_tensor_bytes = 0;
  int chunk_collectives = 0;
  std::size_t chunk_units = 0;
  StageEnds ends;     // what its chunks receive and send on
  ZeroBlocks blocks;  // ZeRO's blocks of the rank's arena
};

[[noreturn]] inline void combination_is_not_the_cluster_s_ranks(const char* who, int data, int pipeline, int tensor, int ranks) {
  EPL_FAIL(who, ": the combination's data-parallel degree x pipeline stages x the model's split degree (", data, " x ", pipeline, " x ",
           tensor, " = ", static_cast<std::int64_t>(data) * pipeline * tensor, ") is not the cluster's ", ranks,
           " ranks: give degrees whose product is ", ranks);
}
[[noreturn]] inline void model_has_fewer_units_than_chunks(const char* who, std::int64_t units, int pipeline, int virtual_stages) {
  EPL_FAIL(who, ": the model has ", units, " units, fewer than the combination's ", static_cast<std::int64_t>(pipeline) * virtual_stages,
           " chunks (", pipeline, " pipeline stages x ", virtual_stages, " virtual stages): give at most ", units, " chunks");
}
[[noreturn]] inline void nothing_to_try__check_the_batch_and_micro_batches(int ranks, std::int64_t rows) {
  EPL_FAIL("plan::static_search: no combination to try on ", ranks, " ranks: a global batch of ", rows, " rows divides into none of "
           "the data-parallel degrees x micro-batch counts (StaticSearchOptions::micro_batches and micro_batch_rows; 0 entries are "
           "unused; a count above 65536 is not tried), or the model has fewer units than the stages; list counts that divide the "
           "batch over the replicas");
}
[[noreturn]] inline void no_combination_fits__add_ranks_or_memory(std::int64_t need, std::int64_t budget, int tried) {
  EPL_FAIL("plan::static_search: no combination of the ", tried, " tried fits ", budget, " bytes per rank; the smallest needs ", need,
           " bytes, ", need - budget, " more: add ranks or memory, or policies that shrink it (epl::Zero<3>, epl::Offload)");
}
}  // namespace detail

namespace detail {
// Prices combinations of Model from its units' static costs for static_search and static_price:
// each rank's sums over a cut (rank s holds chunks s, s + p, ...), the cut kept while the
// combinations of one (p, v) follow each other.
template <class Model>
class StaticPricer {
 public:
  static constexpr auto units = static_units<Model>();
  static constexpr std::size_t n = units.size();
  static constexpr int declared = [] {
    if constexpr (is_pipeline_v<Model>) return Model::kStages;
    else return 0;
  }();
  // Budget::max_splits, when given, is communication.max_splits for the reduction's buckets too
  constexpr StaticPricer(const Cluster& cluster, const Budget& budget, int buckets)
      : cluster_(cluster), budget_(budget), buckets_(max_splits_of(budget, buckets)) {}

  constexpr StaticPlan price(const Combination& k) {
    const int p = k.pipeline, v = k.virtual_stages, m = k.micro_batches, t = tensor_degree_v<Model>;
    if (p != cut_p_ || v != cut_v_) sum_cut(p, v);
    const std::int64_t micro_rows = budget_.rows / k.data / m;
    StaticPlan plan{.data = k.data, .tensor = t, .pipeline = p, .micro_batches = m, .schedule = k.schedule, .virtual_stages = v,
                    .policies = k.policies};
    const double tokens = static_cast<double>(budget_.tokens_per_row * micro_rows);
    StepCost cost;
    for (int s = 0; s < p; ++s) {
      const auto& sum = rank_[static_cast<std::size_t>(s)];
      check_countable(static_cast<double>(sum.activation_bytes + sum.backward_bytes + sum.weight_bytes + sum.ends.received +
                                          sum.ends.boundary) *
                      static_cast<double>(budget_.rows) *
                      static_cast<double>(m));
      StaticFootprint f;
      f.state = state_bytes(sum.parameters, k.data, k.policies.zero, k.policies.offload, budget_.optimizer_slots);
      f.in_flight = in_flight_bytes(sum.blocks, k.data, k.policies.zero, k.policies.offload, m);
      if (k.policies.zero >= 2 && k.schedule->virtual_stages && v > 1) f.in_flight.gradients = chunk_ordered_gradients(k, s, sum.blocks);
      // the rank's schedule walked over what its chunks hold a micro-batch, as plan::estimate walks it
      const bool recompute = k.policies.recompute;
      f.activations = peak_per_row(k, recompute)[static_cast<std::size_t>(s)] * micro_rows;
      if (f.total() > plan.bytes.total()) plan.bytes = f;
      // the slowest chunk's micro-batch: forward, backward twice its work, and under recompute the
      // forward of the segments gradient_checkpoint.type = "auto" recomputes again
      if (recompute && sum.chunk_units < 2) plan.refused = true;  // nothing to cut, as plan::make refuses
      const double chunk = (recompute ? sum.chunk_recompute_macs : 3 * sum.chunk_macs) * tokens / cluster_.macs_per_second;
      const double talk = cluster_.tensor.all_reduces(t, sum.collectives, static_cast<double>(sum.tensor_bytes * micro_rows));
      const double chunk_talk =
          cluster_.tensor.all_reduces(t, sum.chunk_collectives, static_cast<double>(sum.chunk_tensor_bytes * micro_rows));
      cost.chunk_seconds = chunk > cost.chunk_seconds ? chunk : cost.chunk_seconds;
      cost.chunk_talk = chunk_talk > cost.chunk_talk ? chunk_talk : cost.chunk_talk;
      cost.rank_talk = talk > cost.rank_talk ? talk : cost.rank_talk;
      const double grads = static_cast<double>(f.state.gradients + f.state.host_gradients);
      cost.gradient_bytes = grads > cost.gradient_bytes ? grads : cost.gradient_bytes;
      const double sends = static_cast<double>(sum.output_bytes * micro_rows);
      cost.send_bytes = sends > cost.send_bytes ? sends : cost.send_bytes;
    }
    cost.host_bytes = static_cast<double>(plan.bytes.state.host_parameters + plan.bytes.state.host_gradients);
    const StepPrice priced = plan::price(cluster_, k, cost, buckets_);
    plan.bubble = priced.bubble;
    plan.compute_seconds = priced.compute_seconds;
    plan.tensor_seconds = priced.tensor_seconds;
    plan.pipeline_seconds = priced.pipeline_seconds;
    plan.data_seconds = priced.data_seconds;
    plan.host_seconds = priced.host_seconds;
    plan.seconds = priced.seconds;
    return plan;
  }

  // A model with split units that hold parameters (Megatron's layers, the published runs' twins):
  // the Trainer's gradient_checkpoint.type = "auto" does not recompute such a unit (its forward
  // would run its group's collectives again), while Megatron recomputes every layer. Its recompute
  // is priced as Megatron's: each unit's output kept and one unit's activations again during its
  // backward, every unit's multiply-adds again but the model's last segment's. Every other model is
  // priced as the Trainer runs it: its segments walked as plan::estimate walks them.
  static constexpr bool split_recompute = [] {
    for (const auto& u : units)
      if (u.split && u.cost.parameters > 0) return true;
    return false;
  }();

 private:
  // Each rank's activation peak a row of a micro-batch (a peak is linear in the rows: every byte
  // a chunk holds is so many a row) under k's schedule, m and recompute over the current cut: its
  // actions walked over what its chunks hold (plan::detail::activation_peak, the run-time
  // planner's walk). Kept for the combinations that differ only in the replicas and the policies
  // that hold no activations.
  constexpr const std::vector<std::int64_t>& peak_per_row(const Combination& k, bool recompute) {
    const int p = cut_p_, v = cut_v_, m = k.micro_batches;
    const strategy::ScheduleEntry* schedule = p == 1 ? &strategy::kDefaultSchedule : k.schedule;  // one stage: F and B by turns
    for (const auto& e : peaks_)
      if (e.micro_batches == m && e.schedule == schedule && e.recompute == recompute) return e.per_rank;
    PeakEntry e{.micro_batches = m, .schedule = schedule, .recompute = recompute, .per_rank = {}};
    const auto& bytes = recompute ? recomputed_ : plain_;
    for (int s = 0; s < p; ++s) {
      if (!schedule->virtual_stages && !schedule->splits_backward) {
        // GPipe and 1F1B, one chunk a rank: their walk in closed form (clang's step limit for a
        // constant expression stopped a search that walked each action list). The rank holds f
        // micro-batches when its last warm-up forward ends or its first backward begins: what the
        // first rank of a pipeline of p - s ranks holds (ScheduleEntry::in_flight; m under GPipe).
        const PieceBytes& w = bytes[static_cast<std::size_t>(s)];
        const auto f = static_cast<std::int64_t>(schedule->in_flight(m, 1, p - s));
        const std::int64_t during = w.boundary > w.transient + w.boundary ? w.boundary : w.transient + w.boundary;
        e.per_rank.push_back(f * w.kept + (during > 0 ? during : 0));
        continue;
      }
      if (!schedule->virtual_stages) {
        // ZB-H1: a bound, the first rank's micro-batches in flight for every rank, each waiting
        // with the larger of what it keeps and what its B left for W (walking its action lists,
        // a search passed clang's step limit for a constant expression)
        const PieceBytes& w = bytes[static_cast<std::size_t>(s)];
        e.per_rank.push_back(activation_peak_of_held(w.kept, w.transient, w.boundary, schedule->in_flight(m, v, p), 1, w.weight));
        continue;
      }
      ChunkBytes held(static_cast<std::size_t>(p * v));
      for (int ch = s; ch < p * v; ch += p) {
        const auto c = static_cast<std::size_t>(ch);
        const PieceBytes& w = bytes[c];
        held.kept[c] = w.kept;
        held.sent[c] = w.boundary;
        held.transient[c] = w.transient + w.boundary;
        held.split_transient[c] = w.split_transient + w.boundary;
        held.weight[c] = w.weight;
      }
      const auto actions = schedule->actions(m, v, s, p);
      e.per_rank.push_back(activation_peak(actions, held));
    }
    peaks_.push_back(std::move(e));
    return peaks_.back().per_rank;
  }
  // The pieces gradient_checkpoint.type = "auto" cuts the chunk of units [first, end) into, as
  // strategy::Chunk::choose_segments does: round(sqrt(n)) segments (2 to n) of balanced cost, each
  // recomputed but the model's last (`last`), a split unit with parameters a piece of its own, not
  // recomputed; a chunk of one unit is one piece, not recomputed. Indices are the chunk's.
  static constexpr std::vector<Piece> auto_pieces(std::size_t first, std::size_t end, bool last) {
    const std::size_t count = end - first;
    if (count < 2) return {Piece{0, count, false}};
    std::size_t k = 1;
    while (4 * k * k + 4 * k + 1 <= 4 * count) ++k;  // the nearest integer to sqrt(count)
    k = k < 2 ? 2 : k > count ? count : k;
    std::array<double, n + 1> costs{};
    std::array<std::size_t, n + 1> cut{};
    for (std::size_t i = 0; i < count; ++i) costs[i] = units[first + i].cost.macs_per_token;
    strategy::detail::balanced_cut(costs.data(), count, k, cut.data());
    const auto recomputable = [&](std::size_t i) { return split_recompute || !(units[first + i].split && units[first + i].cost.parameters > 0); };
    std::vector<Piece> pieces;
    for (std::size_t seg = 0; seg < k; ++seg) {
      if (last && seg + 1 == k) {
        pieces.push_back({cut[seg], cut[seg + 1], false});
        break;
      }
      for (std::size_t i = cut[seg]; i < cut[seg + 1];) {
        std::size_t j = i;
        while (j < cut[seg + 1] && recomputable(j)) ++j;
        if (j == i) ++j;  // a unit it cannot recompute
        pieces.push_back({i, j, recomputable(i)});
        i = j;
      }
    }
    return pieces;
  }

  // The gradient blocks in flight of rank s under a schedule of several chunks a rank, in the
  // order the schedule runs its chunks' backward passes (plan::gradient_blocks_in_flight, as the
  // run-time planner prices every plan): in the arena's order, Interleaved was priced up to 37%
  // under a stranger's measurement. The schedule's actions are a constant expression.
  constexpr std::int64_t chunk_ordered_gradients(const Combination& k, int s, const ZeroBlocks& rank) const {
    const int p = k.pipeline, v = k.virtual_stages;
    std::vector<std::vector<std::int64_t>> chunk_blocks(static_cast<std::size_t>(v));
    for (int j = 0; j < v; ++j) {  // rank s holds chunks s, s + p, ...: local chunk j is s + j p
      ZeroBlocks blocks{.block_elements = rank.block_elements};
      const auto ch = static_cast<std::size_t>(s + j * p);
      add_blocks(blocks, units, cut_[ch], cut_[ch + 1], &chunk_blocks[static_cast<std::size_t>(j)]);
    }
    std::vector<std::size_t> visits;
    for (const auto& a : k.schedule->actions(k.micro_batches, v, s, p))
      if (a.kind == strategy::Action::Kind::kBackward) visits.push_back(static_cast<std::size_t>(a.chunk / p));
    return gradient_blocks_in_flight(chunk_blocks, visits, rank.span + 2, k.data, k.policies.offload) * 4;
  }

  constexpr void sum_cut(int p, int v) {
    const int chunks = p * v;
    auto& cut = cut_;
    if (declared) {  // the declared stages
      std::size_t at = 0;
      for (int s = 0; s < p; ++s) {
        cut[static_cast<std::size_t>(s)] = at;
        while (at < n && units[at].stage == s) ++at;
      }
      cut[static_cast<std::size_t>(p)] = n;
    } else {  // a balanced cut of the units' multiply-adds into p v chunks, the Trainer's (strategy::unit_cost: a
              // layer's static multiply-adds, 0 for one without): with 1 for 0, a stranger's chunks were
              // cut elsewhere than the run's, and GPipe's priced at 0.54 of its peak
      std::array<double, n> costs{};
      for (std::size_t i = 0; i < n; ++i) costs[i] = units[i].cost.macs_per_token;
      strategy::detail::balanced_cut(costs.data(), n, static_cast<std::size_t>(chunks), cut.data());
    }
    rank_ = {};
    peaks_.clear();
    for (int ch = 0; ch < chunks; ++ch) {
      auto& sum = rank_[static_cast<std::size_t>(ch % p)];
      double macs = 0;
      std::int64_t bytes = 0;
      int collectives = 0;
      const std::size_t first = cut[static_cast<std::size_t>(ch)], end = cut[static_cast<std::size_t>(ch + 1)];
      for (std::size_t i = first; i < end; ++i) {
        const auto& u = units[i].cost;
        macs += u.macs_per_token;
        if (units[i].split) {
          bytes += u.tensor_bytes;
          collectives += u.tensor_collectives;
        }
        sum.macs += u.macs_per_token;
        sum.parameters += u.parameters;
        sum.activation_bytes += u.activation_bytes;
        sum.backward_bytes = u.backward_bytes > sum.backward_bytes ? u.backward_bytes : sum.backward_bytes;
        sum.weight_bytes += u.weight_bytes;
        if (units[i].split) {
          sum.tensor_bytes += u.tensor_bytes;
          sum.collectives += u.tensor_collectives;
        }
      }
      sum.chunk_macs = macs > sum.chunk_macs ? macs : sum.chunk_macs;
      // under recompute: the chunk's pieces walked as plan::estimate walks them, and the
      // multiply-adds its recomputed pieces run again
      const bool last = ch + 1 == chunks;
      const auto pieces = auto_pieces(first, end, last);
      const auto c = static_cast<std::size_t>(ch);
      plain_[c] = chunk_bytes(units, first, end);
      if (!split_recompute) {
        recomputed_[c] = chunk_bytes(units, first, end, pieces);
      } else {  // Megatron's: each unit's output kept, one unit's activations again during its backward
        PieceBytes& r = recomputed_[c];
        r = plain_[c];
        r.kept = (first > 0 ? units[first - 1].cost.output_bytes : 0) - r.boundary;
        std::int64_t largest = 0, backward = 0;
        for (std::size_t i = first; i < end; ++i) {
          r.kept += units[i].cost.output_bytes;
          largest = units[i].cost.activation_bytes > largest ? units[i].cost.activation_bytes : largest;
          backward = units[i].cost.backward_bytes > backward ? units[i].cost.backward_bytes : backward;
        }
        r.transient = r.split_transient = largest + backward;
      }
      double again = 3 * macs;
      for (const auto& piece : pieces)
        for (std::size_t i = piece.begin; piece.recomputed && i < piece.end; ++i) again += units[first + i].cost.macs_per_token;
      sum.chunk_recompute_macs = again > sum.chunk_recompute_macs ? again : sum.chunk_recompute_macs;
      sum.chunk_tensor_bytes = bytes > sum.chunk_tensor_bytes ? bytes : sum.chunk_tensor_bytes;
      sum.chunk_collectives = collectives > sum.chunk_collectives ? collectives : sum.chunk_collectives;
      sum.chunk_units = end - first > sum.chunk_units ? end - first : sum.chunk_units;
      // what a chunk sends on: its last unit's output (the model's own output goes to the loss, not a link)
      const std::int64_t sent = units[end - 1].cost.output_bytes;
      if (!last) sum.output_bytes = sent > sum.output_bytes ? sent : sum.output_bytes;
      sum.ends.add(units, first, end);
    }
    for (int s = 0; s < p; ++s) {  // what the state bytes multiply stays within 64 bits
      auto& sum = rank_[static_cast<std::size_t>(s)];
      check_countable(static_cast<double>(sum.parameters) * 4.0 * (2 + budget_.optimizer_slots));
      // ZeRO's blocks: the rank's chunks in backward order (its last first), each closing a block
      sum.blocks = zero_blocks_of(sum.parameters, buckets_);
      for (int ch = chunks - 1 - (chunks - 1 - s) % p; ch >= 0; ch -= p)
        add_blocks(sum.blocks, units, cut[static_cast<std::size_t>(ch)], cut[static_cast<std::size_t>(ch + 1)]);
    }
    cut_p_ = p;
    cut_v_ = v;
  }

  Cluster cluster_;
  Budget budget_;
  int buckets_ = 1;
  std::array<std::size_t, n + 1> cut_{};
  std::array<StageSums, n> rank_{};
  std::array<PieceBytes, n> plain_{}, recomputed_{};  // what each chunk holds a micro-batch, per row, without and with recompute
  struct PeakEntry {
    int micro_batches = 0;
    const strategy::ScheduleEntry* schedule = nullptr;
    bool recompute = false;
    std::vector<std::int64_t> per_rank;
  };
  std::vector<PeakEntry> peaks_;  // peak_per_row's, for the current cut
  int cut_p_ = 0, cut_v_ = 0;
};

// What static_search and static_price check before pricing anything.
template <class Model>
constexpr void check_static(const Cluster& cluster, const Budget& budget, const StaticSearchOptions& o, const char* who) {
  constexpr int t = tensor_degree_v<Model>, declared = StaticPricer<Model>::declared;
  static_assert(StaticPricer<Model>::n > 0, "epl: plan::static_search: the model has no units");
  check_cluster(cluster, who);
  check_budget(budget, who);
  for (int m : o.micro_batches)
    if (m < 0 || m > kMostMicroBatches)
      budget_is_not_valid(who, "StaticSearchOptions::micro_batches must hold counts from 1 to 65536 (0: an unused entry)");
  for (int rows : o.micro_batch_rows)
    if (rows < 0) budget_is_not_valid(who, "StaticSearchOptions::micro_batch_rows must hold row counts of 1 or more (0: an unused entry)");
  if (o.buckets < 1 || o.buckets > policy::home::Communication::kMostSplits)
    budget_is_not_valid(who, "StaticSearchOptions::buckets (communication.max_splits) must be from 1 to 2^20");
  check_countable(static_cast<double>(budget.tokens_per_row) * static_cast<double>(budget.rows) * 4.0);
  if (cluster.ranks % (t * (declared ? declared : 1)) != 0)
    world_size_does_not_hold_a_replica__use_a_multiple(who, cluster.ranks, t * (declared ? declared : 1));
  for (const auto& u : StaticPricer<Model>::units) check_cost(u.cost);  // the sums stay within 64 bits
}
}  // namespace detail

namespace detail {
template <class Model, class Policy, std::size_t K>
constexpr StaticSearch<K> search_costed(const Cluster& cluster, const Budget& budget, const StaticSearchOptions& o) {
  constexpr policy::Compiled c = policy::compiled<Policy>(false);
  using Pricer = detail::StaticPricer<Model>;
  detail::check_static<Model>(cluster, budget, o, "plan::static_search");
  const std::int64_t limit = detail::limit_of(cluster, budget);
  StaticSearch<K> r;
  Budget kept = budget;
  kept.optimizer_slots = slots_of<Policy>(budget);  // the policies' state (an EMA's copy), sharded as the optimizer's
  Pricer pricer(cluster, kept, o.buckets);
  policy::Choice most = policy::reach(c);
  most.recompute = o.recompute;
  most.amp = false;  // the compile-time model prices f32 GEMMs only
  r.tried = for_each_combination(
      {.ranks = cluster.ranks, .tensor = tensor_degree_v<Model>, .stages = Pricer::declared, .units = Pricer::n, .rows = budget.rows,
       .micro_batches = o.micro_batches.data(), .micro_batch_counts = o.micro_batches.size(), .micro_batch_rows = o.micro_batch_rows.data(),
       .micro_batch_row_counts = o.micro_batch_rows.size(), .pipelines = o.pipelines, .policies = most},
      [&](const Combination& k) {
        const StaticPlan plan = pricer.price(k);
        if (plan.refused) {
          ++r.refused;
        } else if (plan.bytes.total() <= limit) {
          ++r.fit;
          r.offer(plan);
        } else {
          if (r.too_big == 0 || plan.bytes.total() < r.smallest_over.bytes.total()) r.smallest_over = plan;
          ++r.too_big;
        }
      });
  if (r.tried == 0) detail::nothing_to_try__check_the_batch_and_micro_batches(cluster.ranks, budget.rows);
  if (r.count == 0) {
    if (std::is_constant_evaluated())  // the diagnostic names the reason and prints the smallest's bytes
      (void)detail::does_not_fit__the_index_is_the_bytes_a_rank_needs(detail::misfit::no_combination_fits__add_ranks_or_memory,
                                                                       r.smallest_over.bytes.total(), limit);
    detail::no_combination_fits__add_ranks_or_memory(r.smallest_over.bytes.total(), limit, r.tried);
  }
  return r;
}
}  // namespace detail

/// \brief The K fastest combinations of Model with Policy's compiled policies that fit `budget` on
/// `cluster`, priced from the layers' static costs; usable in a constant expression.
template <class Model, class Policy = Policies<>, std::size_t K = 8>
constexpr StaticSearch<K> static_search(const Cluster& cluster, const Budget& budget, const StaticSearchOptions& o = {}) {
  static_assert(K > 0, "epl: plan::static_search<Model, Policy, K>: K, the plans kept, must be at least 1");
  if constexpr (!detail::statically_costed<Model>()) {
    detail::name_the_uncosted_layer<Model>();  // one error, naming the layer
    return StaticSearch<K>{};
  } else {
    return detail::search_costed<Model, Policy, K>(cluster, budget, o);
  }
}

/// \brief One combination of Model priced as static_search prices it, fitting the budget or not
/// (its bytes say): a published layout, or the plan a configuration names, against the search's
/// best. The combination must be one the search would try; usable in a constant expression.
/// Policy's compiled policies add their state as static_search's do (epl::Ema's copy).
template <class Model, class Policy = Policies<>>
constexpr StaticPlan static_price(const Cluster& cluster, const Budget& budget, const Combination& c, int buckets = 5) {
  constexpr const char* who = "plan::static_price";
  detail::check_static<Model>(cluster, budget, {.buckets = buckets}, who);
  constexpr int t = tensor_degree_v<Model>;
  using Pricer = detail::StaticPricer<Model>;
  // each way a combination can be one the search never tries, said on its own
  auto refuse = [&](const char* what) { detail::budget_is_not_valid(who, what); };
  if (c.data < 1 || c.pipeline < 1 || c.micro_batches < 1 || c.micro_batches > detail::kMostMicroBatches)
    refuse("the combination's data-parallel degree, pipeline stages and micro-batches must be at least 1 (micro-batches at most 65536)");
  if (static_cast<std::int64_t>(c.data) * c.pipeline * t != cluster.ranks)
    detail::combination_is_not_the_cluster_s_ranks(who, c.data, c.pipeline, t, cluster.ranks);
  if (Pricer::declared && c.pipeline != Pricer::declared) refuse("the model declares its pipeline stages (epl::Pipeline): give that many");
  if (budget.rows % (static_cast<std::int64_t>(c.data) * c.micro_batches) != 0)
    detail::batch_does_not_divide__use_a_multiple_of_replicas_times_micro_batches(who, budget.rows, c.data, c.micro_batches,
                                                                                  "the combination's micro_batches");
  if (!strategy::is_schedule(c.schedule))
    refuse("the combination has no schedule: give &strategy::kDefaultSchedule or one of strategy::kSchedules");
  if (c.pipeline == 1 && c.schedule != &strategy::kDefaultSchedule)
    refuse("one pipeline stage runs no schedule: give &strategy::kDefaultSchedule");
  if (c.virtual_stages != (c.pipeline > 1 && c.schedule->virtual_stages ? 2 : 1))
    refuse("virtual_stages must be 2 for a schedule of virtual stages (Interleaved) on more than one stage, else 1");
  if (c.virtual_stages > 1 && (Pricer::declared || c.micro_batches % c.pipeline != 0))
    refuse("Interleaved needs an undeclared pipeline and micro-batches a multiple of the pipeline stages");
  if (static_cast<std::size_t>(c.pipeline * c.virtual_stages) > Pricer::n)
    detail::model_has_fewer_units_than_chunks(who, static_cast<std::int64_t>(Pricer::n), c.pipeline, c.virtual_stages);
  if (const auto r = policy::refusal(c.policies, {.data = c.data, .pipeline = c.pipeline, .splits_backward = c.schedule->splits_backward})) {
    if (std::is_constant_evaluated()) r.fail(r.why);  // the diagnostic names the reason's function
    refuse(r.why);
  }
  if (c.policies.amp)
    refuse("the compile-time model prices f32 GEMMs only: give policies.amp = false (state the bf16 rate in Cluster::macs_per_second)");
  Budget kept = budget;
  kept.optimizer_slots = detail::slots_of<Policy>(budget);  // with the policies' state, as static_search's
  Pricer pricer(cluster, kept, buckets);
  const StaticPlan plan = pricer.price(c);
  if (plan.refused)  // as the Trainer refuses gradient_checkpoint.type = "auto" there, and the search never keeps it
    refuse("policies.recompute needs a chunk of two units or more on every rank (a chunk of one unit has nothing to cut): give "
           "policies.recompute = false, or fewer pipeline stages");
  return plan;
}

/// \brief The cluster whose GEMM rate (Cluster::macs_per_second, the one efficiency figure the
/// compile-time model has) makes combination c of Model take `measured` seconds a step, its links
/// as given: what a published run says of the machine, to predict others on it. An error when no
/// rate from 1e3 to 1e18 does (the links alone take longer than the measured step).
template <class Model>
constexpr Cluster static_calibrate(Cluster cluster, const Budget& budget, const Combination& c, double measured, int buckets = 5) {
  if (!(measured > 0 && measured < 1e9))
    detail::budget_is_not_valid("plan::static_calibrate", "the measured step must be a positive time below 1e9 seconds");
  auto at = [&](double rate) {
    cluster.macs_per_second = rate;
    return static_price<Model>(cluster, budget, c, buckets).seconds;
  };
  // the step falls as the rate grows: bisect (about 60 halvings to 1e-12 of the answer)
  double lo = 1e3, hi = 1e18;
  if (at(hi) > measured || at(lo) < measured)
    detail::budget_is_not_valid("plan::static_calibrate", "no GEMM rate from 1e3 to 1e18 multiply-adds a second gives the measured step: "
                                "the links alone take longer, or the model's costs are not the run's");
  for (int i = 0; i < 200 && hi - lo > 1e-12 * lo; ++i) {
    const double mid = (lo + hi) / 2;
    (at(mid) > measured ? lo : hi) = mid;
  }
  cluster.macs_per_second = (lo + hi) / 2;
  return cluster;
}

/// \brief A profile of `model` from its layers' static costs, priced as static_search prices them:
/// each unit's forward at the cluster's GEMM rate (Cluster::macs_per_second) for `tokens_per_row`
/// tokens a row, its backward twice that, its bytes as its type states them. plan::estimate and
/// plan::search price a model from it as static_search does (one formula, plan::price): a model too
/// large to probe here, or a check that the two searches agree.
template <class Model, class D = device::Cpu>
Profile static_profile(const Model& model, const Cluster& cluster, std::int64_t tokens_per_row) {
  constexpr auto costs = detail::static_units<Model>();
  detail::check_cluster(cluster, "plan::static_profile");
  EPL_CHECK(tokens_per_row >= 1, "plan::static_profile: ", tokens_per_row, " tokens a row; give 1 or more");
  Model copy = model;
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policies<>, D>>;  // search's: no other instantiation
  std::vector<strategy::Unit<Pass>> units;
  strategy::flatten<Pass>(copy, units);
  EPL_CHECK(units.size() == costs.size(), "plan::static_profile: the model ", reflect::type_name<Model>(), " runs as ", units.size(),
            " units but its static costs describe ", costs.size(), " (a Split's entry or exit runs as a unit of its own); profile "
            "it with plan::profile");
  Profile p;
  p.rows = 1;
  p.tokens_per_row = tokens_per_row;
  p.tensor = tensor_degree_v<Model>;
  p.units.resize(units.size() + 1);
  const double tokens = static_cast<double>(tokens_per_row);
  for (std::size_t i = 0; i < units.size(); ++i) {
    const auto& c = costs[i].cost;  // this rank's part of a split unit
    auto& u = p.units[i];
    u.name = units[i].name;
    u.parameters = c.parameters * (costs[i].split ? p.tensor : 1);
    u.macs_per_token = c.macs_per_token * (costs[i].split ? p.tensor : 1);
    u.activation_bytes = c.activation_bytes;
    u.output_bytes = c.output_bytes;
    u.backward_bytes = c.backward_bytes;
    u.weight_bytes = c.weight_bytes;
    u.split_backward_bytes = c.backward_bytes;  // B allocates its input's gradient, as a whole backward
    u.forward_seconds = c.macs_per_token * tokens / cluster.macs_per_second;
    u.backward_seconds = 2 * u.forward_seconds;
  }
  p.units.back().name = "loss";  // its backward allocates the gradient of the model's output, as a cross-entropy's does
  p.units.back().backward_bytes = p.units.back().split_backward_bytes = costs.empty() ? 0 : costs.back().cost.output_bytes;
  return p;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
