#pragma once
/// \file
/// \brief epl::auto_plan — auto.auto_parallel = true without pipeline.num_stages: the planner
/// chooses the run's data-parallel degree, pipeline stages, micro-batches, schedule, ZeRO stage,
/// offload, recompute and AMP (plan::search over the compiled policies), and rank 0 prints why
/// (the top plans with their predicted memory and time). The probe repeats its runs, interleaved,
/// and keeps each unit's fastest; then AutoPlanOptions::measure plans (the fastest predicted of each
/// layout, then of each shape: plan::shortlist) are trained a few steps each in alternating rounds,
/// compared round by round, and the fastest measured is chosen (the log shows predicted against
/// measured), because one probe on a busy machine, or a cost model blind to a tiny model's
/// overheads, can be far off. Call it on every rank before building the Trainer, keeping the
/// result in a Config of the rank's own (thread ranks share the one given to epl::launch):
///
///     const epl::Config planned = epl::auto_plan<Model, Optimizer, Policies>(ctx, cfg, model, sample, global_batch);
///     epl::Trainer<Model, Optimizer, Policies> trainer(ctx, planned, std::move(model), ...);
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "epl/config/config.hpp"
#include "epl/config/run_options.hpp"
#include "epl/data/data.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/plan/search.hpp"
#include "epl/reflect/type_name.hpp"
#include "epl/runtime/agreement.hpp"
#include "epl/runtime/context.hpp"
#include "epl/tune/combinations.hpp"

