#pragma once
/// \file
/// \brief epl::auto_plan — auto.auto_parallel = true without pipeline.num_stages: the planner
/// chooses the run's data-parallel degree, pipeline stages, micro-batches, schedule, ZeRO stage,
/// offload, recompute and AMP (plan::search over the compiled policies), and rank 0 prints why
/// (the top plans with their predicted memory and time). Call it before building the Trainer:
///
///     cfg = epl::auto_plan<Model, Optimizer, Policies>(ctx, cfg, model, sample, global_batch);
///     epl::Trainer<Model, Optimizer, Policies> trainer(ctx, cfg, std::move(model), ...);
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "epl/optim/optimizer.hpp"
#include "epl/plan/search.hpp"
#include "epl/reflect/type_name.hpp"
#include "epl/runtime/config.hpp"
#include "epl/runtime/context.hpp"
#include "epl/runtime/data.hpp"
#include "epl/runtime/run_options.hpp"

namespace epl {
inline namespace v0 {

/// \brief What auto_plan measures and allows.
struct AutoPlanOptions {
  std::int64_t budget = 0;          ///< device bytes a rank may use (0: no limit)
  std::filesystem::path cache = {}; ///< where the probe's profile is kept between runs (empty: measured each run)
  int repeats = 3;                  ///< probe runs (the fastest counts)
  bool print = true;                ///< rank 0 prints the top plans
};

/// \brief The α and β of `world`'s all-reduce (a collective): the median time of 9 small and 9
/// large messages, the slowest rank's, read as a ring's 2 (n - 1) messages of 2 (n - 1) / n of
/// the bytes. A world of one: the default link (nothing is sent).
inline plan::Link measure_all_reduce(comm::Communicator& world) {
  const int n = world.size();
  if (n == 1) return {};
  auto median_seconds = [&](std::int64_t count) {
    std::vector<float> buf(static_cast<std::size_t>(count), 1.0f);
    std::vector<double> t;
    for (int i = 0; i < 9; ++i) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      world.all_reduce(comm::Buffer(buf.data(), count, DType::kF32), comm::Buffer(buf.data(), count, DType::kF32), comm::ReduceOp::kSum);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    double s = t[t.size() / 2];
    world.all_reduce(comm::Buffer(&s, 1, DType::kF64), comm::Buffer(&s, 1, DType::kF64), comm::ReduceOp::kMax);
    return s;
  };
  const std::int64_t small = 16, large = 1 << 20;
  const double ts = median_seconds(small), tl = median_seconds(large);
  const double moved = 2.0 * (n - 1) / n * 4.0 * static_cast<double>(large);
  plan::Link l;
  l.alpha = std::max(1e-7, ts / (2.0 * (n - 1)));
  l.beta = moved / std::max(1e-9, tl - 2.0 * (n - 1) * l.alpha);
  return l;
}

/// \brief cfg with the fastest plan's keys when auto.auto_parallel = true and pipeline.num_stages
/// is not set (else cfg as it is): every rank profiles the model on its device with the rows of
/// `sample` (a few rows of real data), measures the world's all-reduce, and the ranks take rank 0's
/// choice. A collective. `global_rows` is the batch the run trains a step. Annotations in the
/// model (epl::Split, epl::Replicate, an epl::Pipeline type) keep their axes; the planner fills the rest.
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Loss = nn::SoftmaxCrossEntropy>
Config auto_plan(Context& ctx, const Config& cfg, const Model& model, const Batch& sample, std::int64_t global_rows,
                 AutoPlanOptions o = {}) {
  if (!cfg.get(keys::auto_parallel) || cfg.source(keys::num_stages) != Config::Source::kDefault) return cfg;
  auto& world = ctx.world();
  const int n = world.size();
  // the probe: at most 4 rows of the sample
  const std::int64_t rows = std::min<std::int64_t>(sample.inputs.dim(0), 4);
  Model counted = model;
  const std::string key = std::string(reflect::type_name<Model>()) + " rows " + std::to_string(rows) + " of " +
                          sample.inputs.shape().str() + " " + std::to_string(nn::parameter_count(counted)) + " parameters";
  std::optional<plan::Profile> prof, amp;
  constexpr auto compiled = policy::compiled<Policy>(false);
  if (!o.cache.empty()) {
    prof = plan::load_profile(o.cache, key);
    if (compiled.amp != DType::kF32) amp = plan::load_profile(o.cache.string() + ".amp", key);
  }
  const Tensor x = sample.inputs.slice(0, rows), y = sample.targets.slice(0, rows);
  const bool fresh = !prof || (compiled.amp != DType::kF32 && !amp);
  if (!prof) prof = plan::profile<Model, Loss>(model, ctx.cpu(), x, y, o.repeats);
  if (compiled.amp != DType::kF32 && !amp) amp = plan::profile<Model, Loss>(model, ctx.cpu(), x, y, o.repeats, compiled.amp);
  // rank 0 writes what it measured; the others may be reading the old file: it is replaced whole
  world.barrier();
  if (!o.cache.empty() && fresh && ctx.rank() == 0) {
    plan::save_profile(*prof, o.cache, key);
    if (amp) plan::save_profile(*amp, o.cache.string() + ".amp", key);
  }
  plan::Cluster cluster{.ranks = n};
  if (o.budget > 0) cluster.bytes_per_rank = o.budget;
  cluster.data = cluster.pipeline = cluster.tensor = measure_all_reduce(world);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n > cores) cluster.cores = cores;  // more ranks than this machine's cores: they share them (thread ranks, one host's processes)
  // the run's other keys, and its ranks' speeds (cluster.rank_speeds), price each plan as it will run
  plan::PlanOptions base = plan_options(cfg, {});
  base.rank_speeds = rank_speeds(cfg, ctx.cpu(), world);
  const auto found = plan::search<Model, Policy>(model, *prof, cluster, global_rows, Optimizer::kStateSlots,
                                                 {.budget = o.budget, .amp_profile = amp ? &*amp : nullptr, .base = base});
  // rank 0's choice, on every rank
  const auto& b = found.best().candidate;
  std::int64_t chosen[] = {b.data, b.pipeline, b.micro_batches, 0, b.virtual_stages, b.zero, b.recompute, b.offload, b.amp};
  for (std::size_t i = 0; i < std::size(strategy::kSchedules); ++i)
    if (strategy::kSchedules[i].name == b.schedule) chosen[3] = static_cast<std::int64_t>(i);
  world.broadcast(comm::Buffer(chosen, 9, DType::kI64), 0);
  const plan::Candidate c{.data = static_cast<int>(chosen[0]), .pipeline = static_cast<int>(chosen[1]),
                          .micro_batches = static_cast<int>(chosen[2]), .tensor = plan::tensor_degree_v<Model>,
                          .schedule = std::string(strategy::kSchedules[static_cast<std::size_t>(chosen[3])].name),
                          .virtual_stages = static_cast<int>(chosen[4]), .zero = static_cast<int>(chosen[5]),
                          .recompute = chosen[6] != 0, .offload = chosen[7] != 0, .amp = chosen[8] != 0};
  if (o.print && ctx.rank() == 0) {
    std::printf("auto.auto_parallel: %s on %d rank%s, chosen as the fastest of the plans that fit (predicted):\n%s", c.str().c_str(), n,
                n == 1 ? "" : "s", plan::report(found, 5).c_str());
    std::fflush(stdout);
  }
  Config out = cfg;
  for (const auto& [k, v] : c.keys()) out.set_text(k, v);
  return out;
}

}  // namespace v0
}  // namespace epl
