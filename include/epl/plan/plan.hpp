#pragma once
/// \file
/// \brief plan::Plan — what a training run does on its world, decided before anything is
/// allocated: the mesh's shape, the model cut into chunks (pipeline stages, counting virtual
/// ones) and which rank runs which, and the schedule. plan::make checks the model type, the
/// configuration and the world size against each other, and names the fix when they do not fit
/// (CUTLASS's can_implement, before run).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "epl/nn/recompute.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/zero.hpp"
#include "epl/policy/setup.hpp"
#include "epl/strategy/mesh.hpp"
#include "epl/strategy/pipeline.hpp"
#include "epl/strategy/schedule.hpp"
#include "epl/strategy/units.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
// The degree two parts of a model agree on: 1 when one has none, -1 when they differ.
constexpr int combine_degree(int a, int b) { return a == 1 ? b : b == 1 ? a : a == b ? a : -1; }
// The device count of the strategy nodes of kind K (kSplit, kReplicate) in model type M, found
// by walking the type's node kinds: 1 when there are none, -1 when two differ, -2 when one lies
// inside another of its kind.
template <nn::NodeKind K, class M>
constexpr int degree_of();
template <nn::NodeKind K, class... C>
constexpr int degree_of_children(nn::type_list<C...>) {
  int d = 1;
  ((d = d < 0 ? d : degree_of<K, C>() < 0 ? degree_of<K, C>() : combine_degree(d, degree_of<K, C>())), ...);
  return d;
}
template <nn::NodeKind K, class M>
constexpr int degree_of() {
  using N = nn::node_traits<M>;
  constexpr int inner = degree_of_children<K>(typename N::children{});
  if constexpr (N::kind != K) return inner;
  else return inner == 1 ? N::degree : -2;
}
template <class T>
struct is_pipeline_node : std::bool_constant<nn::kind_of_v<T> == nn::NodeKind::kPipeline> {};
}  // namespace detail

/// \brief True, or a compile error when an epl::Pipeline is a part of a model rather than the
/// model itself (its stages would run as plain layers: data parallel, silently).
template <class Model>
inline constexpr bool pipeline_at_top_v = [] {
  static_assert(!nn::contains_below_v<Model, detail::is_pipeline_node>,
                "epl: an epl::Pipeline<Stages...> must be the model itself (the Trainer's Model type), not a field or part of "
                "it: declare the whole model as the Pipeline, its first stage holding the layers before, its last the layers "
                "after");
  return true;
}();

/// \brief The tensor-parallel degree of a model type: the N of its epl::Split parts (1: none).
/// Every Split of a model uses the same N, and a Split holds no Split (compile errors).
template <class Model>
inline constexpr int tensor_degree_v = [] {
  constexpr int d = detail::degree_of<nn::NodeKind::kSplit, Model>();
  static_assert(d != -1, "epl: the epl::Split parts of this model use different device counts; every Split of a model "
                         "spans the same N devices (the mesh's tensor axis)");
  static_assert(d != -2, "epl: an epl::Split inside an epl::Split; a split group's layers are split once");
  return d;
}();
/// \brief The pipeline stages a model type declares: an epl::Pipeline's stage count, else 1.
template <class Model>
inline constexpr int declared_stages_v = [] {
  if constexpr (is_pipeline_v<Model>) return Model::kStages;
  else return 1;
}();
/// \brief The devices of a model type's epl::Replicate<D, ...> parts (1: none, or D = 1).
template <class Model>
inline constexpr int replicate_degree_v = [] {
  constexpr int d = detail::degree_of<nn::NodeKind::kReplicate, Model>();
  static_assert(d != -1, "epl: the epl::Replicate parts of this model use different device counts; give them the same D");
  static_assert(d != -2, "epl: an epl::Replicate inside an epl::Replicate; replicate a part once");
  return d;
}();

