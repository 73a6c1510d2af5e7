#pragma once
/// \file
/// \brief plan::Plan — what a training run does on its world, decided before anything is
/// allocated: the mesh's shape, the model cut into chunks (pipeline stages, counting virtual
/// ones) and which rank runs which, and the schedule. plan::make checks the model type, the
/// configuration and the world size against each other, and names the fix when they do not fit
/// (CUTLASS's can_implement, before run).
#include <string>
#include <vector>

#include "epl/strategy/mesh.hpp"
#include "epl/strategy/pipeline.hpp"
#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief The pipeline schedules of pipeline.strategy.
enum class Schedule : std::uint8_t { kAccumulate, kGPipe, kOneFOneB, kInterleaved };

/// \brief A run's plan on a world of a given size.
struct Plan {
  int pipeline = 1;          ///< ranks along the pipeline axis (p)
  int chunks = 1;            ///< model chunks: pipeline stages, counting virtual ones (p v)
  int devices_per_stage = 1; ///< Replicate<D, ...>: the ranks of one stage in a model replica
  int micro_batches = 1;     ///< pipeline.num_micro_batch
  Schedule schedule = Schedule::kAccumulate;
  bool prefer_intra_node = true;

  [[nodiscard]] int virtual_stages() const noexcept { return chunks / pipeline; }
  [[nodiscard]] strategy::MeshShape mesh_shape() const { return {pipeline, 1, prefer_intra_node}; }
  /// \brief The chunks of pipeline rank `stage`: stage, stage + p, ...
  [[nodiscard]] std::vector<int> chunks_of(int stage) const {
    std::vector<int> out;
    for (int c = stage; c < chunks; c += pipeline) out.push_back(c);
    return out;
  }
  /// \brief Pipeline rank `stage`'s actions for one step: the schedule's forwards and backwards
  /// with the sends and receives they imply.
  [[nodiscard]] std::vector<strategy::Action> actions(int stage) const {
    std::vector<strategy::Action> compute;
    switch (schedule) {
      case Schedule::kAccumulate: compute = strategy::Accumulate(micro_batches).actions(0, 1); break;
      case Schedule::kGPipe: compute = strategy::GPipe(micro_batches).actions(stage, pipeline); break;
      case Schedule::kOneFOneB: compute = strategy::OneFOneB(micro_batches).actions(stage, pipeline); break;
      case Schedule::kInterleaved: compute = strategy::Interleaved(micro_batches, virtual_stages()).actions(stage, pipeline); break;
    }
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
  std::string schedule = "PreferBackward";  ///< pipeline.strategy
  int virtual_stages = 2;            ///< pipeline.num_virtual_stages
  bool auto_parallel = false;        ///< auto.auto_parallel
  bool prefer_intra_node = true;     ///< cluster.device_place_prefer_intra_node
};

/// \brief The plan of Model on a world of world_size ranks; an epl::Error names what does not
/// fit and the fix.
template <class Model>
Plan make(const PlanOptions& opt, int world_size) {
  Plan plan;
  plan.micro_batches = opt.micro_batches;
  plan.prefer_intra_node = opt.prefer_intra_node;
  const std::string& schedule = opt.schedule;
  int p = opt.stages;
  if constexpr (is_pipeline_v<Model>) {
    // A Pipeline type runs one stage per rank unless pipeline.num_stages says otherwise.
    if (!opt.stages_given) p = Model::kStages;
    EPL_CHECK(Model::kStages % p == 0, "the model has ", Model::kStages, " pipeline stages (epl::Pipeline<...>), which do "
              "not divide among pipeline.num_stages = ", p, " pipeline ranks; use a divisor of ", Model::kStages);
    plan.chunks = p == 1 ? 1 : Model::kStages;
    plan.devices_per_stage = Model::kDevicesPerStage;
  } else {
    EPL_CHECK(p == 1 || opt.auto_parallel, "pipeline.num_stages = ", p, " needs stages: declare the model as "
              "epl::Pipeline<epl::Replicate<1, ...>, ...>, or set auto.auto_parallel=true to cut it into ", p,
              " balanced stages");
    plan.chunks = p == 1 ? 1 : (schedule == "Interleaved" ? p * opt.virtual_stages : p);
    plan.devices_per_stage = devices_per_replica_v<Model>;
  }
  plan.pipeline = p;
  const int v = plan.virtual_stages();
  if (p == 1) plan.schedule = Schedule::kAccumulate;
  else if (schedule == "PreferForward") plan.schedule = Schedule::kGPipe;
  else if (schedule == "PreferBackward") plan.schedule = Schedule::kOneFOneB;
  else plan.schedule = Schedule::kInterleaved;
  EPL_CHECK(v == 1 || plan.schedule == Schedule::kInterleaved, "pipeline.num_stages = ", p, " ranks hold ", plan.chunks,
            " stages, ", v, " each: that needs pipeline.strategy=Interleaved (PreferForward and PreferBackward run one "
            "stage per rank)");
  EPL_CHECK(plan.schedule != Schedule::kInterleaved || v >= 2, "pipeline.strategy=Interleaved runs several stages per rank, but "
            "the model's ", plan.chunks, " stages on pipeline.num_stages = ", p, " ranks make ", v, " per rank; use PreferBackward, "
            "or declare ", 2 * p, " or more stages");
  const int per_replica = p * plan.devices_per_stage;
  EPL_CHECK(world_size % per_replica == 0, "world size ", world_size, " cannot hold replicas of ", per_replica, " devices each (",
            p, " pipeline stage", p > 1 ? "s" : "", " x Replicate<", plan.devices_per_stage, ", ...>); use a world size that is a "
            "multiple of ", per_replica, is_pipeline_v<Model> && p > 1 ? ", or pipeline.num_stages=1 to run every stage on each rank" : "");
  (void)plan.actions(0);  // the schedule's own checks (micro-batches a multiple of p for Interleaved)
  return plan;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
