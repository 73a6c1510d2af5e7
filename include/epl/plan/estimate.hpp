#pragma once
/// \file
/// \brief plan::estimate — what a candidate costs one rank, from a measured profile: the state
/// bytes exactly (plan::predict_state lays out each rank's arena), the activations from the
/// schedule's own action list, the time from the units' measured times priced by plan::price.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epl/core/linked.hpp"
#include "epl/device/cpu/cpu.hpp"
#include "epl/device/device.hpp"
#include "epl/param/arena.hpp"
#include "epl/plan/candidate.hpp"
#include "epl/plan/cluster.hpp"
#include "epl/plan/plan.hpp"
#include "epl/plan/price.hpp"
#include "epl/plan/profile.hpp"
#include "epl/plan/shard.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
// What a place of a plan holds: its state between steps, and ZeRO's blocks in flight during a step.
struct PlaceBytes {
  StateBytes state;
  InFlightBytes in_flight;
};
// The most blocks of `lay` one leaf layer's own parameters lie in (`order`: the layout's
// parameters): ZeRO's hooks gather a layer's blocks, and open their gradients, together. A leaf
// that holds parameters of its own keeps them while the leaves inside it run (nn::MoE's gate), so
// its span covers theirs too.
template <class Pass, class Model>
int layer_span(Model& model, const std::vector<nn::Parameter*>& order, const param::Layout& lay) {
  std::unordered_map<const nn::Parameter*, std::size_t> block_of;
  std::size_t b = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    while (b + 1 < lay.blocks.size() && lay.offsets[i] >= lay.blocks[b].end) ++b;
    block_of.emplace(order[i], b);
  }
  int span = 1;
  nn::visit_nodes(model, [&](std::string_view, auto& node) {
    if constexpr (nn::leaf_layer<std::remove_cvref_t<decltype(node)>, Pass>) {
      std::size_t lo = lay.blocks.size(), hi = 0;
      const auto widen = [&](nn::Parameter& p) {
        if (const auto it = block_of.find(&p); it != block_of.end()) {
          lo = std::min(lo, it->second);
          hi = std::max(hi, it->second);
        }
      };
      nn::for_each_own_parameter(node, widen);
      if (lo <= hi) nn::for_each_parameter(node, widen);  // with its own, the leaves it runs inside it
      if (lo <= hi) span = std::max(span, static_cast<int>(hi - lo + 1));
    }
  });
  return span;
}
// The elements of each of a rank's chunks' ZeRO blocks (its local chunks `ids`, as Plan::chunks_of
// gives them), in the arena's backward order: a block never holds two chunks' parameters.
inline std::vector<std::vector<std::int64_t>> blocks_by_chunk(const std::vector<nn::Parameter*>& order, const param::Layout& lay,
                                                              const param::MaterializeOptions& mo, const std::vector<int>& ids) {
  std::vector<std::vector<std::int64_t>> out(ids.size());
  std::size_t i = 0;  // the first parameter of each block
  for (const auto& block : lay.blocks) {
    while (i < order.size() && lay.offsets[i] < block.begin) ++i;
    const auto at = i < order.size() ? std::find(ids.begin(), ids.end(), mo.segment(*order[i])) : ids.end();
    out[at == ids.end() ? 0 : static_cast<std::size_t>(at - ids.begin())].push_back(block.size());
  }
  return out;
}
// The local chunk each backward pass of pipeline rank `stage` runs, in the schedule's order (one
// chunk a micro-batch where the plan has no pipeline).
inline std::vector<std::size_t> backward_visits(const Plan& plan, int stage) {
  const auto ids = plan.chunks_of(stage);
  std::vector<std::size_t> visits;
  for (const auto& a : plan.actions(stage))
    if (a.kind == strategy::Action::Kind::kBackward) {
      const auto at = std::find(ids.begin(), ids.end(), a.chunk);
      visits.push_back(at == ids.end() ? 0 : static_cast<std::size_t>(at - ids.begin()));
    }
  if (visits.empty()) visits.assign(static_cast<std::size_t>(std::max(plan.micro_batches, 1)), 0);
  return visits;
}
// Each place's bytes, as predict_state lays out its arena.
template <class Model, class Policy, class D>
std::vector<PlaceBytes> predict_places(const Model& model, const Plan& plan, int world_size, int slots) {
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;
  const int data = world_size / (plan.pipeline * plan.tensor);
  Plan cut = plan;
  cut.policies.recompute = nn::RecomputeMode::kMarked;  // the parameters a rank owns do not depend on what it recomputes
  const std::int64_t bytes = plan.policies.dtype == DType::kF64 ? 8 : 4;
  std::vector<PlaceBytes> out;
  for (int s = 0; s < plan.pipeline; ++s)
    for (int t = 0; t < plan.tensor; ++t) {
      Model copy = model;
      (void)shard_model(copy, nn::SplitPart{t, plan.tensor}, plan.rows_over_tensor());
      const auto chunks = local_chunks<Pass>(copy, cut, s);
      const auto mo = arena_options(chunks, plan.chunks_of(s), plan, data, 0);
      std::vector<nn::Parameter*> order;
      nn::for_each_parameter(copy, [&](nn::Parameter& p) {
        if (mo.owned(p)) order.push_back(&p);
      });
      std::reverse(order.begin(), order.end());  // the arena's backward order
      const auto lay = param::layout(order, mo);
      ZeroBlocks blocks;
      for (const auto& b : lay.blocks) blocks.push(b.end - b.begin);
      blocks.span = layer_span<Pass>(copy, order, lay);
      auto in_flight = in_flight_bytes(blocks, mo.shards, plan.policies.zero_stage, plan.policies.offload, plan.micro_batches, bytes);
      if (plan.policies.zero_stage >= 2 && mo.segment)  // the gradient blocks in the order the schedule runs the chunks' backward
        in_flight.gradients = gradient_blocks_in_flight(blocks_by_chunk(order, lay, mo, plan.chunks_of(s)), backward_visits(plan, s),
                                                        blocks.span + 2, mo.shards, plan.policies.offload) * bytes;
      // the optimizer's slots and the policies' (an EMA's copy), sharded alike
      out.push_back({state_bytes(lay.size, mo.shards, plan.policies.zero_stage, plan.policies.offload, slots + policy::state_slots(plan.policies), bytes),
                     in_flight});
    }
  return out;
}
}  // namespace detail

