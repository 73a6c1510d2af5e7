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
/// search each type and merge() them to compare degrees. When nothing fits, a compile error stops
/// at a call named for it (`no_combination_fits__add_ranks_or_memory`); at run time the same call
/// throws an epl::Error saying by how much the smallest is over. The run-time search
/// (plan::search) does the same from a measured profile, more exactly.
#include <array>
#include <iterator>
#include <cstdint>
#include <limits>

#include "epl/plan/fits.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief One combination as the compile-time search prices it (per step, its busiest rank).
struct StaticPlan {
  int data = 1, tensor = 1, pipeline = 1, micro_batches = 1;
  int schedule = 0;        ///< index into strategy::kSchedules (pipeline > 1)
  int virtual_stages = 1;  ///< chunks per rank (Interleaved: 2)
  int zero = 0;
  bool offload = false, recompute = false;
  StaticFootprint bytes = {};  ///< state and peak activations
  double compute_seconds = 0, tensor_seconds = 0, pipeline_seconds = 0, data_seconds = 0, host_seconds = 0;
  double bubble = 0;
  double seconds = 0;      ///< the step
  [[nodiscard]] constexpr std::string_view schedule_name() const { return strategy::kSchedules[schedule].name; }
  /// \brief The same combination as the run-time search's candidate (its keys, its name).
  [[nodiscard]] Candidate candidate() const {
    return {.data = data, .pipeline = pipeline, .micro_batches = micro_batches, .tensor = tensor, .schedule = std::string(schedule_name()),
            .virtual_stages = pipeline > 1 && strategy::kSchedules[schedule].virtual_stages ? virtual_stages : 2, .zero = zero,
            .recompute = recompute, .offload = offload, .amp = false};
  }
};

