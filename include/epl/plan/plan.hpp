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

#include "epl/core/linked.hpp"
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

/// \brief What plan::make reads of a model type: its strategy nodes' degrees and whether it is a
/// Pipeline type. The plan is made from these and the options alone, so its checks are compiled
/// once (in epl::precompiled when linked), not once per model type.
struct ModelStructure {
  int tensor = 1;              ///< tensor_degree_v: the N of the model's epl::Split parts
  int devices_per_stage = 1;   ///< replicate_degree_v: the D of its epl::Replicate<D, ...> parts
  bool is_pipeline = false;    ///< an epl::Pipeline type
  int declared_stages = 1;     ///< declared_stages_v: a Pipeline type's stage count, else 1
  bool marks_recompute = false;  ///< an epl::Recompute part (gradient_checkpoint.type="collection" has marks)
};
/// \brief The structure of model type Model, checked (an epl::Pipeline at its top, one Split
/// degree, one Replicate degree).
template <class Model>
constexpr ModelStructure structure_of() {
  static_assert(pipeline_at_top_v<Model>);
  return {.tensor = tensor_degree_v<Model>, .devices_per_stage = replicate_degree_v<Model>, .is_pipeline = is_pipeline_v<Model>,
          .declared_stages = declared_stages_v<Model>, .marks_recompute = nn::has_recompute_v<Model>};
}

/// \brief The plan of a model of structure `model` with the policies a program compiled, on a
/// world of world_size ranks: the one can_implement of a run. Each strategy's and each policy's
/// check runs here, before anything is allocated; an epl::Error names what does not fit and the fix.
EPL_LINKED Plan make(const PlanOptions& opt, int world_size, const ModelStructure& model, const policy::Compiled& compiled);

/// \brief The plan of Model with the policies Policy (an epl::Policies<...> list) on a world of
/// world_size ranks, on a device that computes in f64 or not.
template <class Model, class Policy = Policies<>>
Plan make(const PlanOptions& opt, int world_size, bool f64 = false) {
  return make(opt, world_size, structure_of<Model>(), policy::compiled<Policy>(f64));
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

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/plan/plan.ipp"
#endif