/// \brief The state bytes of each place of plan on a world of world_size ranks (index
/// stage * plan.tensor + tensor; every data-parallel rank of a place holds as much), for Model
/// trained by an optimizer of `slots` state values per element, as Trainer<Model, ..., Policy, ...,
/// D> lays it out. Nothing is drawn: a copy of the model is sharded and cut as each rank would.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
std::vector<StateBytes> predict_state(const Model& model, const Plan& plan, int world_size, int slots) {
  std::vector<StateBytes> out;
  for (const auto& place : detail::predict_places<Model, Policy, D>(model, plan, world_size, slots)) out.push_back(place.state);
  return out;
}

namespace detail {
// A unit as estimate prices it: its name, its parameters (the whole model's, and this rank's part
// of them) and what its split group all-reduces.
struct PricedUnit {
  std::string name;
  std::int64_t parameters = 0, local = 0;
  strategy::TensorTraffic traffic{};
};
// A rank's chunk as estimate prices it: strategy::Chunk without the model, so that the pricing is
// compiled once (estimate.ipp), not for every model type.
struct PricedChunk {
  std::vector<PricedUnit> units;
  std::vector<strategy::Segment> segments;
};
template <class Pass>
PricedUnit priced(const strategy::Unit<Pass>& u) {
  PricedUnit p{u.name, 0, 0, u.traffic};
  u.parameters(u.layer, [&](nn::Parameter& q) {
    p.parameters += q.global_shape().numel();
    p.local += q.shape.numel();
  });
  return p;
}
template <class Pass>
PricedChunk priced(const strategy::Chunk<Pass>& chunk) {
  PricedChunk out{{}, chunk.segments()};
  for (const auto& u : chunk.units()) out.units.push_back(priced(u));
  return out;
}
// The checks of estimate's arguments, before the plan is made; `tensor` the model's split degree.
EPL_LINKED void check_estimate(const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows, int slots, int tensor);
// What candidate c costs under plan, from each place's bytes and each pipeline rank's chunks.
EPL_LINKED Estimate estimate_cut(const Plan& plan, const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows,
                                 const std::vector<PlaceBytes>& places, const std::vector<std::vector<PricedChunk>>& stages,
                                 const PlanOptions& base);
}  // namespace detail

/// \brief Predicts `c` for Model (a copy of `model` is sharded and cut; nothing is drawn) from its
/// profile, on `cluster`, training `rows` rows a step, with an optimizer of `slots` state values
/// per element; a candidate the plan refuses throws the plan's error.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
Estimate estimate(const Model& model, const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows, int slots,
                  PlanOptions base = {}) {
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;
  detail::check_estimate(prof, c, cluster, rows, slots, tensor_degree_v<Model>);
  const Plan plan = make<Model, Policy>(c.options(base), cluster.ranks, device::computes<D, double>());
  EPL_CHECK(prof.tensor == plan.tensor, "the profile was probed as a rank of a split group of ", prof.tensor, ", but this model is split ",
            plan.tensor, " ways: it is another model's; profile this model (plan::profile)");
  const auto places = detail::predict_places<Model, Policy, D>(model, plan, cluster.ranks, slots);
  // Each pipeline rank's chunks as it cuts them, with the segments gradient_checkpoint.type = "auto"
  // recomputes chosen as it chooses them (an error when there are none: the plan is refused).
  Model sharded = model;
  (void)shard_model(sharded, nn::SplitPart{0, plan.tensor}, plan.rows_over_tensor());
  std::vector<std::vector<detail::PricedChunk>> stages;
  for (int s = 0; s < plan.pipeline; ++s) {
    auto& cut = stages.emplace_back();
    for (const auto& chunk : local_chunks<Pass>(sharded, plan, s)) cut.push_back(detail::priced(chunk));
  }
  return detail::estimate_cut(plan, prof, c, cluster, rows, places, stages, base);
}

}  // namespace plan
}  // namespace v0
}  // namespace epl

// The model-free body: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/plan/estimate.ipp"
#endif
