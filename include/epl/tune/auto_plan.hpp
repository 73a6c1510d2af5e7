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
#include "epl/core/linked.hpp"
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
  /// Then the plans within 15% of the leader, round by round, race on (bench::CombinationOptions::
  /// max_rounds, race_band), the others out, up to this many rounds in all and at most as many
  /// plan-rounds again: two plans a few percent apart are told apart over ~20 rounds, not 6, on a
  /// busy machine. At most `rounds` (0 among them): no race.
  int max_rounds = 20;
  int steps = 1;                    ///< timed steps of a plan a round, after one untimed
  bool print = true;                ///< rank 0 prints the top plans, and predicted against measured
  std::string* log = nullptr;       ///< where rank 0's account of the choice also goes (what it prints)
  plan::Candidate* chosen = nullptr; ///< where the chosen plan goes (every rank); left as it was when auto_plan does not plan
  /// Where every plan the search priced goes, fastest predicted first: this rank's predictions, on
  /// the cluster auto_plan priced them on (its measured all-reduce, the cores the ranks share). The
  /// plans that take other values of planner keys the run gave are left out (SearchResult::held_out
  /// counts them). Left as it was when auto_plan does not plan.
  plan::SearchResult* found = nullptr;
};

namespace detail {
// A batch of `rows` rows on the CPU, the sample's rows over and over (the measured steps' data: a
// step's time does not depend on which rows it reads).
EPL_LINKED Batch tiled(const device::Cpu& cpu, const Batch& sample, std::int64_t rows);
// auto_plan's model-free steps (auto_plan.ipp), compiled once: the checks of its options and of
// the sample (the same options and rows on every rank), which give the probe's rows; the cluster the plans are
// priced on (its all-reduce measured) and the run's other keys; rank 0's shortlist, agreed by
// every rank; and the account of the choice, with the chosen plan's keys set in cfg.
EPL_LINKED std::int64_t check_sample(Context& ctx, const Batch& sample, std::int64_t global_rows, const AutoPlanOptions& o);
EPL_LINKED plan::Cluster cluster_of(Context& ctx, const Config& cfg, const AutoPlanOptions& o, plan::PlanOptions& base);
EPL_LINKED std::vector<plan::Estimate> agreed_shortlist(Context& ctx, const plan::SearchResult& found, std::size_t k, int tensor);
// The plans of `found` that agree with every planner key the user gave in cfg (a schedule, the
// micro-batches, a ZeRO level, ...): they are constraints, not suggestions; none: an error naming them.
EPL_LINKED plan::SearchResult held_to_given(plan::SearchResult found, const Config& cfg);
EPL_LINKED Config chosen(Context& ctx, const Config& cfg, const plan::SearchResult& found, const std::vector<plan::Estimate>& plans,
                         const std::vector<bench::Measured>& measured, bool stand_in, const AutoPlanOptions& o);
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
EPL_LINKED plan::Link measure_all_reduce(comm::Communicator& world);

/// \brief cfg with the fastest plan's keys when auto.auto_parallel = true and pipeline.num_stages
/// is not set (else cfg as it is): every rank profiles the model on its device with the rows of
/// `sample` (a few rows of real data), measures the world's all-reduce, and the ranks take rank 0's
/// choice. A collective. `global_rows` is the batch the run trains a step. Annotations in the
/// model (epl::Split, epl::Replicate, an epl::Pipeline type) keep their axes; the planner fills the rest.
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Loss = nn::SoftmaxCrossEntropy>
Config auto_plan(Context& ctx, const Config& cfg, const Model& model, const Batch& sample, std::int64_t global_rows,
                 AutoPlanOptions o = {}) {
  EPL_CHECK(o.repeats >= 1 && o.measure >= 0 && o.rounds >= 1 && o.max_rounds >= 0 && o.steps >= 1, "auto_plan: repeats = ", o.repeats,
            ", measure = ", o.measure, ", rounds = ", o.rounds, ", max_rounds = ", o.max_rounds, ", steps = ", o.steps,
            "; repeats, rounds and steps must be at least 1, and measure and max_rounds at least 0 (measure 0 or 1: choose by "
            "prediction alone; max_rounds 0: no race)");
  EPL_CHECK(o.budget >= 0, "auto_plan: AutoPlanOptions::budget = ", o.budget, " bytes; give the bytes a rank may use, or 0 for no limit");
  if (!cfg.get(keys::auto_parallel) || cfg.source(keys::num_stages) != Config::Source::kDefault) return cfg;
  const std::int64_t rows = detail::check_sample(ctx, sample, global_rows, o);
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
  if (!prof) prof = plan::profile<Model, Loss, device::Cpu, Policy>(model, ctx.cpu(), x, y, o.repeats);
  if (compiled.amp != DType::kF32 && !amp) amp = plan::profile<Model, Loss, device::Cpu, Policy>(model, ctx.cpu(), x, y, o.repeats, compiled.amp);
  // rank 0 writes what it measured; the others may be reading the old file: it is replaced whole
  ctx.world().barrier();
  if (!o.cache.empty() && fresh && ctx.rank() == 0) {
    plan::save_profile(*prof, o.cache, key);
    if (amp) plan::save_profile(*amp, o.cache.string() + ".amp", key);
  }
  plan::PlanOptions base;
  const plan::Cluster cluster = detail::cluster_of(ctx, cfg, o, base);
  const auto found = detail::held_to_given([&] {
    try {
      return plan::search<Model, Policy>(model, *prof, cluster, global_rows, Optimizer::kStateSlots,
                                         {.budget = o.budget, .amp_profile = amp ? &*amp : nullptr, .base = base});
    } catch (const Error& e) {
      // a profile read back from the cache that does not describe this model: the file is the fix
      if (fresh || o.cache.empty()) throw;
      EPL_FAIL(e.detail(), " (the profile was read from the planner's calibration file ", o.cache,
               ", written for this model type and sample shape: if the model changed otherwise, delete the file to measure again)");
    }
  }(), cfg);
  if (o.found) *o.found = found;
  // rank 0's top plans, on every rank (each rank probed for itself: their rankings may differ).
  // They are measured when the optimizer can stand in for the run's (built from its default options).
  constexpr bool stand_in = detail::has_stand_in<Optimizer>;
  const auto plans = detail::agreed_shortlist(ctx, found, stand_in && o.measure > 1 ? static_cast<std::size_t>(o.measure) : 1,
                                              plan::tensor_degree_v<Model>);
  std::vector<bench::Measured> measured;
  if constexpr (stand_in) if (plans.size() > 1) {
    // Measured before choosing: the top plans trained in turns on tiles of the sample, with no
    // checkpoint or trace of the run's (it has not begun).
    Config trial = cfg;
    trial.set(keys::checkpoint_dir, std::string());
    trial.set(keys::checkpoint_every, std::int64_t{0});
    trial.set(keys::trace, std::string());
    measured = bench::combinations<Model, Optimizer, Policy>(
        ctx, trial, plans, [&] { return model; }, detail::stand_in<Optimizer>(),
        [&](const data::Shard& shard) { return [b = detail::tiled(ctx.cpu(), sample, shard.rows_of(global_rows))] { return b; }; },
        {.warmup = 1, .steps = o.steps, .rounds = o.rounds, .max_rounds = o.max_rounds});
  }
  return detail::chosen(ctx, cfg, found, plans, measured, stand_in, o);
}

}  // namespace v0
}  // namespace epl

// The model-free bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/tune/auto_plan.ipp"
#endif
