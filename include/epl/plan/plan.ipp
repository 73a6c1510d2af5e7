#pragma once
/// \file
/// \brief The body of plan::make over a model's structure (the header declares it): included by that
/// header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/plan/plan.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
// Replicate<N, ...> beside Split<N, ...>: colocated on the same ranks (the key) or, EPL's
// placement, on separate ranks (2 pipeline stages of a model that is not a Pipeline type).
inline int place_replicate_and_split(const ModelStructure& model, const PlanOptions& opt, const strategy::ScheduleEntry& schedule, Plan& plan) {
  int p = opt.stages;
  const int t = plan.tensor, d = plan.devices_per_stage;
  if (t > 1 && d > 1) {
    EPL_CHECK(d == t, "the model has epl::Replicate<", d, ", ...> and epl::Split<", t, ", ...> parts; a replicated part feeds a "
              "split one with the same device count: give both the same N");
    if (opt.colocate) {
      plan.colocated = true;
    } else {  // EPL's placement: the replicated part on N devices, the split part on N others
      plan.separate = true;
      if (!model.is_pipeline) {
        EPL_CHECK(!opt.stages_given || p == 2, "the model's epl::Replicate<", d, "> and epl::Split<", t, "> parts run on separate "
                  "devices as 2 pipeline stages, but pipeline.num_stages = ", p, "; leave it unset, or set "
                  "cluster.colocate_split_and_replicate=true to run both on the same devices");
        EPL_CHECK(!schedule.virtual_stages, "the separate placement of epl::Replicate<", d, "> and epl::Split<", t, "> parts is 2 "
                  "pipeline stages, one each: pipeline.strategy=", schedule.name, " needs more; use PreferBackward or PreferForward");
        p = 2;
        plan.cut_at_split = true;
      }
    }
  }
  EPL_CHECK(!opt.colocate || plan.colocated, "cluster.colocate_split_and_replicate=true, but the model has no epl::Replicate<N, "
            "...> part beside an epl::Split<N, ...> part to colocate (it has Replicate<", d, "> and a tensor-parallel degree of ", t,
            "); leave the key at false");
  return p;
}

// The pipeline: p ranks, the model's chunks (a Pipeline type's stages, or a balanced cut), the
// schedule and its checks.
inline void plan_pipeline(const ModelStructure& model, const PlanOptions& opt, const strategy::ScheduleEntry& schedule, int p, Plan& plan) {
  // auto_plan gives the stages it chose; a Trainer built from the user's keys alone would train
  // the model's own layout and say nothing (strangers' findings: a plain model, then a Pipeline type)
  EPL_CHECK(!opt.auto_parallel || opt.stages_given, "auto.auto_parallel=true without pipeline.num_stages asks the planner to "
            "choose the layout, and no planner chose it: call epl::auto_plan on every rank before building the Trainer and "
            "build it from the Config it returns (docs/planner.md), or give pipeline.num_stages",
            model.is_pipeline ? " (the epl::Pipeline type's stages, or a divisor of them)" : " to cut the model into that many stages");
  if (model.is_pipeline) {
    // A Pipeline type runs one stage per rank unless pipeline.num_stages says otherwise.
    const int stages = model.declared_stages;
    if (!opt.stages_given) p = stages;
    EPL_CHECK(stages % p == 0, "the model has ", stages, " pipeline stages (epl::Pipeline<...>), which do "
              "not divide among pipeline.num_stages = ", p, " pipeline ranks; use a divisor of ", stages);
    plan.chunks = p == 1 ? 1 : stages;
  } else if (plan.cut_at_split) {
    plan.chunks = 2;
  } else {
    EPL_CHECK(p == 1 || opt.auto_parallel, "pipeline.num_stages = ", p, " needs stages: declare the model as "
              "epl::Pipeline<epl::Replicate<1, ...>, ...>, or set auto.auto_parallel=true to cut it into ", p,
              " balanced stages");
    plan.chunks = p == 1 ? 1 : (schedule.virtual_stages ? p * opt.virtual_stages : p);
  }
  plan.pipeline = p;
  plan.schedule = p == 1 ? nullptr : &schedule;
  const int v = plan.virtual_stages();
  EPL_CHECK(v == 1 || schedule.virtual_stages, "pipeline.num_stages = ", p, " ranks hold ", plan.chunks, " stages, ", v,
            " each: that needs pipeline.strategy=Interleaved (", schedule.name,
            schedule.label != schedule.name ? " (" + std::string(schedule.label) + ")" : std::string(), ", the schedule this run has, "
            "runs one stage per rank)");
  // named both ways: "PreferBackward (1F1B)", whichever of the two the user wrote (the key holds EPL's name)
  EPL_CHECK(!opt.schedule_given || p > 1 || opt.auto_parallel, "pipeline.strategy = ", opt.schedule,
            schedule.label != schedule.name ? " (" + std::string(schedule.label) + ")" : std::string(), " is given, but this run has "
            "no pipeline (pipeline.num_stages = 1) for it to schedule; leave the key unset, or run a pipeline (an epl::Pipeline "
            "model, or pipeline.num_stages above 1 with auto.auto_parallel=true)");
  EPL_CHECK(!opt.virtual_stages_given || p > 1, "pipeline.num_virtual_stages = ", opt.virtual_stages,
            ", but this run has no pipeline (pipeline.num_stages = 1) for it to shape; leave the key unset, or run a "
            "pipeline of pipeline.strategy=Interleaved");
  EPL_CHECK(!opt.virtual_stages_given || (schedule.virtual_stages && v == opt.virtual_stages),
            "pipeline.num_virtual_stages = ", opt.virtual_stages, ", but ",
            !schedule.virtual_stages
                ? std::string("it applies to pipeline.strategy=Interleaved only; set that, or leave the key unset")
                : "the model's " + std::to_string(plan.chunks) + " stages (an epl::Pipeline type) on "
                  "pipeline.num_stages = " + std::to_string(p) + " ranks make " + std::to_string(v) + " per rank; leave the "
                  "key unset (the Pipeline type's stages decide it), or set it to " + std::to_string(v));
  EPL_CHECK(p == 1 || !schedule.virtual_stages || v >= 2, "pipeline.strategy=", schedule.name, " runs several stages per rank, but "
            "the model's ", plan.chunks, " stages on pipeline.num_stages = ", p, " ranks make ", v, " per rank; use PreferBackward, "
            "or declare ", 2 * p, " or more stages");
}
}  // namespace detail

