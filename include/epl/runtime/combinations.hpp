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
  double loss = 0;               ///< the last step's
};

/// \brief How combinations measures.
struct CombinationOptions {
  int warmup = 1;  ///< steps before the timed ones
  int steps = 3;   ///< timed steps (their median)
  TrainerOptions trainer = {};
};

/// \brief Trains Model (made by make()) with a copy of `optimizer` under each of `plans` in turn,
/// from cfg with the plan's keys set, and measures it. `batches(shard)` gives a callable that
/// returns this rank's next Batch for that data shard. A collective: every rank of ctx calls it
/// with the same plans.
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Make, class Batches>
std::vector<Measured> combinations(Context& ctx, const Config& cfg, const std::vector<plan::Estimate>& plans, Make&& make,
                                   const Optimizer& optimizer, Batches&& batches, CombinationOptions o = {}) {
  EPL_CHECK(o.steps >= 1 && o.warmup >= 0, "bench::combinations: steps = ", o.steps, " must be at least 1 and warmup = ", o.warmup,
            " at least 0");
  auto& world = ctx.world();
  const DeviceId id = ctx.cpu().id(), host{DeviceKind::kHost, id.index};
  std::vector<Measured> out;
  for (const auto& e : plans) {
    EPL_CHECK(e.candidate.tensor == plan::tensor_degree_v<Model>, "bench::combinations: plan ", e.candidate.str(), " is for a model split ",
              e.candidate.tensor, " ways (epl::Split), but this model type's degree is ", plan::tensor_degree_v<Model>,
              "; measure each model type's plans with that type");
    const int ranks = e.candidate.data * e.candidate.pipeline * plan::tensor_degree_v<Model>;
    EPL_CHECK(ranks == world.size(), "bench::combinations: plan ", e.candidate.str(), " was made for ", ranks, " ranks, but this run has ",
              world.size(), "; search with a cluster of ", world.size(), " ranks");
    Config c = cfg;
    for (const auto& [key, value] : e.candidate.keys()) c.set_text(key, value);
    Measured m;
    m.predicted = e;
    std::vector<double> secs;
    {
      Trainer<Model, Optimizer, Policy> trainer(ctx, c, make(), optimizer, o.trainer);
      auto next = batches(trainer.data_shard());
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const Batch b = next();
        world.barrier();
        const std::int64_t before = memory_stats(id).current_of(MemoryCategory::kActivations);
        memory_account(id).reset_peaks();
        const auto t0 = std::chrono::steady_clock::now();
        m.loss = trainer.step(b);
        world.barrier();  // the step of the slowest rank
        if (s < o.warmup) continue;
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        m.activations = std::max(m.activations, memory_stats(id).peak_of(MemoryCategory::kActivations) - before);
      }
      const auto d = memory_stats(id), h = memory_stats(host);
      m.state = {d.current_of(MemoryCategory::kParameters), d.current_of(MemoryCategory::kGradients),
                 d.current_of(MemoryCategory::kOptimizerState), h.current_of(MemoryCategory::kParameters),
                 h.current_of(MemoryCategory::kGradients), h.current_of(MemoryCategory::kOptimizerState)};
    }
    std::sort(secs.begin(), secs.end());
    m.seconds = secs[secs.size() / 2];
    // the largest over the ranks
    std::int64_t v[] = {m.state.parameters, m.state.gradients, m.state.optimizer_state, m.state.host_parameters,
                        m.state.host_gradients, m.state.host_optimizer_state, m.activations,
                        static_cast<std::int64_t>(m.seconds * 1e9)};
    world.all_reduce(comm::Buffer(v, 8, DType::kI64), comm::Buffer(v, 8, DType::kI64), comm::ReduceOp::kMax);
    m.state = {v[0], v[1], v[2], v[3], v[4], v[5]};
    m.activations = v[6];
    m.seconds = static_cast<double>(v[7]) * 1e-9;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace bench
}  // namespace v0
}  // namespace epl