/// \brief A run's plan on a world of a given size.
struct Plan {
  int pipeline = 1;          ///< ranks along the pipeline axis (p)
  int tensor = 1;            ///< ranks along the tensor axis: the N of the model's epl::Split parts
  int chunks = 1;            ///< model chunks: pipeline stages, counting virtual ones (p v)
  int devices_per_stage = 1; ///< Replicate<D, ...>: the ranks of one stage in a model replica
  int micro_batches = 1;     ///< pipeline.num_micro_batch
  /// pipeline.strategy's schedule; null with one pipeline rank (gradient accumulation)
  const strategy::ScheduleEntry* schedule = nullptr;
  bool prefer_intra_node = true;
  /// Replicate<N, ...> and Split<N, ...> on the same N ranks (cluster.colocate_split_and_replicate):
  /// the replicated part runs data parallel over the tensor axis, on its own rows.
  bool colocated = false;
  /// split.sequence_parallel: the token-wise layers between a Split's tensor-parallel blocks run
  /// on each rank's part of the sequence (plan::shard_model).
  bool sequence_parallel = false;
  /// Replicate<N, ...> and Split<N, ...> on separate ranks (EPL's placement without the key): two
  /// pipeline stages, the replicated part's ranks data parallel over their tensor axis.
  bool separate = false;
  /// The model's first part cut at its first Split (separate placement of a model that is not a
  /// Pipeline type).
  bool cut_at_split = false;
  /// What the policies do (ZeRO, offload, AMP, recompute, communication), decided with the plan.
  policy::Setup policies;
  /// Uneven devices (cluster.rank_speeds): each data-parallel rank's share of the batch (the
  /// slowest of its ranks' speeds), and each pipeline rank's speed for the stage cut (the slowest
  /// of its ranks'). Empty: even.
  std::vector<double> data_weights, stage_speeds;

  /// \brief The replicated part runs data parallel over the tensor axis: each rank of a split
  /// group reads rows of its own, gathered at the Split.
  [[nodiscard]] bool rows_over_tensor() const noexcept { return colocated || separate; }
  [[nodiscard]] int virtual_stages() const noexcept { return chunks / pipeline; }
  [[nodiscard]] strategy::MeshShape mesh_shape() const { return {pipeline, tensor, prefer_intra_node}; }
  /// \brief The chunks of pipeline rank `stage`: stage, stage + p, ...
  [[nodiscard]] std::vector<int> chunks_of(int stage) const {
    std::vector<int> out;
    for (int c = stage; c < chunks; c += pipeline) out.push_back(c);
    return out;
  }
  /// \brief Pipeline rank `stage`'s actions for one step: the schedule's forwards and backwards
  /// with the sends and receives they imply.
  [[nodiscard]] std::vector<strategy::Action> actions(int stage) const {
    const auto compute = schedule ? schedule->actions(micro_batches, virtual_stages(), stage, pipeline)
                                  : strategy::Accumulate(micro_batches).actions(0, 1);
    return strategy::with_communication(compute, pipeline, chunks);
  }
  /// \brief One forward through every chunk of pipeline rank `stage`, micro-batch 0 (evaluation).
  [[nodiscard]] std::vector<strategy::Action> forward_only(int stage) const {
    std::vector<strategy::Action> compute;
    for (int c = 0; c < chunks; ++c)
      if (c % pipeline == stage) compute.push_back({strategy::Action::Kind::kForward, 0, c});
    return strategy::with_communication(compute, pipeline, chunks);
  }
};

/// \brief What a plan is made from: the configuration keys that shape it (the Trainer reads
/// them from epl::Config; the messages name the keys).
struct PlanOptions {
  int micro_batches = 1;             ///< pipeline.num_micro_batch
  int stages = 1;                    ///< pipeline.num_stages
  bool stages_given = false;         ///< pipeline.num_stages was set (else a Pipeline type's own count)
  std::string schedule{strategy::kDefaultSchedule.name};  ///< pipeline.strategy
  int virtual_stages = 2;            ///< pipeline.num_virtual_stages
  bool virtual_stages_given = false; ///< pipeline.num_virtual_stages was set (it must then be what runs)
  bool schedule_given = false;       ///< pipeline.strategy was set (a run without a pipeline then has it to no effect)
  bool auto_parallel = false;        ///< auto.auto_parallel
  bool prefer_intra_node = true;     ///< cluster.device_place_prefer_intra_node
  bool colocate = false;             ///< cluster.colocate_split_and_replicate
  bool sequence_parallel = false;    ///< split.sequence_parallel
  std::vector<double> rank_speeds = {};  ///< cluster.rank_speeds: each world rank's relative speed (empty: even)
  policy::Keys policies = {};        ///< the keys of ZeRO, offload, AMP, recompute and communication
};

