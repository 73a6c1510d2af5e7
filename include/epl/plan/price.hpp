#pragma once
/// \file
/// \brief What the run-time search (plan::search, from a measured profile) and the compile-time
/// one (plan::static_search, from the layers' static costs) share: the loop over the combinations
/// they try (for_each_combination) and the formula that prices a step from what one micro-batch
/// costs the busiest rank (price). Each search sums its own units into a StepCost; everything from
/// there to the step time is this file's, so the two cannot drift apart.
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <type_traits>

#include "epl/core/error.hpp"

#include "epl/plan/candidate.hpp"
#include "epl/plan/cluster.hpp"
#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief What the searches vary, and what bounds it.
struct Axes {
  int ranks = 1;
  int tensor = 1;                ///< the model type's epl::Split degree
  int stages = 0;                ///< the model's declared epl::Pipeline stages (0: none declared: any divisor, cut evenly)
  std::size_t units = 0;         ///< the model's sequential units: a cut into more chunks is not tried (0: not known)
  std::int64_t rows = 1;         ///< the global batch
  /// A micro-batch's rows must be a multiple of this (Profile::row_multiple: a split MoE's tokens
  /// divide among its ranks); 1: any.
  std::int64_t row_multiple = 1;
  const int* micro_batches = nullptr;  ///< counts to try (entries below 1 unused; one listed twice tried once)
  std::size_t micro_batch_counts = 0;
  /// Rows a micro-batch to try besides (entries below 1 unused): a replica's rows over each is a
  /// count too, when it divides them (a large batch's many micro-batches of 1 or 2 rows).
  const int* micro_batch_rows = nullptr;
  std::size_t micro_batch_row_counts = 0;
  bool pipelines = true;         ///< cut an undeclared model into stages
  /// The most each policy axis goes to (policy::reach of what the program compiled, less what the
  /// search turns off): none by default.
  policy::Choice policies = {};
};

/// \brief Calls fn(Combination) for each combination the axes allow, and returns how many: every
/// pipeline depth p dividing the ranks over the split degree (the declared one only), each
/// micro-batch count that divides the batch over the replicas into rows a multiple of
/// a.row_multiple, each schedule of kSchedules (the default alone on one stage; one of virtual
/// stages with 2 chunks a rank, on an undeclared model whose micro-batches are a multiple of p),
/// and each choice of the policy axes up to a.policies that no axis refuses on that layout
/// (policy::for_each_choice: ZeRO stages only with replicas, stage 2 and up not with a schedule
/// that splits backward, as plan::make refuses; offload with stage 3; recompute; AMP). Usable in a
/// constant expression.
namespace detail {
[[noreturn]] inline void axes_are_not_valid(const char* what) { EPL_FAIL("plan::for_each_combination: ", what); }
[[noreturn]] inline void step_is_not_valid(const char* what) { EPL_FAIL("plan::price: ", what); }
}  // namespace detail

template <class F>
constexpr int for_each_combination(const Axes& a, F&& fn) {
  if (a.ranks < 1 || a.ranks > detail::kMostRanks || a.tensor < 1 || a.ranks % a.tensor != 0)
    detail::axes_are_not_valid("the ranks must be 1 to 65536 and a multiple of the split degree (tensor, 1 or more)");
  if (a.stages < 0 || a.rows < 1 || a.row_multiple < 1 || a.policies.zero < 0 || a.policies.zero > 3)
    detail::axes_are_not_valid(
        "the declared stages must be 0 (none) or more, the rows 1 or more, the row multiple 1 or more, the ZeRO stage 0 to 3");
  // (at compile time a null list cannot be read anyway, and g++ 12 will not compare a member
  // array's address with null in a constant expression)
  if (!std::is_constant_evaluated() &&
      ((a.micro_batch_counts > 0 && a.micro_batches == nullptr) || (a.micro_batch_row_counts > 0 && a.micro_batch_rows == nullptr)))
    detail::axes_are_not_valid("a list of micro-batch counts or rows has a length but no entries (a null pointer)");
  int count = 0;
  const int lanes = a.tensor > 0 ? a.ranks / a.tensor : 0;
  for (int p = 1; p <= lanes; ++p) {
    if (lanes % p != 0) continue;
    if (a.stages > 0 ? p != a.stages : (p > 1 && !a.pipelines)) continue;
    const int data = lanes / p;
    // the counts listed, then those the rows a micro-batch give; each once
    auto count_at = [&](std::size_t i) -> std::int64_t {
      if (i < a.micro_batch_counts) return a.micro_batches[i];
      const std::int64_t size = a.micro_batch_rows[i - a.micro_batch_counts];
      return size >= 1 && a.rows % (size * data) == 0 ? a.rows / (size * data) : 0;
    };
    for (std::size_t mi = 0; mi < a.micro_batch_counts + a.micro_batch_row_counts; ++mi) {
      const std::int64_t wide = count_at(mi);
      if (wide < 1 || wide > detail::kMostMicroBatches) continue;
      const int m = static_cast<int>(wide);
      bool seen = false;
      for (std::size_t j = 0; j < mi; ++j) seen = seen || count_at(j) == m;
      const std::int64_t pieces = static_cast<std::int64_t>(data) * m;  // the micro-batches of all replicas
      if (seen || a.rows % pieces != 0 || a.rows / pieces % a.row_multiple != 0) continue;
      for (const auto& s : strategy::kSchedules) {
        if (p == 1 && &s != &strategy::kDefaultSchedule) continue;
        const int v = p > 1 && s.virtual_stages ? 2 : 1;
        if (v > 1 && (a.stages > 0 || m % p != 0)) continue;
        if (a.units > 0 && static_cast<std::size_t>(p * v) > a.units) continue;
        policy::for_each_choice(a.policies, {.data = data, .pipeline = p, .splits_backward = p > 1 && s.splits_backward},
                                [&](const policy::Choice& c) {
                                  ++count;
                                  fn(Combination{.data = data, .pipeline = p, .micro_batches = m, .schedule = &s, .virtual_stages = v,
                                                 .policies = c});
                                });
      }
    }
  }
  return count;
}