namespace detail {
// cluster.rank_speeds: a data-parallel rank's share is its slowest rank's speed; a pipeline rank's
// speed (for the stage cut) its slowest rank's.
inline void plan_speeds(const ModelStructure& model, const PlanOptions& opt, int world_size, Plan& plan) {
  const auto& v = opt.rank_speeds;
  if (v.empty()) return;
  EPL_CHECK(static_cast<int>(v.size()) == world_size, "cluster.rank_speeds gives ", v.size(), " speed", v.size() == 1 ? "" : "s", " for ",
            world_size, " ranks; give one per rank (\"1,0.5\": rank 1 half as fast), or \"measure\"");
  for (std::size_t r = 0; r < v.size(); ++r)
    EPL_CHECK(std::isfinite(v[r]) && v[r] > 0, "cluster.rank_speeds: rank ", r, "'s speed ", v[r], " is not a positive finite number");
  const double fastest = *std::max_element(v.begin(), v.end());
  for (std::size_t r = 0; r < v.size(); ++r)
    EPL_CHECK(v[r] >= 1e-6 * fastest, "cluster.rank_speeds: rank ", r, "'s speed ", v[r], " is below a millionth of the fastest's (",
              fastest, "); a rank that slow cannot take a share of the batch");
  EPL_CHECK(!plan.rows_over_tensor(), "cluster.rank_speeds with a split colocated with (or placed beside) a replicated part: "
            "their ranks read rows of one group together, which uneven shares cannot divide; leave cluster.rank_speeds unset");
  const int data = world_size / (plan.pipeline * plan.tensor);
  plan.data_weights.assign(static_cast<std::size_t>(data), 0.0);
  plan.stage_speeds.assign(static_cast<std::size_t>(plan.pipeline), 0.0);
  for (int r = 0; r < world_size; ++r) {
    const auto c = strategy::coord_of(plan.mesh_shape(), data, r);
    const double speed = v[static_cast<std::size_t>(r)];
    auto& d = plan.data_weights[static_cast<std::size_t>(c.data)];
    auto& s = plan.stage_speeds[static_cast<std::size_t>(c.pipeline)];
    d = d == 0 ? speed : std::min(d, speed);
    s = s == 0 ? speed : std::min(s, speed);
  }
  if (data == 1) plan.data_weights.clear();
  if (plan.pipeline == 1 || model.is_pipeline || plan.cut_at_split) plan.stage_speeds.clear();  // a declared cut stays
}
}  // namespace detail

