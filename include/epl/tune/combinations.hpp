#pragma once
/// \file
/// \brief epl::bench::combinations — trains each plan a plan::search found for a few steps and
/// measures what the cost model predicted: every rank's state bytes and activation peak (the
/// allocator's accounting) and the step time, the slowest rank's. A user's program benchmarks the
/// combinations of its own model with it:
///
///     auto found = epl::plan::search<Model, Policies>(model, profile, cluster, rows, Optimizer::kStateSlots);
///     epl::launch(cfg, [&](epl::Context& ctx) {
///       auto measured = epl::bench::combinations<Model, Optimizer, Policies>(ctx, cfg, found.plans, make_model, optimizer, batches);
///     });
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "epl/core/linked.hpp"

#include "epl/plan/search.hpp"
#include "epl/runtime/trainer.hpp"

namespace epl {
inline namespace v0 {
namespace bench {

/// \brief One plan, predicted and measured (the largest over the ranks).
struct Measured {
  plan::Estimate predicted;
  plan::StateBytes state;        ///< after a step, the allocator's
  std::int64_t activations = 0;  ///< the peak of a step over what was held before it
  double seconds = 0;            ///< the median step, the slowest rank's
  double fastest = 0;            ///< the fastest step, the slowest rank's
  /// Measured in several rounds: the median over rounds of its round's median step over the round's
  /// typical step (the geometric mean of the plans' that ran every round), the slowest rank's. A
  /// burst of load that lasts a round slows every plan of it alike and cancels here, where it moves
  /// `seconds`. 0: one round.
  double relative = 0;
  double loss = 0;               ///< the last step's
  int rounds = 0;                ///< the rounds it was timed in
  /// It left a race (CombinationOptions::max_rounds) more than race_band behind the leader, round
  /// by round: bench::fastest and bench::choose pass it over, whatever its `relative` against the
  /// typical step of the plans that ran on.
  bool left_race = false;
  /// How far its timed steps disagreed: the median over the fastest, less 1.
  [[nodiscard]] double spread() const noexcept { return fastest > 0 ? seconds / fastest - 1 : 0; }
  /// What plans are ranked by: `relative` when measured in rounds, else the median step.
  [[nodiscard]] double rank_key() const noexcept { return relative > 0 ? relative : seconds; }
};

/// \brief How combinations measures.
struct CombinationOptions {
  int warmup = 1;  ///< steps before the timed ones, each time a plan is built
  int steps = 3;   ///< timed steps a round (the median of every round's)
  /// Rounds over the plans, in turn (A B C A B C ...): a burst of load on the machine then falls
  /// on every plan alike instead of on whichever ran during it.
  int rounds = 1;
  /// A race after `rounds`: before each further round the leader is the plan of the best
  /// Measured::relative so far, and a plan whose median step over the leader's, round by round, is
  /// more than `race_band` behind leaves; the others race on until one is left, the rounds reach
  /// max_rounds, or the race has timed as many plan-rounds as the first `rounds` did (plans x
  /// rounds: it at most doubles the measurement). Close plans are then compared over more rounds
  /// and clear losers over fewer. At most `rounds` (0 among them): no race.
  int max_rounds = 0;
  double race_band = 0.15;  ///< above 0 and below 10: 0.15 leaves a plan 15% behind the leader
  TrainerOptions trainer = {};
};

namespace detail {
// A plan being measured: its trainer's next batch, and a step on it (combinations' Run).
struct Trial {
  virtual ~Trial() = default;
  virtual Batch next() = 0;
  virtual double step(const Batch& b) = 0;
  [[nodiscard]] virtual data::Shard shard() const = 0;  ///< this rank's share of each batch
};
// combinations' body, compiled once: each plan's Trial made by `start` from its configuration.
EPL_LINKED std::vector<Measured> measure_plans(Context& ctx, const std::vector<plan::Estimate>& plans, int tensor,
                                               const CombinationOptions& o,
                                               const std::function<std::unique_ptr<Trial>(const Config&)>& start, const Config& cfg);
}  // namespace detail

/// \brief Each plan's step relative to its rounds' (Measured::relative): from every plan's median
/// step of every round (round_ns[plan * rounds + round]), the median over rounds of its step over
/// its round's typical step, the geometric mean of the plans' steps that round.
EPL_LINKED std::vector<double> relative_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t rounds);

/// \brief relative_steps over a race (CombinationOptions::max_rounds): round_ns[plan * stride +
/// round] for the first `rounds` rounds, negative from the round a plan had left the race on (every
/// plan runs the first round); each round's typical step is the geometric mean of the plans timed
/// in every round (all of them when none left), and a plan's figure the median over the rounds it
/// ran of its step over its round's typical.
EPL_LINKED std::vector<double> race_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t stride,
                                          std::size_t rounds);

/// \brief Trains Model (made by make()) with a copy of `optimizer` under each of `plans` in turn,
/// from cfg with the plan's keys set, and measures it; with o.rounds > 1 it goes round the plans
/// that many times, building each again: the median is over every round's timed steps, and
/// Measured::relative compares the plans round by round. `batches(shard)` gives a callable that
/// returns this rank's next Batch for that data shard. A collective: every rank of ctx calls it
/// with the same plans.
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Make, class Batches>
std::vector<Measured> combinations(Context& ctx, const Config& cfg, const std::vector<plan::Estimate>& plans, Make&& make,
                                   const Optimizer& optimizer, Batches&& batches, CombinationOptions o = {}) {
  using Next = std::invoke_result_t<Batches&, const data::Shard&>;
  struct Run final : detail::Trial {  // one plan's Trainer, and its batches
    Trainer<Model, Optimizer, Policy> trainer;
    Next batch;
    Run(Context& ctx, const Config& c, Make& make, const Optimizer& optimizer, Batches& batches, const TrainerOptions& to)
        : trainer(ctx, c, make(), optimizer, to), batch(batches(trainer.data_shard())) {}
    Batch next() override { return batch(); }
    double step(const Batch& b) override { return trainer.step(b); }
    [[nodiscard]] data::Shard shard() const override { return trainer.data_shard(); }
  };
  return detail::measure_plans(ctx, plans, plan::tensor_degree_v<Model>, o, [&](const Config& c) -> std::unique_ptr<detail::Trial> {
    return std::make_unique<Run>(ctx, c, make, optimizer, batches, o.trainer);
  }, cfg);
}

/// \brief The measured plan ranked fastest (Measured::rank_key; the first of equals) of those that
/// did not leave a race (Measured::left_race); `measured` must not be empty.
EPL_LINKED std::size_t fastest(const std::vector<Measured>& measured);

/// \brief The plan to run from measured ones: the fastest, unless a plan of fewer pipeline stages
/// measured within the noise of it (its spread or the fastest's, from 5% to at most 10%): then the
/// fewest stages among those, the fastest of them. A pipeline must win clearly to be chosen: within
/// the noise it only adds a bubble's risk and a schedule's machinery; past 10% it has won. Plans
/// that left a race are passed over.
EPL_LINKED std::size_t choose(const std::vector<Measured>& measured);

}  // namespace bench
}  // namespace v0
}  // namespace epl

// The model-free bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/tune/combinations.ipp"
#endif