/// \brief What one micro-batch costs the busiest rank, as a search sums it from its units.
struct StepCost {
  double chunk_seconds = 0;   ///< the slowest chunk's forward, backward and recompute of one micro-batch, at the rank's speed
  double chunk_talk = 0;      ///< that chunk's split-group all-reduces of one micro-batch (on the path; links do not scale with speed)
  double rank_talk = 0;       ///< the busiest rank's split-group all-reduces of one micro-batch, all its chunks
  double shared_work = 0;     ///< every rank's compute seconds a step over the cores they share (0: each rank its own)
  double send_bytes = 0;      ///< what a stage sends on for one micro-batch, one way
  double gradient_bytes = 0;  ///< the gradients a rank holds between steps (its shard under ZeRO 2 and 3), device and host
  double host_bytes = 0;      ///< offload: parameters and gradients moved between host and device a step
};

/// \brief A step's price: its parts and the whole, for the busiest rank.
struct StepPrice {
  double bubble = 0;            ///< the fraction of the critical path a stage idles: 1 - v m / path
  double compute_seconds = 0;   ///< the critical path: the schedule's chunk-passes, split-group all-reduces included
  double tensor_seconds = 0;    ///< the split group's all-reduces of the busiest rank a step (within compute_seconds)
  double pipeline_seconds = 0;  ///< the stages' sends on the path, activations forward and gradients back
  double data_seconds = 0;      ///< the data-parallel group's ring passes over the gradients
  double data_bytes = 0;        ///< what those passes move, a rank
  double host_seconds = 0;      ///< offload's moves
  double seconds = 0;           ///< the step: the path, the sends, the reduction's part backward does not hide, offload
};

/// \brief The share of the data-parallel reduction's time that backward hides (it overlaps all but
/// the last bucket): taken as 60% of the compute.
inline constexpr double kHiddenByBackward = 0.6;

/// \brief The step time of combination c on `cluster` from what one micro-batch costs (cost), the
/// reduction in at most `buckets` messages a ring pass (communication.max_splits). The schedule's
/// critical path (kSchedules' path) runs the slowest chunk v m + p - 1 times for 1F1B (fewer for
/// ZB-H1); ranks that share cores wait for every rank's work; a split group's all-reduces hold the
/// path; the reduction's ring passes are as many as the ZeRO stage makes, hidden by backward but
/// for the last bucket.
constexpr StepPrice price(const Cluster& cluster, const Combination& c, const StepCost& cost, int buckets) {
  detail::check_cluster(cluster, "plan::price");
  if (c.data < 1 || c.pipeline < 1 || c.micro_batches < 1 || c.virtual_stages < 1 || c.policies.zero < 0 || c.policies.zero > 3)
    detail::step_is_not_valid("the combination's degrees, micro-batches and virtual stages must be 1 or more, its ZeRO stage 0 to 3");
  if (c.pipeline > 1 && !strategy::is_schedule(c.schedule))
    detail::step_is_not_valid("a combination of several stages needs a schedule (one of strategy::kSchedules)");
  if (buckets < 1) detail::step_is_not_valid("the reduction's buckets (communication.max_splits) must be 1 or more");
  for (const double x : {cost.chunk_seconds, cost.chunk_talk, cost.rank_talk, cost.shared_work, cost.send_bytes, cost.gradient_bytes,
                         cost.host_bytes})
    if (!(x >= 0 && x < 1e30)) detail::step_is_not_valid("every figure of the StepCost must be finite and 0 or more");
  StepPrice r;
  const int p = c.pipeline, m = c.micro_batches, v = c.virtual_stages, n = c.data;
  const double path = p == 1 ? m : c.schedule->path(m, v, p);
  r.bubble = p == 1 ? 0.0 : 1.0 - v * m / path;
  r.compute_seconds = cost.chunk_seconds * path;
  if (cost.shared_work > r.compute_seconds) r.compute_seconds = cost.shared_work;
  r.compute_seconds += cost.chunk_talk * path;
  r.tensor_seconds = cost.rank_talk * m;
  if (p > 1) r.pipeline_seconds = 2.0 * path * cluster.pipeline.seconds(cost.send_bytes);
  if (n > 1) {
    const double whole = c.policies.zero >= 2 ? cost.gradient_bytes * n : cost.gradient_bytes;
    const int passes = detail::zero_ring_passes(c.policies.zero, m);
    r.data_bytes = static_cast<double>(n - 1) / n * whole * passes;
    r.data_seconds = cluster.data.alpha * (n - 1) * buckets * passes + r.data_bytes / cluster.data.beta;
  }
  const double last_bucket = r.data_seconds / (buckets > 0 ? buckets : 1);
  const double exposed = r.data_seconds - kHiddenByBackward * r.compute_seconds;
  if (c.policies.offload) r.host_seconds = cluster.host.seconds(cost.host_bytes);
  r.seconds = r.compute_seconds + r.pipeline_seconds + (exposed > last_bucket ? exposed : last_bucket) + r.host_seconds;
  return r;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
