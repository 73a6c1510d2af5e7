#pragma once
/// \file
/// \brief The planner's cost model: what a plan costs one rank, predicted before anything is
/// drawn. One header a job, this one all of them:
///
/// - state.hpp: **state bytes** (parameters, gradients, optimizer state), exact: ZeRO's and
///   offload's placement of an arena (state_bytes); estimate.hpp's predict_state lays out each
///   rank's parameters with the arena's own rule, after the same sharding and cut the Trainer makes.
/// - profile.hpp: **the probe** (profile): a model's sequential units (the partitioner's, with its
///   costs) measured by short repeated runs on the device, and the file that keeps them.
/// - cluster.hpp: **the cluster** (ranks, memory, speed, α-β links), its calibration from a
///   measured step, its file, and presets of published machines.
/// - price.hpp: **the pricing formula and the candidate loop** the run-time search (search.hpp)
///   and the compile-time one (static_search.hpp) share.
/// - estimate.hpp: **the estimate** of a candidate from a profile.
#include "epl/plan/candidate.hpp"
#include "epl/plan/cluster.hpp"
#include "epl/plan/estimate.hpp"
#include "epl/plan/price.hpp"
#include "epl/plan/profile.hpp"
#include "epl/plan/state.hpp"
