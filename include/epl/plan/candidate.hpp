#pragma once
/// \file
/// \brief plan::Candidate (one combination of the mesh's axes, the schedule and the policies, as
/// configuration keys) and plan::Estimate (what it is predicted to cost its busiest rank).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "epl/plan/plan.hpp"
#include "epl/plan/state.hpp"
#include "epl/policy/axes.hpp"
#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief One combination as the searches' shared loop gives it (plan::for_each_combination),
/// usable in a constant expression: the axes of the mesh, the schedule and the policies.
struct Combination {
  int data = 1, pipeline = 1, micro_batches = 1;
  const strategy::ScheduleEntry* schedule = &strategy::kDefaultSchedule;  ///< the default on one stage
  int virtual_stages = 1;  ///< chunks per rank: 2 for a schedule of virtual stages, else 1
  policy::Choice policies = {};  ///< the policy axes' values (policy/axes.hpp): zero, offload, recompute, amp
};

/// \brief One combination: the axes of the mesh, the schedule and the policies.
struct Candidate {
  int data = 1, pipeline = 1, micro_batches = 1;
  int tensor = 1;                           ///< the model type's epl::Split degree (set by estimate; a type, not a key)
  std::string schedule{strategy::kDefaultSchedule.name};  ///< pipeline.strategy (when pipeline > 1)
  int virtual_stages = 2;                   ///< Interleaved's chunks per rank
  /// The policy axes' values (policy/axes.hpp): policies.zero (ZeRO stage: zero.level "", v0, v1,
  /// v2), policies.offload (offload.level = "v0"), policies.recompute (gradient_checkpoint.type =
  /// "auto"), policies.amp (amp.level = "O1", the compiled epl::Amp's dtype).
  policy::Choice policies = {};
  /// \brief The candidate of a combination of the shared loop, for a model split `tensor` ways.
  [[nodiscard]] static Candidate of(const Combination& c, int tensor = 1) {
    return {.data = c.data, .pipeline = c.pipeline, .micro_batches = c.micro_batches, .tensor = tensor,
            .schedule = std::string(c.schedule->name), .virtual_stages = c.virtual_stages > 1 ? c.virtual_stages : 2, .policies = c.policies};
  }
  /// \brief The configuration keys that run it (key, value), for epl::Config::set.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> keys() const {
    std::vector<std::pair<std::string, std::string>> k{{"pipeline.num_micro_batch", std::to_string(micro_batches)},
                                                       {"pipeline.num_stages", std::to_string(pipeline)}};
    policy::append_keys(policies, k);
    if (pipeline > 1) {
      k.push_back({"pipeline.strategy", schedule});
      k.push_back({"auto.auto_parallel", "true"});
      if (const auto* e = strategy::find_schedule(schedule); e && e->virtual_stages) k.push_back({"pipeline.num_virtual_stages", std::to_string(virtual_stages)});
    }
    return k;
  }
  /// \brief A short name: dp2 pp2 m4 1F1B zero1 rc.
  [[nodiscard]] std::string str() const {
    std::string s = "dp" + std::to_string(data) + (tensor > 1 ? " tp" + std::to_string(tensor) : std::string()) + " pp" +
                    std::to_string(pipeline) + " m" + std::to_string(micro_batches);
    if (pipeline > 1) {
      const auto* e = strategy::find_schedule(schedule);
      s += " " + (e ? std::string(e->label) : schedule) + (e && e->virtual_stages ? std::to_string(virtual_stages) : std::string());
    }
    return s + policy::label(policies);
  }
  /// \brief The plan options of this candidate (the rest as in `base`).
  [[nodiscard]] PlanOptions options(PlanOptions base = {}) const {
    base.micro_batches = micro_batches;
    base.stages = pipeline;
    base.stages_given = true;  // an epl::Pipeline type on one rank too: what was priced is what runs
    if (pipeline > 1 || !base.schedule_given) base.schedule = schedule;  // a run's given one stays, for a plan of no pipeline to name
    base.virtual_stages = virtual_stages;
    const auto* e = strategy::find_schedule(schedule);
    base.virtual_stages_given = pipeline > 1 && e && e->virtual_stages;
    base.auto_parallel = pipeline > 1;
    policy::apply(policies, base.policies);
    return base;
  }
};

/// \brief What a candidate is predicted to cost its busiest rank, per step.
struct Estimate {
  Candidate candidate;
  StateBytes state;                ///< the largest of any rank (exact)
  std::int64_t activations = 0;    ///< peak activation bytes of the rank that holds most
  InFlightBytes in_flight;         ///< ZeRO's blocks a step holds beyond the state, the most of any rank
  std::int64_t data_bytes = 0;     ///< gradient bytes a rank sends to its data-parallel group (ring)
  std::int64_t pipeline_bytes = 0; ///< activation and gradient bytes a stage sends on
  std::int64_t tensor_bytes = 0;   ///< bytes a rank's split group all-reduces per step (epl::Split)
  double flops = 0;                ///< multiply-adds x 2 of the busiest rank (forward, backward, recompute)
  double bubble = 0;               ///< the fraction of the step a stage idles: (p - 1) / (v m + p - 1)
  double compute_seconds = 0, data_seconds = 0, pipeline_seconds = 0;
  double tensor_seconds = 0;       ///< the split group's all-reduces of the busiest rank (part of compute_seconds' path)
  double host_seconds = 0;         ///< offload: the shards' parameters and gradients moved between host and device
  double seconds = 0;              ///< predicted step time
  std::int64_t rows = 0;           ///< the global batch it was priced for, rows a step (0: not given)
  /// \brief A rank's peak on the device: the state between steps, the activations' peak and ZeRO's
  /// blocks in flight (each part's peak, added: a bound on their sum's).
  [[nodiscard]] std::int64_t device_bytes() const noexcept { return state.device() + activations + in_flight.total(); }
  /// \brief The largest of parameters, gradients, optimizer state, activations and ZeRO's blocks
  /// in flight, by name.
  [[nodiscard]] std::string biggest() const {
    const std::pair<std::int64_t, const char*> parts[] = {{state.parameters, "parameters"},
                                                          {state.gradients, "gradients"},
                                                          {state.optimizer_state, "optimizer state"},
                                                          {activations, "activations"},
                                                          {in_flight.total(), "ZeRO blocks in flight (raise communication.max_splits)"}};
    return std::max_element(std::begin(parts), std::end(parts))->second;
  }
};

}  // namespace plan
}  // namespace v0
}  // namespace epl