EPL_LINKED Plan make(const PlanOptions& opt, int world_size, const ModelStructure& model, const policy::Compiled& compiled) {
  EPL_CHECK(world_size >= 1, "plan::make: a world of ", world_size, " ranks; a run has at least one");
  EPL_CHECK(model.tensor >= 1 && model.devices_per_stage >= 1 && model.declared_stages >= 1, "plan::make: the model structure's "
            "tensor = ", model.tensor, ", devices_per_stage = ", model.devices_per_stage, " and declared_stages = ", model.declared_stages,
            " are device and stage counts, at least 1 each; plan::structure_of<Model>() gives a model type's");
  EPL_CHECK(model.is_pipeline || model.declared_stages == 1, "plan::make: the model structure declares ", model.declared_stages,
            " stages but is not a Pipeline type (is_pipeline = false); a model that is not an epl::Pipeline declares 1");
  Plan plan;
  plan.micro_batches = opt.micro_batches;
  plan.prefer_intra_node = opt.prefer_intra_node;
  plan.tensor = model.tensor;
  plan.sequence_parallel = opt.sequence_parallel && plan.tensor > 1;
  EPL_CHECK(!opt.sequence_parallel || plan.tensor > 1, "split.sequence_parallel=true, but the model has no epl::Split<N, ...> "
            "part with N > 1 to run sequence-parallel; leave the key at false or split the model's blocks");

  plan.devices_per_stage = model.devices_per_stage;
  const auto& schedule = strategy::schedule_named(opt.schedule);
  const int p = detail::place_replicate_and_split(model, opt, schedule, plan);
  EPL_CHECK(!(opt.sequence_parallel && plan.rows_over_tensor()), "split.sequence_parallel with an epl::Replicate<", plan.devices_per_stage,
            ", ...> part beside the epl::Split<", plan.tensor, ", ...> part (", plan.colocated ? "colocated by cluster.colocate_split_and_replicate"
            : "on separate ranks, EPL's placement", "): the Split's input is the replicated ranks' own rows, gathered at its entry, not "
            "one sequence to cut; set split.sequence_parallel=false, or replicate that part over one device (Replicate<1, ...>)");
  detail::plan_pipeline(model, opt, schedule, p, plan);
  const int t = plan.tensor, d = plan.devices_per_stage, per_stage = std::max(d, t), per_replica = plan.pipeline * per_stage;
  EPL_CHECK(world_size % per_replica == 0, "world size ", world_size, " cannot hold replicas of ", per_replica, " devices each (",
            plan.pipeline, " pipeline stage", plan.pipeline > 1 ? "s" : "", " x ",
            t > 1 ? "Split<" + std::to_string(t) : "Replicate<" + std::to_string(d), ", ...>); use a world size that is a multiple of ",
            per_replica, model.is_pipeline && plan.pipeline > 1 ? ", or pipeline.num_stages=1 to run every stage on each rank" : "",
            plan.separate ? ", or cluster.colocate_split_and_replicate=true to run the Replicate and Split parts on the same "
                            "devices" : "");
  (void)plan.actions(0);  // the schedule's own checks (micro-batches a multiple of p for Interleaved)
  detail::plan_speeds(model, opt, world_size, plan);
  plan.policies = policy::decide(opt.policies, compiled,
                                 {.rows_over_tensor = plan.rows_over_tensor(), .chunks = plan.chunks,
                                  .marks_recompute = model.marks_recompute});
  EPL_CHECK(!plan.schedule || !plan.schedule->splits_backward || plan.policies.zero_stage < 2, "pipeline.strategy=",
            plan.schedule ? plan.schedule->name : "", " leaves each layer's weight gradients for a later W pass, but ZeRO stage ",
            plan.policies.zero_stage, " (", opt.policies.zero_level ? "zero.level " + *opt.policies.zero_level : "zero.level unset: the "
            "program's epl::Zero<" + std::to_string(plan.policies.zero_stage) + ">", plan.policies.offload ? ", with offload" : "",
            ") reduce-scatters them as each layer's backward ends; use zero.level \"\" or \"v0\" with it, or "
            "pipeline.strategy=PreferBackward");
  return plan;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
