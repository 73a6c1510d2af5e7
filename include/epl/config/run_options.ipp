#pragma once
/// \file
/// \brief The bodies of the run options' readers (the header declares them): included by that
/// header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/config/run_options.hpp"

namespace epl {
inline namespace v0 {

EPL_LINKED void check(const TrainerOptions& o) {
  EPL_CHECK(std::isfinite(o.clip_norm) && o.clip_norm >= 0, "TrainerOptions::clip_norm = ", o.clip_norm,
            " is not a norm; give a positive finite number, or 0 for no clipping");
  EPL_CHECK(o.check_replicas_every >= 0, "TrainerOptions::check_replicas_every = ", o.check_replicas_every,
            " is negative; give a step count, or 0 never to compare replicas");
  EPL_CHECK(o.amp_init_scale >= 1 && o.amp_init_scale <= 0x1p64, "TrainerOptions::amp_init_scale = ", o.amp_init_scale,
            " is not a loss scale; give a number from 1 to 2^64");
  EPL_CHECK(o.amp_growth_interval >= 1, "TrainerOptions::amp_growth_interval = ", o.amp_growth_interval,
            " must be at least 1 step");
}

EPL_LINKED optim::LrSchedule lr_schedule(const Config& cfg, const TrainerOptions& o) {
  optim::LrSchedule s;
  const std::string kind = cfg.get(keys::lr_schedule);
  s.decay = kind == "cosine" ? optim::LrSchedule::Decay::kCosine : kind == "linear" ? optim::LrSchedule::Decay::kLinear
                                                                                    : optim::LrSchedule::Decay::kConstant;
  s.warmup = cfg.get(keys::lr_warmup_steps);
  s.decay_steps = cfg.get(keys::lr_decay_steps);
  s.floor = cfg.get(keys::lr_min);
  for (std::string_view key : {keys::lr_decay_steps.name, keys::lr_min.name})
    EPL_CHECK(s.decay != optim::LrSchedule::Decay::kConstant || cfg.source(key) == Config::Source::kDefault, "config key ", key, " = ",
              cfg.value_text(key), " is given but lr.schedule = constant does not decay; set lr.schedule=cosine or linear, or drop ", key);
  if (o.lr_schedule) {
    EPL_CHECK(!s.active(), "TrainerOptions::lr_schedule gives the learning rate, and so do the lr.* keys (lr.schedule = ", kind,
              ", lr.warmup_steps = ", s.warmup, "); give one of the two");
    s.custom = o.lr_schedule;
  }
  return s;
}

EPL_LINKED plan::PlanOptions plan_options(const Config& cfg, const TrainerOptions& o) {
  check(o);
  const KeyReader read{cfg};
  plan::PlanOptions p;
  p.micro_batches = static_cast<int>(cfg.get(keys::num_micro_batch));
  p.stages = static_cast<int>(cfg.get(keys::num_stages));
  p.stages_given = read.given(keys::num_stages);
  p.schedule = cfg.get(keys::pipeline_strategy);
  p.virtual_stages = static_cast<int>(cfg.get(keys::num_virtual_stages));
  p.virtual_stages_given = read.given(keys::num_virtual_stages);
  p.schedule_given = read.given(keys::pipeline_strategy);
  p.auto_parallel = cfg.get(keys::auto_parallel);
  p.prefer_intra_node = cfg.get(keys::prefer_intra_node);
  p.colocate = cfg.get(keys::colocate_split_and_replicate);
  p.sequence_parallel = cfg.get(keys::sequence_parallel);
  auto& k = p.policies;
  policy::read_keys(read, k);  // each policy's keys, as its home reads them
  k.clip_norm = o.clip_norm;
  k.amp_init_scale = o.amp_init_scale;
  k.amp_growth_interval = o.amp_growth_interval;
  k.dtype = o.dtype;
  return p;
}
}  // namespace v0
}  // namespace epl