/// \brief What static_search found: the K fastest fitting plans, fastest first.
template <std::size_t K>
struct StaticSearch {
  std::array<StaticPlan, K> plans{};
  int count = 0;                  ///< plans held (at most K)
  int tried = 0, fit = 0, too_big = 0;
  StaticPlan smallest_over{};     ///< the smallest of those over the budget
  [[nodiscard]] constexpr const StaticPlan& best() const { return plans[0]; }
  /// \brief Keeps p when it is among the K fastest.
  constexpr void offer(const StaticPlan& p) {
    int at = count < static_cast<int>(K) ? count : static_cast<int>(K) - 1;
    if (count == static_cast<int>(K) && !(p.seconds < plans[K - 1].seconds)) return;
    while (at > 0 && p.seconds < plans[static_cast<std::size_t>(at - 1)].seconds) {
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
  if (b.too_big > 0 && (a.too_big == 0 || b.smallest_over.bytes.total() < a.smallest_over.bytes.total())) m.smallest_over = b.smallest_over;
  return m;
}

/// \brief What the search tries besides the mesh and the policies.
struct StaticSearchOptions {
  std::array<int, 5> micro_batches{1, 2, 4, 8, 16};  ///< counts to try (0: an unused entry)
  bool pipelines = true;  ///< cut an unannotated model into stages, as auto.auto_parallel does
  bool recompute = true;  ///< try gradient_checkpoint.type = "auto"
};

namespace detail {
// One sequential unit of a model type, from its static cost: its part on one rank of a split.
struct StaticUnit {
  strategy::Cost cost;  // macs and parameters already divided by the split degree
  int stage = -1;       // the declared Pipeline stage, or -1
  bool split = false;   // inside an epl::Split: its tensor traffic is real
};
template <class M>
constexpr std::size_t static_count();
template <class... C>
constexpr std::size_t static_count_of(nn::type_list<C...>) {
  return (static_count<C>() + ... + 0);
}
template <class M>
constexpr std::size_t static_count() {
  using N = nn::node_traits<M>;
  if constexpr (nn::is_structural_v<M>) {
    return 0;  // a Split's entry or exit: no work of its own (unless colocated or sequence-parallel)
  } else if constexpr (strategy::has_static_cost<M>) {
    return 1;
  } else if constexpr (N::kind == nn::NodeKind::kSequence || N::kind == nn::NodeKind::kPipeline || N::kind == nn::NodeKind::kSplit ||
                       N::kind == nn::NodeKind::kReplicate) {
    return static_count_of(typename N::children{});
  } else {
    static_assert(strategy::has_static_cost<M>, "epl: plan::static_search needs every layer's costs in its type (or a fixed "
                                                "sequence of such layers): specialise epl::strategy::static_cost<Layer> with a "
                                                "strategy::Cost (the layer is M here)");
    return 0;
  }
}
template <class M, std::size_t N>
constexpr void static_collect(std::array<StaticUnit, N>& out, std::size_t& at, int stage, int tensor);
template <std::size_t N, class... C>
constexpr void static_collect_of(nn::type_list<C...>, std::array<StaticUnit, N>& out, std::size_t& at, int stage, int tensor,
                                 bool stages) {
  int s = 0;
  ((static_collect<C>(out, at, stages ? s++ : stage, tensor)), ...);
}
template <class M, std::size_t N>
constexpr void static_collect(std::array<StaticUnit, N>& out, std::size_t& at, int stage, int tensor) {
  using T = nn::node_traits<M>;
  if constexpr (nn::is_structural_v<M>) {
    return;
  } else if constexpr (strategy::has_static_cost<M>) {
    StaticUnit u{strategy::static_cost_of<M>(), stage, tensor > 1};
    u.cost.macs_per_token /= tensor;
    u.cost.parameters /= tensor;
    out[at++] = u;
  } else if constexpr (T::kind == nn::NodeKind::kSplit) {
    static_collect_of(typename T::children{}, out, at, stage, tensor_degree_v<M>, false);
  } else {
    static_collect_of(typename T::children{}, out, at, stage, tensor, T::kind == nn::NodeKind::kPipeline);
  }
}
template <class Model>
constexpr auto static_units() {
  std::array<StaticUnit, static_count<Model>()> units{};
  std::size_t at = 0;
  static_collect<Model>(units, at, -1, 1);
  return units;
}

// What one stage of a cut adds up to.
struct StageSums {
  double macs = 0;  // per token, this rank's part
  std::int64_t parameters = 0, activation_bytes = 0, kept_recomputed = 0, largest = 0, output_bytes = 0, tensor_bytes = 0;
  int collectives = 0;
};

// Micro-batches' activations the busiest rank (the first) keeps in flight, in stage-activations.
constexpr double in_flight(int schedule, int m, int p, int v) {
  if (p == 1) return 1;
  if (schedule == 1) return m;                  // GPipe: every forward before any backward
  if (v == 1) return m < p ? m : p;             // 1F1B: the warm-up's
  const int chunks = 2 * (p - 1) + (v - 1) * p + 1;  // Interleaved's warm-up, in chunk-micro-batches
  return static_cast<double>(chunks < m * v ? chunks : m * v) / v;
}

[[noreturn]] inline void nothing_to_try__check_the_batch_and_micro_batches(int ranks, std::int64_t rows) {
  EPL_FAIL("plan::static_search: no combination to try on ", ranks, " ranks: a global batch of ", rows, " rows divides into none of "
           "the data-parallel degrees x micro-batch counts (StaticSearchOptions::micro_batches; 0 entries are unused), or the model "
           "has fewer units than the stages; use a batch that is a multiple of the ranks");
}
[[noreturn]] inline void no_combination_fits__add_ranks_or_memory(std::int64_t need, std::int64_t budget, int tried) {
  EPL_FAIL("plan::static_search: no combination of the ", tried, " tried fits ", budget, " bytes per rank; the smallest needs ", need,
           " bytes, ", need - budget, " more: add ranks or memory, or policies that shrink it (epl::Zero<3>, epl::Offload)");
}
}  // namespace detail

/// \brief The K fastest combinations of Model with Policy's compiled policies that fit `budget` on
/// `cluster`, priced from the layers' static costs; usable in a constant expression.
template <class Model, class Policy = Policies<>, std::size_t K = 8>
constexpr StaticSearch<K> static_search(const Cluster& cluster, const Budget& budget, const StaticSearchOptions& o = {}) {
  constexpr int t = tensor_degree_v<Model>;
  constexpr auto units = detail::static_units<Model>();
  constexpr std::size_t n = units.size();
  constexpr policy::Compiled c = policy::compiled<Policy>(false);
  static_assert(n > 0, "epl: plan::static_search: the model has no units");
  static_assert(K > 0, "epl: plan::static_search<Model, Policy, K>: K, the plans kept, must be at least 1");
  constexpr int declared = [] {
    if constexpr (is_pipeline_v<Model>) return Model::kStages;
    else return 0;
  }();
  constexpr const char* who = "plan::static_search";
  detail::check_cluster(cluster, who);
  detail::check_budget(budget, who);
  for (int m : o.micro_batches)
    if (m < 0 || m > detail::kMostMicroBatches)
      detail::budget_is_not_valid(who, "StaticSearchOptions::micro_batches must hold counts from 1 to 65536 (0: an unused entry)");
  detail::check_countable(static_cast<double>(budget.tokens_per_row) * static_cast<double>(budget.rows) * 4.0);
  if (cluster.ranks % (t * (declared ? declared : 1)) != 0)
    detail::world_size_does_not_hold_a_replica__use_a_multiple(who, cluster.ranks, t * (declared ? declared : 1));
  for (const auto& u : units) detail::check_cost(u.cost);  // the sums below stay within 64 bits
  const std::int64_t limit = detail::limit_of(cluster, budget);
  StaticSearch<K> r;
    for (int p = 1; p <= cluster.ranks / t; ++p) {
    if ((cluster.ranks / t) % p != 0) continue;
    if (declared ? p != declared : (p > 1 && !o.pipelines)) continue;
    const int data = cluster.ranks / t / p;
    for (std::size_t mi = 0; mi < o.micro_batches.size(); ++mi) {
      const int m = o.micro_batches[mi];
      bool seen = false;  // a count listed twice is tried once
      for (std::size_t j = 0; j < mi; ++j) seen = seen || o.micro_batches[j] == m;
      if (m < 1 || seen || budget.rows % (static_cast<std::int64_t>(data) * m) != 0) continue;
      const std::int64_t micro_rows = budget.rows / data / m;
      for (int sched = 0; sched < static_cast<int>(std::size(strategy::kSchedules)); ++sched) {
        if (p == 1 && sched > 0) continue;  // one stage: no schedule
        const int v = p > 1 && strategy::kSchedules[sched].virtual_stages ? 2 : 1;
        if (v > 1 && (declared || m % p != 0)) continue;  // Interleaved: a cut of its own, micro-batches a multiple of p
        const int chunks = p * v;
        if (static_cast<std::size_t>(chunks) > n) continue;
        // the cut: the declared stages, or a balanced cut of the units' multiply-adds into p v chunks
        std::array<std::size_t, n + 1> cut{};
        if (declared) {
          std::size_t at = 0;
          for (int s = 0; s < p; ++s) {
            cut[static_cast<std::size_t>(s)] = at;
            while (at < n && units[at].stage == s) ++at;
          }
          cut[static_cast<std::size_t>(p)] = n;
        } else {
          std::array<double, n> costs{};
          for (std::size_t i = 0; i < n; ++i) costs[i] = units[i].cost.macs_per_token > 0 ? units[i].cost.macs_per_token : 1.0;
          strategy::detail::balanced_cut(costs.data(), n, static_cast<std::size_t>(chunks), cut.data());
        }
        // each rank's sums: its v chunks (rank s holds chunks s, s + p, ...)
        std::array<detail::StageSums, n> rank{};
        for (int ch = 0; ch < chunks; ++ch) {
          auto& sum = rank[static_cast<std::size_t>(ch % p)];
          for (std::size_t i = cut[static_cast<std::size_t>(ch)]; i < cut[static_cast<std::size_t>(ch + 1)]; ++i) {
            const auto& u = units[i].cost;
            sum.macs += u.macs_per_token;
            sum.parameters += u.parameters;
            sum.activation_bytes += u.activation_bytes;
            sum.kept_recomputed += u.output_bytes;  // a recomputed unit keeps its boundary
            sum.largest = u.activation_bytes > sum.largest ? u.activation_bytes : sum.largest;
            if (units[i].split) {
              sum.tensor_bytes += u.tensor_bytes;
              sum.collectives += u.tensor_collectives;
            }
          }
          // what a chunk sends on: its last unit's output (the model's own output goes to the loss, not a link)
          const auto& last = units[cut[static_cast<std::size_t>(ch + 1)] - 1].cost;
          if (ch + 1 < chunks) sum.output_bytes = last.output_bytes > sum.output_bytes ? last.output_bytes : sum.output_bytes;
        }
        for (int s = 0; s < p; ++s) {  // what the bytes below multiply stays within 64 bits
          const auto& sum = rank[static_cast<std::size_t>(s)];
          detail::check_countable(static_cast<double>(sum.parameters) * 4.0 * (2 + budget.optimizer_slots));
          detail::check_countable(static_cast<double>(sum.activation_bytes + sum.kept_recomputed) * static_cast<double>(budget.rows) *
                                  static_cast<double>(m));
        }
        for (int zero = 0; zero <= c.zero; ++zero) {
          if (zero > 0 && data == 1) continue;  // nothing to shard over
          if (zero >= 2 && p > 1 && strategy::kSchedules[sched].splits_backward) continue;  // as plan::make refuses
          for (int off = 0; off <= (c.offload && zero == 3 ? 1 : 0); ++off)
            for (int rc = 0; rc <= (o.recompute ? 1 : 0); ++rc) {
              ++r.tried;
              StaticPlan plan{.data = data, .tensor = t, .pipeline = p, .micro_batches = m, .schedule = sched, .virtual_stages = v,
                              .zero = zero, .offload = off == 1, .recompute = rc == 1};
              const double flight = detail::in_flight(sched, m, p, v);
              double chunk = 0, talk = 0, grads = 0;
              std::int64_t sends = 0;
              for (int s = 0; s < p; ++s) {
                const auto& sum = rank[static_cast<std::size_t>(s)];
                StaticFootprint f;
                f.state = state_bytes(sum.parameters, data, zero, off == 1, budget.optimizer_slots);
                const std::int64_t per_row = rc ? sum.kept_recomputed + sum.largest : sum.activation_bytes;
                f.activations = static_cast<std::int64_t>(static_cast<double>(per_row * micro_rows) * flight);
                if (f.total() > plan.bytes.total()) plan.bytes = f;
                // one micro-batch of a chunk: forward, backward twice its work, a recompute's forward again
                const double tokens = static_cast<double>(budget.tokens_per_row * micro_rows);
                const double work = sum.macs / v * tokens * (rc ? 4.0 : 3.0) / cluster.macs_per_second;
                const double all_reduces =
                    cluster.tensor.all_reduces(t, sum.collectives, static_cast<double>(sum.tensor_bytes * micro_rows) / v);
                if (work + all_reduces > chunk) chunk = work + all_reduces;
                if (all_reduces > talk) talk = all_reduces;
                grads = static_cast<double>(f.state.gradients + f.state.host_gradients) > grads
                            ? static_cast<double>(f.state.gradients + f.state.host_gradients) : grads;
                sends = sum.output_bytes > sends ? sum.output_bytes : sends;
              }
              const double passes = p == 1 ? m : strategy::kSchedules[sched].path(m, v, p);
              plan.bubble = p == 1 ? 0.0 : 1.0 - v * m / passes;
              plan.compute_seconds = chunk * passes;
              plan.tensor_seconds = talk * v * m;
              if (p > 1) plan.pipeline_seconds = 2.0 * passes * cluster.pipeline.seconds(static_cast<double>(sends * micro_rows));
              if (data > 1) {  // ring passes over the gradients, as estimate counts them (ZeRO 2 and 3: each micro-batch)
                const double held = zero >= 2 ? grads * data : grads;
                const int rings = detail::zero_ring_passes(zero, m);
                const double moved = static_cast<double>(data - 1) / data * held * rings;
                plan.data_seconds = cluster.data.alpha * (data - 1) * rings + moved / cluster.data.beta;
              }
              // the reduction overlaps backward (taken as 60% of the compute, as estimate does) but for what is left
              const double hidden = 0.6 * plan.compute_seconds;
              // offload moves the rank's shards of the parameters and gradients between host and device
              if (off == 1)
                plan.host_seconds = cluster.host.seconds(static_cast<double>(plan.bytes.state.host_parameters + plan.bytes.state.host_gradients));
              plan.seconds = plan.compute_seconds + plan.pipeline_seconds + (plan.data_seconds > hidden ? plan.data_seconds - hidden : 0.0) +
                             plan.host_seconds;
              if (plan.bytes.total() <= limit) {
                ++r.fit;
                r.offer(plan);
              } else {
                if (r.too_big == 0 || plan.bytes.total() < r.smallest_over.bytes.total()) r.smallest_over = plan;
                ++r.too_big;
              }
            }
        }
      }
    }
  }
  if (r.tried == 0) detail::nothing_to_try__check_the_batch_and_micro_batches(cluster.ranks, budget.rows);
  if (r.count == 0) detail::no_combination_fits__add_ranks_or_memory(r.smallest_over.bytes.total(), limit, r.tried);
  return r;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
