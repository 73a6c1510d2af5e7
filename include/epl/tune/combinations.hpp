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
#include <vector>

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
  /// typical plan's (the median of the plans'), the slowest rank's. A burst of load that lasts a
  /// round slows every plan of it alike and cancels here, where it moves `seconds`. 0: one round.
  double relative = 0;
  double loss = 0;               ///< the last step's
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
  TrainerOptions trainer = {};
};

namespace detail {
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace detail

/// \brief Each plan's step relative to its rounds' (Measured::relative): from every plan's median
/// step of every round (round_ns[plan * rounds + round]), the median over rounds of its step over
/// its round's median plan's.
inline std::vector<double> relative_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t rounds) {
  EPL_CHECK(plans > 0 && rounds > 0 && round_ns.size() == plans * rounds, "bench::relative_steps: ", round_ns.size(),
            " timings are not ", plans, " plans x ", rounds, " rounds");
  for (const auto ns : round_ns)
    EPL_CHECK(ns >= 0, "bench::relative_steps: a step of ", ns, " ns; a timing cannot be negative");
  std::vector<double> typical(rounds), out(plans);
  for (std::size_t r = 0; r < rounds; ++r) {
    std::vector<double> all;
    for (std::size_t i = 0; i < plans; ++i) all.push_back(static_cast<double>(round_ns[i * rounds + r]));
    typical[r] = std::max(1.0, detail::median_of(all));
  }
  for (std::size_t i = 0; i < plans; ++i) {
    std::vector<double> ratios;
    for (std::size_t r = 0; r < rounds; ++r) ratios.push_back(static_cast<double>(round_ns[i * rounds + r]) / typical[r]);
    out[i] = detail::median_of(ratios);
  }
  return out;
}

