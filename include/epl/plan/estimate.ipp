#pragma once
/// \file
/// \brief The model-free body of plan::estimate (the header declares it): what a candidate costs,
/// priced from the chunks its plan cuts. Included by that header in a header-only program, or
/// compiled once into epl::precompiled (core/linked.hpp).
#include "epl/plan/estimate.hpp"
#include "epl/plan/pieces.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
// A pipeline stage's time over the probe's, on uneven devices (cluster.rank_speeds): `slowest`
// the most over its replicas of the replica's share of the rows (as the Trainer shares them)
// over its slowest rank's speed relative to the fastest rank's (which runs at Cluster::speed),
// `busy` their sum (the replicas' work); even: 1 and the replicas.
struct Lane {
  double slowest = 1, busy = 1;
};
inline std::vector<Lane> stage_lanes(const Plan& plan, const std::vector<double>& speeds, int ranks, std::int64_t rows, int micro_batches) {
  const int data = ranks / (plan.pipeline * plan.tensor);
  std::vector<Lane> lanes(static_cast<std::size_t>(plan.pipeline), Lane{1.0, static_cast<double>(data)});
  if (speeds.empty()) return lanes;
  std::vector<double> slow(static_cast<std::size_t>(data * plan.pipeline), 0.0);  // [replica][stage]: its slowest rank
  for (int r = 0; r < ranks; ++r) {
    const auto at = strategy::coord_of(plan.mesh_shape(), data, r);
    auto& v = slow[static_cast<std::size_t>(at.data * plan.pipeline + at.pipeline)];
    v = v == 0 ? speeds[static_cast<std::size_t>(r)] : std::min(v, speeds[static_cast<std::size_t>(r)]);
  }
  const auto shares = strategy::share_rows(rows, data, plan.data_weights, micro_batches);
  const double even = static_cast<double>(rows) / data;
  const double fastest = *std::max_element(speeds.begin(), speeds.end());  // the speeds are relative: the fastest runs at the cluster's
  for (int s = 0; s < plan.pipeline; ++s) {
    auto& lane = lanes[static_cast<std::size_t>(s)];
    lane = {0, 0};
    for (int i = 0; i < data; ++i) {
      const double f = static_cast<double>(shares[static_cast<std::size_t>(i)]) / even * fastest / slow[static_cast<std::size_t>(i * plan.pipeline + s)];
      lane.slowest = std::max(lane.slowest, f);
      lane.busy += f;
    }
  }
  return lanes;
}
}  // namespace detail

