#pragma once
/// \file
/// \brief The model-free bodies of bench::combinations (its rounds of timed steps, a Trial a
/// plan), relative_steps, fastest and choose (the header declares them): included by that header
/// in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
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

namespace detail {
// round_ns holds plans x stride timings (no overflow in the product)
inline bool holds(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t stride) {
  return stride > 0 && round_ns.size() % stride == 0 && round_ns.size() / stride == plans;
}
}  // namespace detail

EPL_LINKED std::vector<double> race_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t stride,
                                          std::size_t rounds) {
  EPL_CHECK(plans > 0, "bench::race_steps: plans = 0; give the timings of one plan or more");
  EPL_CHECK(rounds > 0 && rounds <= stride, "bench::race_steps: ", rounds, " rounds ran of a stride of ", stride,
            "; the rounds that ran must be at least 1 and at most the stride (the rounds each plan's timings have room for)");
  EPL_CHECK(detail::holds(round_ns, plans, stride), "bench::race_steps: ", round_ns.size(), " timings are not ", plans, " plans x ",
            stride, " rounds (the stride)");
  std::vector<char> every(plans, 1);  // the plans timed in every round: each round's typical step is theirs
  for (std::size_t i = 0; i < plans; ++i) {
    EPL_CHECK(round_ns[i * stride] >= 0, "bench::race_steps: plan ", i, " was not timed in the first round; every plan runs the "
              "first rounds, and only leaving a race ends its timings");
    for (std::size_t r = 1; r < rounds; ++r) {
      if (round_ns[i * stride + r] < 0) every[i] = 0;
      else EPL_CHECK(every[i], "bench::race_steps: plan ", i, " is timed in round ", r, " after it left the race; a plan that "
                     "leaves does not come back (negative timings only at the end of its rounds)");
    }
  }
  EPL_CHECK(std::find(every.begin(), every.end(), 1) != every.end(), "bench::race_steps: no plan was timed in every one of the ",
            rounds, " rounds; a race keeps at least its fastest plan");
  // each round's typical step: the geometric mean of those plans' (load that scales a round's plans
  // alike cancels; no plan is the typical one, so no two tie at exactly 1)
  std::vector<double> typical(rounds, 0.0), out(plans);
  std::size_t finishers = 0;
  for (std::size_t i = 0; i < plans; ++i)
    if (every[i]) {
      ++finishers;
      for (std::size_t r = 0; r < rounds; ++r) typical[r] += std::log(std::max<double>(1.0, static_cast<double>(round_ns[i * stride + r])));
    }
  for (auto& t : typical) t = std::exp(t / static_cast<double>(finishers));
  for (std::size_t i = 0; i < plans; ++i) {
    std::vector<double> ratios;
    for (std::size_t r = 0; r < rounds && round_ns[i * stride + r] >= 0; ++r)
      ratios.push_back(std::max<double>(1.0, static_cast<double>(round_ns[i * stride + r])) / typical[r]);
    out[i] = detail::median_of(ratios);
  }
  return out;
}

EPL_LINKED std::vector<double> relative_steps(const std::vector<std::int64_t>& round_ns, std::size_t plans, std::size_t rounds) {
  EPL_CHECK(plans > 0 && rounds > 0 && detail::holds(round_ns, plans, rounds), "bench::relative_steps: ", round_ns.size(),
            " timings are not ", plans, " plans x ", rounds, " rounds (each at least 1)");
  for (const auto ns : round_ns)
    EPL_CHECK(ns >= 0, "bench::relative_steps: a step of ", ns, " ns; a timing cannot be negative");
  return race_steps(round_ns, plans, rounds, rounds);
}