/// \brief Trains Model (made by make()) with a copy of `optimizer` under each of `plans` in turn,
/// from cfg with the plan's keys set, and measures it; with o.rounds > 1 it goes round the plans
/// that many times, building each again: the median is over every round's timed steps, and
/// Measured::relative compares the plans round by round. `batches(shard)` gives a callable that
/// returns this rank's next Batch for that data shard. A collective: every rank of ctx calls it
/// with the same plans.
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Make, class Batches>
std::vector<Measured> combinations(Context& ctx, const Config& cfg, const std::vector<plan::Estimate>& plans, Make&& make,
                                   const Optimizer& optimizer, Batches&& batches, CombinationOptions o = {}) {
  EPL_CHECK(o.steps >= 1 && o.warmup >= 0 && o.rounds >= 1, "bench::combinations: steps = ", o.steps, " must be at least 1, warmup = ",
            o.warmup, " at least 0 and rounds = ", o.rounds, " at least 1");
  auto& world = ctx.world();
  const DeviceId id = ctx.cpu().id(), host{DeviceKind::kHost, id.index};
  for (const auto& e : plans) {
    EPL_CHECK(e.candidate.tensor == plan::tensor_degree_v<Model>, "bench::combinations: plan ", e.candidate.str(), " is for a model split ",
              e.candidate.tensor, " ways (epl::Split), but this model type's degree is ", plan::tensor_degree_v<Model>,
              "; measure each model type's plans with that type");
    const int ranks = e.candidate.data * e.candidate.pipeline * plan::tensor_degree_v<Model>;
    EPL_CHECK(ranks == world.size(), "bench::combinations: plan ", e.candidate.str(), " was made for ", ranks, " ranks, but this run has ",
              world.size(), "; search with a cluster of ", world.size(), " ranks");
  }
  std::vector<Measured> out(plans.size());
  std::vector<std::vector<double>> secs(plans.size());
  // each plan's median step of each round, in ns: [plan][round]
  std::vector<std::int64_t> round_ns(plans.size() * static_cast<std::size_t>(o.rounds));
  for (int round = 0; round < o.rounds; ++round)
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const auto& e = plans[i];
      Config c = cfg;
      for (const auto& [key, value] : e.candidate.keys()) c.set_text(key, value);
      Measured& m = out[i];
      m.predicted = e;
      Trainer<Model, Optimizer, Policy> trainer(ctx, c, make(), optimizer, o.trainer);
      auto next = batches(trainer.data_shard());
      std::vector<double> this_round;
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const Batch b = next();
        world.barrier();
        const std::int64_t before = memory_stats(id).current_of(MemoryCategory::kActivations);
        memory_account(id).reset_peaks();
        const auto t0 = std::chrono::steady_clock::now();
        m.loss = trainer.step(b);
        world.barrier();  // the step of the slowest rank
        if (s < o.warmup) continue;
        secs[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        this_round.push_back(secs[i].back());
        m.activations = std::max(m.activations, memory_stats(id).peak_of(MemoryCategory::kActivations) - before);
      }
      round_ns[i * static_cast<std::size_t>(o.rounds) + static_cast<std::size_t>(round)] = static_cast<std::int64_t>(detail::median_of(this_round) * 1e9);
      const auto d = memory_stats(id), h = memory_stats(host);
      m.state = {d.current_of(MemoryCategory::kParameters), d.current_of(MemoryCategory::kGradients),
                 d.current_of(MemoryCategory::kOptimizerState), h.current_of(MemoryCategory::kParameters),
                 h.current_of(MemoryCategory::kGradients), h.current_of(MemoryCategory::kOptimizerState)};
    }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    Measured& m = out[i];
    std::sort(secs[i].begin(), secs[i].end());
    // the largest over the ranks
    std::int64_t v[] = {m.state.parameters, m.state.gradients, m.state.optimizer_state, m.state.host_parameters,
                        m.state.host_gradients, m.state.host_optimizer_state, m.activations,
                        static_cast<std::int64_t>(secs[i][secs[i].size() / 2] * 1e9), static_cast<std::int64_t>(secs[i].front() * 1e9)};
    world.all_reduce(comm::Buffer(v, 9, DType::kI64), comm::Buffer(v, 9, DType::kI64), comm::ReduceOp::kMax);
    m.state = {v[0], v[1], v[2], v[3], v[4], v[5]};
    m.activations = v[6];
    m.seconds = static_cast<double>(v[7]) * 1e-9;
    m.fastest = static_cast<double>(v[8]) * 1e-9;
  }
  if (o.rounds > 1 && !plans.empty()) {
    world.all_reduce(comm::Buffer(round_ns.data(), static_cast<std::int64_t>(round_ns.size()), DType::kI64),
                     comm::Buffer(round_ns.data(), static_cast<std::int64_t>(round_ns.size()), DType::kI64), comm::ReduceOp::kMax);
    const auto relative = relative_steps(round_ns, plans.size(), static_cast<std::size_t>(o.rounds));
    for (std::size_t i = 0; i < plans.size(); ++i) out[i].relative = relative[i];
  }
  return out;
}

/// \brief The measured plan ranked fastest (Measured::rank_key; the first of equals); `measured`
/// must not be empty.
inline std::size_t fastest(const std::vector<Measured>& measured) {
  EPL_CHECK(!measured.empty(), "bench::fastest: no plan was measured");
  std::size_t best = 0;
  for (std::size_t i = 1; i < measured.size(); ++i)
    if (measured[i].rank_key() < measured[best].rank_key()) best = i;
  return best;
}

/// \brief The plan to run from measured ones: the fastest, unless a plan of fewer pipeline stages
/// measured within the noise of it (its spread or the fastest's, from 5% to at most 10%): then the
/// fewest stages among those, the fastest of them. A pipeline must win clearly to be chosen: within
/// the noise it only adds a bubble's risk and a schedule's machinery; past 10% it has won.
inline std::size_t choose(const std::vector<Measured>& measured) {
  const std::size_t best = fastest(measured);
  std::size_t pick = best;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const auto& m = measured[i];
    const double noise = std::clamp(std::max(m.spread(), measured[best].spread()), 0.05, 0.10);
    if (m.rank_key() > measured[best].rank_key() * (1 + noise)) continue;
    const int stages = m.predicted.candidate.pipeline, now = measured[pick].predicted.candidate.pipeline;
    if (stages < now || (stages == now && m.rank_key() < measured[pick].rank_key())) pick = i;
  }
  return pick;
}

}  // namespace bench
}  // namespace v0
}  // namespace epl