namespace detail {
EPL_LINKED void check_estimate(const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows, int slots, int tensor) {
  check_cluster(cluster, "plan::estimate");
  // each condition on its own, so the message names the one that failed and its value
  EPL_CHECK(c.policies.zero >= 0 && c.policies.zero <= 3, "plan::estimate: candidate ", c.str(), ": policies.zero = ", c.policies.zero,
            " is not a ZeRO stage; give 0, 1, 2 or 3");
  EPL_CHECK(c.virtual_stages >= 1, "plan::estimate: candidate ", c.str(), ": virtual_stages = ", c.virtual_stages,
            "; give 1, or 2 for a schedule of virtual stages (Interleaved)");
  EPL_CHECK(c.micro_batches <= kMostMicroBatches, "plan::estimate: candidate ", c.str(), ": ", c.micro_batches,
            " micro-batches; give at most ", kMostMicroBatches);
  EPL_CHECK(rows <= (std::int64_t{1} << 50), "plan::estimate: a global batch of ", rows, " rows; give at most 2^50");
  EPL_CHECK(!prof.units.empty(), "plan::estimate: the profile is empty; measure one with plan::profile");
  EPL_CHECK(rows >= 1, "plan::estimate: a global batch of ", rows, " rows; give 1 or more");
  EPL_CHECK(c.data >= 1 && c.pipeline >= 1 && c.micro_batches >= 1, "plan::estimate: candidate ", c.str(), " has data = ", c.data,
            ", pipeline = ", c.pipeline, ", micro_batches = ", c.micro_batches, "; each must be 1 or more");
  EPL_CHECK(slots >= 0 && slots <= kMostStateSlots, "plan::estimate: the optimizer's state slots an element are ", slots,
            "; give 0 (SGD) to ", kMostStateSlots, " (AdamW keeps 2)");
  EPL_CHECK(c.data * c.pipeline * tensor == cluster.ranks, "candidate ", c.str(), " uses ", c.data * c.pipeline * tensor,
            " ranks, but the cluster has ", cluster.ranks,
            c.tensor != tensor ? " (its split degree is the model type's epl::Split, " + std::to_string(tensor) + ", not the candidate's " +
                                     std::to_string(c.tensor) + ")"
                               : std::string());
  EPL_CHECK(rows % (c.data * c.micro_batches) == 0, "candidate ", c.str(), ": a global batch of ", rows, rows == 1 ? " row" : " rows", " does not divide into ",
            c.data, " replicas x ", c.micro_batches, " micro-batches");
  // what the searches never try, refused here as static_price refuses it: the two layers price the
  // same combinations (stranger 37 priced ZeRO 1 on one replica here, which static_price refused)
  const auto* schedule = strategy::find_schedule(c.schedule);
  if (const auto r = policy::refusal(c.policies, {.data = c.data, .pipeline = c.pipeline,
                                                  .splits_backward = c.pipeline > 1 && schedule && schedule->splits_backward}))
    EPL_FAIL("plan::estimate: candidate ", c.str(), ": ", r.why);
}

EPL_LINKED Estimate estimate_cut(const Plan& plan, const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows,
                                 const std::vector<PlaceBytes>& places, const std::vector<std::vector<PricedChunk>>& stages,
                                 const PlanOptions& base) {
  Estimate e;
  e.candidate = c;
  e.candidate.tensor = plan.tensor;
  e.rows = rows;
  for (const auto& [s, f] : places) {
    e.in_flight.parameters = std::max(e.in_flight.parameters, f.parameters);
    e.in_flight.gradients = std::max(e.in_flight.gradients, f.gradients);
    e.state.parameters = std::max(e.state.parameters, s.parameters);
    e.state.gradients = std::max(e.state.gradients, s.gradients);
    e.state.optimizer_state = std::max(e.state.optimizer_state, s.optimizer_state);
    e.state.host_parameters = std::max(e.state.host_parameters, s.host_parameters);
    e.state.host_gradients = std::max(e.state.host_gradients, s.host_gradients);
    e.state.host_optimizer_state = std::max(e.state.host_optimizer_state, s.host_optimizer_state);
  }
  const std::int64_t micro_rows = rows / c.data / c.micro_batches;
  double slowest_chunk = 0, work = 0;  // one micro-batch's chunk at full speed; every rank's seconds a step
  double slowest_talk = 0;             // one micro-batch's split-group all-reduces, the most of any chunk
  std::int64_t sends = 0;              // boundary bytes per row, the largest
  // Uneven devices (cluster.rank_speeds): stage s's time over the probe's is the most, over its
  // replicas, of the replica's share of the rows over its slowest rank's speed; `busy` the sum.
  const auto lanes = detail::stage_lanes(plan, base.rank_speeds, cluster.ranks, rows, c.micro_batches);
  const double speed = cluster.speed > 0 ? cluster.speed : 1.0;
  for (int s = 0; s < plan.pipeline; ++s) {
    detail::ChunkBytes held(static_cast<std::size_t>(plan.chunks));
    double stage_macs = 0, stage_tensor_seconds = 0;
    std::int64_t stage_tensor_bytes = 0;
    const auto& lane = lanes[static_cast<std::size_t>(s)];
    const auto ids = plan.chunks_of(s);
    for (std::size_t j = 0; j < ids.size(); ++j) {
      const int id = ids[j];
      const auto& chunk = stages[static_cast<std::size_t>(s)][j];
      const auto& units = chunk.units;
      const bool last = id + 1 == plan.chunks;
      // The chunk's pieces in forward order, as the probe measured their units: the segments it
      // recomputes or not (one piece a unit without recompute), and the loss on the last chunk.
      // A unit as the probe measured it (as a split rank, for a split model: its time is this
      // rank's), the share of its multiply-adds this rank does (its parameters': a split layer's
      // GEMMs are as split as its weights), and its split group's traffic.
      struct Part {
        const UnitProfile* profile = nullptr;
        double macs = 1;
        strategy::TensorTraffic traffic = {};
      };
      struct Piece {
        std::vector<Part> units;
        bool recomputed = false;
      };
      std::vector<Part> parts;
      for (const auto& u : units) {  // the profile must be this model's: each unit as large
        const std::int64_t params = u.parameters, local = u.local;
        const auto& up = prof.unit(u.name);
        EPL_CHECK(params == up.parameters, "the profile was measured on another model: its unit ", u.name, " has ", up.parameters,
                  " parameters, this model's ", params, "; profile this model (plan::profile)");
        parts.push_back({&up, params > 0 ? static_cast<double>(local) / static_cast<double>(params) : 1.0, u.traffic});
      }
      std::vector<Piece> pieces;
      // what the chunk receives from the chunk before, per row (the first chunk's input is the batch, the caller's)
      std::int64_t received = 0;
      for (std::size_t i = 1; id > 0 && !units.empty() && i < prof.units.size(); ++i)
        if (prof.units[i].name == units[0].name) received = prof.units[i - 1].output_bytes;
      if (chunk.segments.empty()) {
        for (std::size_t u = 0; u < units.size(); ++u) pieces.push_back({{parts[u]}, false});
      } else {
        for (const auto& seg : chunk.segments) {
          Piece piece{{}, seg.recompute};
          for (std::size_t u = seg.begin; u < seg.end; ++u) piece.units.push_back(parts[u]);
          pieces.push_back(std::move(piece));
        }
      }
      if (last) pieces.push_back({{Part{&prof.units.back()}}, false});
      else if (!units.empty()) sends = std::max(sends, prof.unit(units.back().name).output_bytes);
      double sec = 0, macs = 0, talk = 0;
      std::int64_t talked = 0;
      for (const auto& piece : pieces)
        for (const auto& part : piece.units) {
          const auto* up = part.profile;
          const double again = piece.recomputed ? 2 : 1;
          sec += (up->forward_seconds * again + up->backward_seconds) * static_cast<double>(micro_rows) +
                 up->fixed_seconds * (piece.recomputed ? 1.5 : 1.0);
          macs += part.macs * up->macs_per_token * (1 + again + 1);
          if (plan.tensor > 1 && part.traffic.collectives > 0) {  // ring all-reduces of f32 activations, on the path
            const std::int64_t bytes = part.traffic.elements * prof.tokens_per_row * micro_rows * 4;
            talked += bytes;
            talk += cluster.tensor.all_reduces(plan.tensor, part.traffic.collectives, static_cast<double>(bytes));
          }
        }
      // what it holds, walked piece by piece (the rule the compile-time planner shares)
      std::vector<detail::UnitBytes> bytes;
      std::vector<detail::Piece> spans;
      for (const auto& piece : pieces) {
        const std::size_t begin = bytes.size();
        for (const auto& part : piece.units) {
          const auto* up = part.profile;
          bytes.push_back({up->activation_bytes, up->output_bytes, up->backward_bytes, up->split_backward_bytes, up->weight_bytes});
        }
        spans.push_back({begin, bytes.size(), piece.recomputed});
      }
      const auto walked = detail::walk_pieces(bytes, spans, received, last, last);
      const std::int64_t k = walked.kept, boundary = walked.boundary;
      const auto at = static_cast<std::size_t>(id);
      // a micro-batch's bytes, refused past 64 TiB: the peak sums up to 65536 micro-batches of them
      auto of_micro_batch = [&](std::int64_t per_row) {
        EPL_CHECK(std::abs(static_cast<double>(per_row) * static_cast<double>(micro_rows)) < 0x1p46, "plan::estimate: candidate ",
                  c.str(), " would hold ", per_row, " activation bytes a row for micro-batches of ", micro_rows,
                  " rows: past 64 TiB a micro-batch, more than 64-bit sums of its peak can count; give a smaller global batch, "
                  "or measure the profile again (a unit's bytes a row are the profile's)");
        return per_row * micro_rows;
      };
      held.kept[at] = of_micro_batch(k);
      held.sent[at] = of_micro_batch(boundary);
      held.transient[at] = of_micro_batch(walked.transient + boundary);
      held.split_transient[at] = of_micro_batch(walked.split_transient + boundary);
      held.weight[at] = of_micro_batch(walked.weight);
      slowest_chunk = std::max(slowest_chunk, sec * lane.slowest);
      slowest_talk = std::max(slowest_talk, talk);  // the links do not scale with the speed
      work += sec * c.micro_batches * lane.busy * plan.tensor;
      stage_macs += macs;
      stage_tensor_bytes += talked * c.micro_batches;
      stage_tensor_seconds += talk * c.micro_batches;
    }
    e.tensor_bytes = std::max(e.tensor_bytes, stage_tensor_bytes);
    e.tensor_seconds = std::max(e.tensor_seconds, stage_tensor_seconds);
    e.activations = std::max(e.activations, detail::activation_peak(plan.actions(s), held));
    e.flops = std::max(e.flops, 2.0 * stage_macs * static_cast<double>(prof.tokens_per_row * micro_rows * c.micro_batches));
  }
  // What one micro-batch costs the busiest rank, priced by the formula static_search shares.
  const int v = plan.virtual_stages(), p = plan.pipeline, m = c.micro_batches;
  policy::Choice chosen = c.policies;  // as the plan decided them
  chosen.zero = plan.policies.zero_stage;
  chosen.offload = plan.policies.offload;
  const Combination combination{.data = c.data, .pipeline = p, .micro_batches = m,
                                .schedule = plan.schedule ? plan.schedule : &strategy::kDefaultSchedule, .virtual_stages = v,
                                .policies = chosen};
  const StepCost cost{.chunk_seconds = slowest_chunk / speed,
                      .chunk_talk = slowest_talk,
                      .rank_talk = e.tensor_seconds / m,
                      .shared_work = cluster.cores > 0 ? work / speed / cluster.cores : 0.0,
                      .send_bytes = static_cast<double>(sends * micro_rows),
                      .gradient_bytes = static_cast<double>(e.state.gradients + e.state.host_gradients),
                      .host_bytes = static_cast<double>(e.state.host_parameters + e.state.host_gradients)};
  const StepPrice priced = price(cluster, combination, cost, plan.policies.max_splits);
  e.bubble = priced.bubble;
  e.compute_seconds = priced.compute_seconds;
  e.tensor_seconds = priced.tensor_seconds;
  e.pipeline_seconds = priced.pipeline_seconds;
  if (p > 1) e.pipeline_bytes = 2 * m * v * sends * micro_rows;
  e.data_seconds = priced.data_seconds;
  e.data_bytes = static_cast<std::int64_t>(priced.data_bytes);
  e.host_seconds = priced.host_seconds;
  e.seconds = priced.seconds;
  EPL_CHECK(std::isfinite(e.seconds), "plan::estimate: candidate ", c.str(), " comes to a step time that is not finite: the "
            "profile's times, the cluster's speed or rank speeds are out of proportion; measure them again");
  return e;
}
}  // namespace detail

}  // namespace plan
}  // namespace v0
}  // namespace epl
