#pragma once
/// \file
/// \brief The model-free bodies of bench::combinations (its rounds of timed steps, a Trial a
/// plan), relative_steps, fastest and choose (the header declares them): included by that header
/// in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "epl/tune/combinations.hpp"

namespace epl {
inline namespace v0 {
namespace bench {

namespace detail {
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace detail

EPL_LINKED std::vector<double> relative_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t rounds) {
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

namespace detail {
EPL_LINKED std::vector<Measured> measure_plans(Context& ctx, const std::vector<plan::Estimate>& plans, int tensor,
                                               const CombinationOptions& o,
                                               const std::function<std::unique_ptr<Trial>(const Config&)>& start, const Config& cfg) {
  EPL_CHECK(o.steps >= 1 && o.warmup >= 0 && o.rounds >= 1, "bench::combinations: steps = ", o.steps, " must be at least 1, warmup = ",
            o.warmup, " at least 0 and rounds = ", o.rounds, " at least 1");
  auto& world = ctx.world();
  const DeviceId id = ctx.cpu().id(), host{DeviceKind::kHost, id.index};
  for (const auto& e : plans) {
    EPL_CHECK(e.candidate.tensor == tensor, "bench::combinations: plan ", e.candidate.str(), " is for a model split ",
              e.candidate.tensor, " ways (epl::Split), but this model type's degree is ", tensor,
              "; measure each model type's plans with that type");
    const int ranks = e.candidate.data * e.candidate.pipeline * tensor;
    EPL_CHECK(ranks == world.size(), "bench::combinations: plan ", e.candidate.str(), " was made for ", ranks, " ranks, but this run has ",
              world.size(), "; search with a cluster of ", world.size(), " ranks");
  }
  {  // every rank measures the same plans in the same order: other lists would leave the ranks in different trainers' collectives
    RunFacts facts;
    std::string listed;
    for (const auto& e : plans) listed += e.candidate.str() + " for " + std::to_string(e.rows) + " rows; ";
    facts.add_number("the number of plans", static_cast<double>(plans.size()));
    facts.add_hash("the plans", epl::detail::hash_text(epl::detail::kFnvBasis, listed), listed);
    check_agreement(world, facts, "bench::combinations: the",
                    "give every rank the same plans in the same order (rank 0's, broadcast, as auto_plan does)");
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
      const auto trial = start(c);
      std::vector<double> this_round;
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const Batch b = trial->next();
        if (s == 0 && e.rows > 0) {  // the rows the plan was priced for: this rank's share of its global batch
          const std::int64_t want = trial->shard().rows_of(e.rows), got = b.inputs.defined() && b.inputs.rank() > 0 ? b.inputs.dim(0) : 0;
          EPL_CHECK(got == want, "bench::combinations: plan ", e.candidate.str(), " was priced for a global batch of ", e.rows,
                    " rows, ", want, " of them this rank's, but `batches` gave it ", got, "; give each plan's batches "
                    "shard.rows_of(the global batch it was searched for) rows");
        }
        world.barrier();
        const std::int64_t before = memory_stats(id).current_of(MemoryCategory::kActivations);
        memory_account(id).reset_peaks();
        const auto t0 = std::chrono::steady_clock::now();
        m.loss = trial->step(b);
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
}  // namespace detail

EPL_LINKED std::size_t fastest(const std::vector<Measured>& measured) {
  EPL_CHECK(!measured.empty(), "bench::fastest: no plan was measured");
  std::size_t best = 0;
  for (std::size_t i = 1; i < measured.size(); ++i)
    if (measured[i].rank_key() < measured[best].rank_key()) best = i;
  return best;
}

EPL_LINKED std::size_t choose(const std::vector<Measured>& measured) {
  EPL_CHECK(!measured.empty(), "bench::choose: no plan was measured");
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