namespace epl {
inline namespace v0 {

/// \brief What auto_plan measures and allows.
struct AutoPlanOptions {
  std::int64_t budget = 0;          ///< device bytes a rank may use (0: no limit)
  std::filesystem::path cache = {}; ///< where the probe's profile is kept between runs (empty: measured each run)
  int repeats = 5;                  ///< probe runs of each batch size, interleaved (each unit's fastest counts)
  /// How many plans are trained for a few steps each, in alternating rounds, before choosing the
  /// fastest measured: plan::shortlist's, the fastest predicted of each layout first (0 or 1: the
  /// first predicted, unmeasured; more than the plans that fit: all of them).
  int measure = 5;
  /// Rounds over the measured plans (A B C A B C ...), each plan built again each round; plans
  /// are compared round by round (bench::Measured::relative), so more rounds of fewer steps
  /// compare them under more kinds of load for the same steps.
  int rounds = 6;
  int steps = 1;                    ///< timed steps of a plan a round, after one untimed
  bool print = true;                ///< rank 0 prints the top plans, and predicted against measured
  std::string* log = nullptr;       ///< where rank 0's account of the choice also goes (what it prints)
  plan::Candidate* chosen = nullptr; ///< where the chosen plan goes (every rank); left as it was when auto_plan does not plan
};

namespace detail {
// A candidate as kEncoded integers (the schedule by its place in strategy::kSchedules, then each
// policy axis's value), to broadcast.
inline constexpr int kEncoded = 5 + policy::kAxes;
inline void encode(const plan::Candidate& c, std::int64_t* out) {
  const auto schedule = static_cast<std::int64_t>(strategy::schedule_index(strategy::schedule_named(c.schedule)));
  const std::int64_t v[] = {c.data, c.pipeline, c.micro_batches, schedule, c.virtual_stages};
  std::copy(std::begin(v), std::end(v), out);
  policy::encode(c.policies, out + 5);
}
inline plan::Candidate decode(const std::int64_t* v, int tensor) {
  return {.data = static_cast<int>(v[0]), .pipeline = static_cast<int>(v[1]), .micro_batches = static_cast<int>(v[2]), .tensor = tensor,
          .schedule = std::string(strategy::schedule_at(static_cast<std::size_t>(v[3])).name), .virtual_stages = static_cast<int>(v[4]),
          .policies = policy::decode(v + 5)};
}
// A batch of `rows` rows on the CPU, the sample's rows over and over (the measured steps' data: a
// step's time does not depend on which rows it reads).
inline Batch tiled(const device::Cpu& cpu, const Batch& sample, std::int64_t rows) {
  auto tile = [&](const Tensor& t) {
    Shape shape = t.shape();
    shape[0] = rows;
    Tensor out = cpu.empty(shape, t.dtype());
    const std::size_t row = t.bytes() / static_cast<std::size_t>(t.dim(0));
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw()) + r * row, static_cast<const char*>(t.raw()) + (r % t.dim(0)) * row, row);
    return out;
  };
  return {tile(sample.inputs), tile(sample.targets)};
}
// An optimizer to time the plans with: its default options (the update's cost does not depend on them).
template <class O>
O stand_in() {
  if constexpr (requires { O(typename O::Options{}); }) return O(typename O::Options{});
  else return O();
}
template <class O>
inline constexpr bool has_stand_in = requires { O(typename O::Options{}); } || std::is_default_constructible_v<O>;
}  // namespace detail

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
  EPL_CHECK(o.repeats >= 1 && o.measure >= 0 && o.rounds >= 1 && o.steps >= 1, "auto_plan: repeats = ", o.repeats, ", measure = ",
            o.measure, ", rounds = ", o.rounds, ", steps = ", o.steps, "; repeats, rounds and steps must be at least 1 and measure at "
            "least 0 (0 or 1: choose by prediction alone)");
  if (!cfg.get(keys::auto_parallel) || cfg.source(keys::num_stages) != Config::Source::kDefault) return cfg;
  auto& world = ctx.world();
  const int n = world.size();
  // the probe: at most 4 rows of the sample
  EPL_CHECK(sample.inputs.defined() && sample.inputs.rank() > 0 && sample.inputs.dim(0) >= 2, "auto_plan: the sample batch has ",
            sample.inputs.defined() && sample.inputs.rank() > 0 ? sample.inputs.dim(0) : 0, " row",
            sample.inputs.defined() && sample.inputs.rank() > 0 && sample.inputs.dim(0) == 1 ? "" : "s", "; give 2 or more (4 is "
            "what the probe uses): with one row it cannot tell a unit's fixed cost a call from its cost a row, and every micro-batch "
            "count would be priced alike");
  const std::int64_t rows = std::min<std::int64_t>(sample.inputs.dim(0), 4);
  EPL_CHECK(detail::rows_of(sample.targets) == sample.inputs.dim(0), "auto_plan: the sample batch has ", sample.inputs.dim(0),
            " input rows but ", detail::rows_of(sample.targets), " target rows; give one target row an input row");
  detail::check_batch_memory(sample.inputs, sample.targets, ctx.cpu().id());
  {  // the measured plans train on the sample, and a pipeline's stages check they read the same rows
    std::uint64_t h = 1469598103934665603ull;
    for (const Tensor* t : {&sample.inputs, &sample.targets}) h = detail::hash_bytes(h, t->raw(), t->bytes());
    std::int64_t low = std::bit_cast<std::int64_t>(h), high = low;
    world.all_reduce(comm::Buffer(&low, 1, DType::kI64), comm::Buffer(&low, 1, DType::kI64), comm::ReduceOp::kMin);
    world.all_reduce(comm::Buffer(&high, 1, DType::kI64), comm::Buffer(&high, 1, DType::kI64), comm::ReduceOp::kMax);
    EPL_CHECK(low == high, "auto_plan: the ranks were given different sample batches; give every rank the same rows (the "
              "plans it measures train on them; read them with one seed on every rank, not from the rank's data shard)");
  }
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
  const auto found = [&] {
    try {
      return plan::search<Model, Policy>(model, *prof, cluster, global_rows, Optimizer::kStateSlots,
                                         {.budget = o.budget, .amp_profile = amp ? &*amp : nullptr, .base = base});
    } catch (const Error& e) {
      // a profile read back from the cache that does not describe this model: the file is the fix
      if (fresh || o.cache.empty()) throw;
      EPL_FAIL(e.what(), " (the profile was read from the planner's calibration file ", o.cache,
               ", written for this model type and sample shape: if the model changed otherwise, delete the file to measure again)");
    }
  }();
  // rank 0's top plans, on every rank (each rank probed for itself: their rankings may differ).
  // They are measured when the optimizer can stand in for the run's (built from its default options).
  const bool can_measure = detail::has_stand_in<Optimizer> && o.measure > 1;
  const auto listed = plan::shortlist(found, can_measure ? static_cast<std::size_t>(o.measure) : 1);
  std::int64_t k = static_cast<std::int64_t>(listed.size());
  world.broadcast(comm::Buffer(&k, 1, DType::kI64), 0);
  std::vector<std::int64_t> top(static_cast<std::size_t>(detail::kEncoded * k));
  if (ctx.rank() == 0)
    for (std::int64_t i = 0; i < k; ++i) detail::encode(found.plans[listed[static_cast<std::size_t>(i)]].candidate, top.data() + detail::kEncoded * i);
  world.broadcast(comm::Buffer(top.data(), detail::kEncoded * k, DType::kI64), 0);
  std::vector<plan::Estimate> plans(static_cast<std::size_t>(k));  // rank 0's predictions (what it prints), with its candidates
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (i < listed.size()) plans[i] = found.plans[listed[i]];
    plans[i].candidate = detail::decode(top.data() + detail::kEncoded * i, plan::tensor_degree_v<Model>);
  }
  std::size_t chosen = 0;
  std::string account;  // rank 0's, printed and kept in o.log
  std::string why = "chosen as the fastest of the plans that fit (predicted";
  why += o.measure > 1 && !detail::has_stand_in<Optimizer> ? "; not measured: the optimizer cannot be built from default options)" : ")";
  if constexpr (detail::has_stand_in<Optimizer>) if (k > 1) {
    // Measured before choosing: the top plans trained in turns on tiles of the sample, with no
    // checkpoint or trace of the run's (it has not begun).
    Config trial = cfg;
    trial.set(keys::checkpoint_dir, std::string());
    trial.set(keys::checkpoint_every, std::int64_t{0});
    trial.set(keys::trace, std::string());
    const auto measured = bench::combinations<Model, Optimizer, Policy>(
        ctx, trial, plans, [&] { return model; }, detail::stand_in<Optimizer>(),
        [&](const data::Shard& shard) { return [b = detail::tiled(ctx.cpu(), sample, shard.rows_of(global_rows))] { return b; }; },
        {.warmup = 1, .steps = o.steps, .rounds = o.rounds});
    chosen = bench::choose(measured);  // the fastest, or fewer stages within the noise of it
    const std::size_t first = bench::fastest(measured);
    why = chosen == first ? "chosen as the fastest measured of " + std::to_string(k) + " (the fastest predicted of each layout, then of each shape)"
                          : "chosen over the fastest measured (" + plans[first].candidate.str() + ", " +
                                std::to_string(static_cast<int>(std::lround(100 * (measured[chosen].rank_key() / measured[first].rank_key() - 1)))) +
                                "% faster) for fewer pipeline stages within the measurement's noise, of " + std::to_string(k) +
                                " measured (the fastest predicted of each layout, then of each shape)";
    if (ctx.rank() == 0) {
      std::string table = "measured before choosing (" + std::to_string(o.rounds) + " rounds of " + std::to_string(o.steps) +
                          (o.steps == 1 ? " step" : " steps") + ", alternating; the slowest rank's median step, and its round's step over the round's median "
                          "plan's, the median over rounds: what ranks them):\n";
      char line[512];
      for (std::size_t i = 0; i < plans.size(); ++i) {
        std::snprintf(line, sizeof line, "  %-34s predicted %9.3f ms  measured %9.3f ms  x%.3f  (spread %3.0f%%)%s\n",
                      plans[i].candidate.str().c_str(), 1e3 * plans[i].seconds, 1e3 * measured[i].seconds, measured[i].rank_key() /
                      (measured[i].relative > 0 ? 1.0 : measured[first].seconds), 100 * measured[i].spread(), i == chosen ? "  <- chosen" : "");
        table += line;
      }
      account = table;
    }
  }
  const plan::Candidate& c = plans[chosen].candidate;
  if (o.chosen) *o.chosen = c;
  if (ctx.rank() == 0) {
    account += "auto.auto_parallel: " + c.str() + " on " + std::to_string(n) + (n == 1 ? " rank, " : " ranks, ") + why + ":\n" +
               plan::report(found, 5);
    const auto place = std::find_if(found.plans.begin(), found.plans.end(), [&](const plan::Estimate& e) { return e.candidate.str() == c.str(); });
    if (place != found.plans.end() && place - found.plans.begin() >= 5) {
      char line[512];
      std::snprintf(line, sizeof line, "the chosen plan, number %zd by prediction: %.2f MiB, %.3f ms, bubble %.1f%%\n",
                    place - found.plans.begin() + 1, static_cast<double>(place->device_bytes()) / (1024.0 * 1024.0), 1e3 * place->seconds,
                    100 * place->bubble);
      account += line;
    }
    if (o.print) std::printf("%s", account.c_str());
    std::fflush(stdout);
    if (o.log) *o.log = account;
  }
  Config out = cfg;
  for (const auto& [k, v] : c.keys()) out.set_text(k, v);
  return out;
}

}  // namespace v0
}  // namespace epl