namespace detail {
// Replicate<N, ...> beside Split<N, ...>: colocated on the same ranks (the key) or, EPL's
// placement, on separate ranks (2 pipeline stages of a model that is not a Pipeline type).
template <class Model>
int place_replicate_and_split(const PlanOptions& opt, const strategy::ScheduleEntry& schedule, Plan& plan) {
  int p = opt.stages;
  const int t = plan.tensor, d = plan.devices_per_stage;
  if (t > 1 && d > 1) {
    EPL_CHECK(d == t, "the model has epl::Replicate<", d, ", ...> and epl::Split<", t, ", ...> parts; a replicated part feeds a "
              "split one with the same device count: give both the same N");
    if (opt.colocate) {
      plan.colocated = true;
    } else {  // EPL's placement: the replicated part on N devices, the split part on N others
      plan.separate = true;
      if constexpr (!is_pipeline_v<Model>) {
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
template <class Model>
void plan_pipeline(const PlanOptions& opt, const strategy::ScheduleEntry& schedule, int p, Plan& plan) {
  if constexpr (is_pipeline_v<Model>) {
    // A Pipeline type runs one stage per rank unless pipeline.num_stages says otherwise.
    if (!opt.stages_given) p = Model::kStages;
    EPL_CHECK(Model::kStages % p == 0, "the model has ", Model::kStages, " pipeline stages (epl::Pipeline<...>), which do "
              "not divide among pipeline.num_stages = ", p, " pipeline ranks; use a divisor of ", Model::kStages);
    plan.chunks = p == 1 ? 1 : Model::kStages;
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
            " each: that needs pipeline.strategy=Interleaved (PreferForward and PreferBackward run one stage per rank)");
  EPL_CHECK(!opt.schedule_given || p > 1 || opt.auto_parallel, "pipeline.strategy = ", opt.schedule, " is given, but this run has "
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
template <class Model>
void plan_speeds(const PlanOptions& opt, int world_size, Plan& plan) {
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
  if (plan.pipeline == 1 || is_pipeline_v<Model> || plan.cut_at_split) plan.stage_speeds.clear();  // a declared cut stays
}
}  // namespace detail

/// \brief The plan of Model with the policies Policy (an epl::Policies<...> list) on a world of
/// world_size ranks, on a device that computes in f64 or not: the one can_implement of a run.
/// Each strategy's and each policy's check runs here, before anything is allocated; an
/// epl::Error names what does not fit and the fix.
template <class Model, class Policy = Policies<>>
Plan make(const PlanOptions& opt, int world_size, bool f64 = false) {
  static_assert(pipeline_at_top_v<Model>);
  Plan plan;
  plan.micro_batches = opt.micro_batches;
  plan.prefer_intra_node = opt.prefer_intra_node;
  plan.tensor = tensor_degree_v<Model>;
  plan.sequence_parallel = opt.sequence_parallel && plan.tensor > 1;
  EPL_CHECK(!opt.sequence_parallel || plan.tensor > 1, "split.sequence_parallel=true, but the model has no epl::Split<N, ...> "
            "part with N > 1 to run sequence-parallel; leave the key at false or split the model's blocks");

  plan.devices_per_stage = replicate_degree_v<Model>;
  const auto& schedule = strategy::schedule_named(opt.schedule);
  const int p = detail::place_replicate_and_split<Model>(opt, schedule, plan);
  EPL_CHECK(!(opt.sequence_parallel && plan.rows_over_tensor()), "split.sequence_parallel with an epl::Replicate<", plan.devices_per_stage,
            ", ...> part beside the epl::Split<", plan.tensor, ", ...> part (", plan.colocated ? "colocated by cluster.colocate_split_and_replicate"
            : "on separate ranks, EPL's placement", "): the Split's input is the replicated ranks' own rows, gathered at its entry, not "
            "one sequence to cut; set split.sequence_parallel=false, or replicate that part over one device (Replicate<1, ...>)");
  detail::plan_pipeline<Model>(opt, schedule, p, plan);
  const int t = plan.tensor, d = plan.devices_per_stage, per_stage = std::max(d, t), per_replica = plan.pipeline * per_stage;
  EPL_CHECK(world_size % per_replica == 0, "world size ", world_size, " cannot hold replicas of ", per_replica, " devices each (",
            plan.pipeline, " pipeline stage", plan.pipeline > 1 ? "s" : "", " x ",
            t > 1 ? "Split<" + std::to_string(t) : "Replicate<" + std::to_string(d), ", ...>); use a world size that is a multiple of ",
            per_replica, is_pipeline_v<Model> && plan.pipeline > 1 ? ", or pipeline.num_stages=1 to run every stage on each rank" : "",
            plan.separate ? ", or cluster.colocate_split_and_replicate=true to run the Replicate and Split parts on the same "
                            "devices" : "");
  (void)plan.actions(0);  // the schedule's own checks (micro-batches a multiple of p for Interleaved)
  detail::plan_speeds<Model>(opt, world_size, plan);
  plan.policies = policy::decide(opt.policies, policy::compiled<Policy>(f64),
                                 {.rows_over_tensor = plan.rows_over_tensor(), .chunks = plan.chunks,
                                  .marks_recompute = nn::has_recompute_v<Model>});
  EPL_CHECK(!plan.schedule || !plan.schedule->splits_backward || plan.policies.zero_stage < 2, "pipeline.strategy=",
            plan.schedule ? plan.schedule->name : "", " leaves each layer's weight gradients for a later W pass, but ZeRO stage ",
            plan.policies.zero_stage, " (", opt.policies.zero_level ? "zero.level " + *opt.policies.zero_level : "zero.level unset: the "
            "program's epl::Zero<" + std::to_string(plan.policies.zero_stage) + ">", plan.policies.offload ? ", with offload" : "",
            ") reduce-scatters them as each layer's backward ends; use zero.level \"\" or \"v0\" with it, or "
            "pipeline.strategy=PreferBackward");
  return plan;
}

/// \brief Pipeline rank `stage`'s chunks of model (chunk c of the plan's on rank c % p), as units
/// run in passes of type Pass; under gradient_checkpoint.type = "auto", with the segments they
/// recompute chosen.
template <class Pass, class Model>
std::vector<strategy::Chunk<Pass>> local_chunks(Model& model, const Plan& plan, int stage) {
  std::vector<double> speeds;  // chunk c runs on pipeline rank c % p
  for (int c = 0; c < plan.chunks && !plan.stage_speeds.empty(); ++c) speeds.push_back(plan.stage_speeds[static_cast<std::size_t>(c % plan.pipeline)]);
  auto all = plan.cut_at_split ? strategy::cut_at_first_split<Pass>(model) : strategy::cut_into_chunks<Pass>(model, plan.chunks, speeds);
  std::vector<strategy::Chunk<Pass>> mine;
  const auto ids = plan.chunks_of(stage);
  for (int c : ids) mine.push_back(std::move(all[static_cast<std::size_t>(c)]));
  if (plan.policies.recompute == nn::RecomputeMode::kSegments)
    strategy::choose_recompute_segments(mine, ids, plan.chunks, plan.policies.end_taskgraph, stage);
  return mine;
}

/// \brief How a rank's arena is laid out: the parameters of its chunks (`local`, chunks `ids` of
/// the plan's), in ZeRO's blocks over `data_size` ranks when the plan shards; values drawn from
/// `seed`. The Trainer materializes with it and predict_state lays out with it.
template <class Pass>
param::MaterializeOptions arena_options(const std::vector<strategy::Chunk<Pass>>& local, const std::vector<int>& ids, const Plan& plan,
                                        int data_size, std::uint64_t seed) {
  std::unordered_map<const nn::Parameter*, int> chunk_of;
  for (std::size_t j = 0; j < local.size(); ++j) local[j].for_each_parameter([&](nn::Parameter& q) { chunk_of[&q] = ids[j]; });
  param::MaterializeOptions mo{.dtype = plan.policies.dtype, .seed = seed};
  mo.owned = [owned = std::make_shared<const std::unordered_map<const nn::Parameter*, int>>(chunk_of)](const nn::Parameter& q) {
    return owned->count(&q) > 0;
  };
  if (plan.policies.zero_stage > 0) policy::zero_layout(mo, data_size, plan.policies.max_splits, std::move(chunk_of));
  return mo;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