namespace detail {
EPL_LINKED std::vector<Measured> measure_plans(Context& ctx, const std::vector<plan::Estimate>& plans, int tensor,
                                               const CombinationOptions& o,
                                               const std::function<std::unique_ptr<Trial>(const Config&)>& start, const Config& cfg) {
  EPL_CHECK(o.steps >= 1 && o.warmup >= 0 && o.rounds >= 1 && o.max_rounds >= 0, "bench::combinations: steps = ", o.steps,
            " must be at least 1, warmup = ", o.warmup, " at least 0, rounds = ", o.rounds, " at least 1 and max_rounds = ", o.max_rounds,
            " at least 0 (0: no race)");
  EPL_CHECK(o.race_band > 0 && o.race_band < 10, "bench::combinations: race_band = ", o.race_band, "; give the share behind the "
            "leader at which a plan leaves the race, above 0 and below 10 (e.g. 0.15: 15% behind)");
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
    facts.add_number("CombinationOptions::warmup", o.warmup);
    facts.add_number("CombinationOptions::steps", o.steps);
    facts.add_number("CombinationOptions::rounds", o.rounds);
    facts.add_number("CombinationOptions::max_rounds", o.max_rounds);
    facts.add_number("CombinationOptions::race_band", o.race_band);
    facts.add_hash("the plans", epl::detail::hash_text(epl::detail::kFnvBasis, listed), listed);
    check_agreement(world, facts, "bench::combinations: the",
                    "give every rank the same plans in the same order (rank 0's, broadcast, as auto_plan does) and the same options");
  }
  std::vector<Measured> out(plans.size());
  std::vector<std::vector<double>> secs(plans.size());
  // each plan's median step of each round, in ns, the slowest rank's: [plan * most + round] (-1: out of the race)
  const std::size_t n = plans.size(), first = static_cast<std::size_t>(o.rounds);
  // the race's plan-rounds: at most the first rounds' (two plans or more a round, so at most half as many rounds again)
  const std::size_t budget = n * first;
  const std::size_t most = first + (o.max_rounds > o.rounds ? std::min(static_cast<std::size_t>(o.max_rounds - o.rounds), budget / 2) : 0);
  std::vector<std::int64_t> round_ns(n * most, -1);
  std::vector<char> racing(n, 1);
  std::size_t raced = 0, rounds = 0;
  for (; rounds < most && n > 0; ++rounds) {
    if (rounds >= first) {  // the race: every rank decides from the same (agreed) timings
      const auto relative = race_steps(round_ns, n, most, rounds);
      std::size_t leader = n;
      for (std::size_t i = 0; i < n; ++i)
        if (racing[i] && (leader == n || relative[i] < relative[leader])) leader = i;
      // a plan leaves when, round by round against the leader, it is more than race_band behind
      for (std::size_t i = 0; i < n; ++i) {
        if (!racing[i] || i == leader) continue;
        std::vector<double> behind;
        for (std::size_t r = 0; r < rounds; ++r)
          behind.push_back(static_cast<double>(std::max<std::int64_t>(1, round_ns[i * most + r])) /
                           static_cast<double>(std::max<std::int64_t>(1, round_ns[leader * most + r])));
        racing[i] = detail::median_of(behind) <= 1 + o.race_band;
        out[i].left_race = !racing[i];
      }
      const auto left = static_cast<std::size_t>(std::count(racing.begin(), racing.end(), 1));
      if (left < 2 || raced + left > budget) break;
      raced += left;
    }
    std::vector<std::int64_t> column(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
      if (!racing[i]) continue;
      const auto& e = plans[i];
      Config c = cfg;
      for (const auto& [key, value] : e.candidate.keys()) c.set_text(key, value);
      Measured& m = out[i];
      m.predicted = e;
      ++m.rounds;
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
      column[i] = static_cast<std::int64_t>(detail::median_of(this_round) * 1e9);
      const auto d = memory_stats(id), h = memory_stats(host);
      m.state = {d.current_of(MemoryCategory::kParameters), d.current_of(MemoryCategory::kGradients),
                 d.current_of(MemoryCategory::kOptimizerState), h.current_of(MemoryCategory::kParameters),
                 h.current_of(MemoryCategory::kGradients), h.current_of(MemoryCategory::kOptimizerState)};
    }
    world.all_reduce(comm::Buffer(column.data(), static_cast<std::int64_t>(n), DType::kI64),
                     comm::Buffer(column.data(), static_cast<std::int64_t>(n), DType::kI64), comm::ReduceOp::kMax);
    for (std::size_t i = 0; i < n; ++i) round_ns[i * most + rounds] = column[i];
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
  if (rounds > 1) {
    const auto relative = race_steps(round_ns, n, most, rounds);
    for (std::size_t i = 0; i < n; ++i) out[i].relative = relative[i];
  }
  return out;
}
}  // namespace detail

EPL_LINKED std::size_t fastest(const std::vector<Measured>& measured) {
  EPL_CHECK(!measured.empty(), "bench::fastest: no plan was measured");
  std::size_t best = measured.size();
  for (std::size_t i = 0; i < measured.size(); ++i)
    if (!measured[i].left_race && (best == measured.size() || measured[i].rank_key() < measured[best].rank_key())) best = i;
  EPL_CHECK(best < measured.size(), "bench::fastest: every one of the ", measured.size(), " plans left the race; a race keeps its leader");
  return best;
}

EPL_LINKED std::size_t choose(const std::vector<Measured>& measured) {
  EPL_CHECK(!measured.empty(), "bench::choose: no plan was measured");
  const std::size_t best = fastest(measured);
  std::size_t pick = best;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const auto& m = measured[i];
    if (m.left_race) continue;  // behind the leader, round by round
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
