#pragma once
/// \file
/// \brief The bodies of the key table's functions (config/keys.hpp declares them): included by that
/// header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include <set>

#include "epl/config/keys.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

EPL_LINKED std::vector<std::string_view> schedule_names() {
  std::vector<std::string_view> names;
  for (const auto& e : strategy::kSchedules) names.push_back(e.name);
  return names;
}

EPL_LINKED std::vector<std::pair<std::string_view, std::string_view>> schedule_aliases() {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (const auto& e : strategy::kSchedules)
    strategy::any_alias(e, [&](std::string_view alias) {
      out.emplace_back(alias, e.name);
      return false;  // every one
    });
  return out;
}

EPL_LINKED std::string_view schedule_help() {
  static const std::string help = [] {
    std::string h = "pipeline schedule:";
    for (const auto& e : strategy::kSchedules) h += std::string(h.back() == ':' ? " " : ", ") + std::string(e.name) + " (" + std::string(e.help) + ")";
    return h;
  }();
  return help;
}

EPL_LINKED const std::vector<ConfigKey>& config_keys() {
  using S = std::string;
  using I = std::int64_t;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  static const std::vector<ConfigKey> keys = [&] {
    std::vector<ConfigKey> all = {
        {"pipeline.num_micro_batch", I{1}, {}, 1, 1 << 20, true, "micro-batches per step; gradient accumulation with one task graph"},
        {"pipeline.num_stages", I{1}, {}, 1, 4096, true,
         "ranks along the pipeline: the stages of an epl::Pipeline model, or of a model cut automatically (auto.auto_parallel)"},
        {"pipeline.strategy", S{std::string(strategy::kSchedules[0].name)}, schedule_names(), -kNone, kNone, true, schedule_help(), false,
         schedule_aliases()},
        {"pipeline.num_virtual_stages", I{2}, {}, 2, 1024, true,
         "model chunks per pipeline rank under the Interleaved schedule (epl)"},
        {"cluster.device_place_prefer_intra_node", true, {}, -kNone, kNone, true,
         "place a tensor-parallel group on neighbouring ranks (one node); false: the data-parallel groups"},
        {"cluster.run_visible_devices", S{""}, {}, -kNone, kNone, false, "comma-separated device ids to use"},
        {"cluster.colocate_split_and_replicate", false, {}, -kNone, kNone, true,
         "run a model's Replicate<N, ...> and Split<N, ...> parts on the same N devices"},
        {"cluster.rank_speeds", S{""}, {}, -kNone, kNone, true,
         "uneven devices: each rank's relative speed, comma-separated (\"1,0.5\"), or \"measure\" (a GEMM timed on each); "
         "data-parallel batch shares and automatic pipeline stage cuts in proportion (epl)"},
        {"split.sequence_parallel", false, {}, -kNone, kNone, true,
         "Megatron's sequence parallelism: the LayerNorm, dropout and residual regions between an epl::Split's tensor-parallel "
         "blocks run on each rank's part of the sequence, each all-reduce a reduce-scatter and an all-gather (epl)"},
        {"communication.num_communicators", I{2}, {}, 1, 1024, false, "communicators used for gradient traffic"},
        {"communication.sparse_as_dense", false, {}, -kNone, kNone, false, "reduce sparse gradients as dense"},
        {"io.slicing", false, {}, -kNone, kNone, true, "divide input files among data-parallel ranks"},
        {"io.unbalanced_io_slicing", false, {}, -kNone, kNone, true, "allow uneven file shares"},
        {"io.drop_last_files", false, {}, -kNone, kNone, true, "drop files that do not divide evenly"},
        {"auto.auto_parallel", false, {}, -kNone, kNone, true,
         "with pipeline.num_stages: cut a model without stage annotations into that many stages balanced by cost; without it: "
         "epl::auto_plan chooses the plan (docs/planner.md)"},
        {"communication.timeout", 300.0, {}, 0.001, 86400, true,
         "seconds a collective or receive waits for its peers before the job fails naming them (epl)"},
        {"trace", S{""}, {}, -kNone, kNone, true,
         "write every rank's forward, backward, send, receive and all-reduce spans to this file as Chrome trace JSON (epl)"},
        {"checkpoint.dir", S{""}, {}, -kNone, kNone, true,
         "save training checkpoints here (step-N directories) and resume from the newest complete one at start (epl)"},
        {"checkpoint.every", I{0}, {}, 0, 1 << 30, true,
         "save a checkpoint into checkpoint.dir after every this many steps; 0: only resume (epl)"},
        {"checkpoint.keep", I{0}, {}, 0, 1 << 30, true,
         "after each save, keep the newest this many checkpoints in checkpoint.dir (the one just saved always) and remove the "
         "older ones; 0: keep every one (epl)"},
        {"lr.schedule", S{"constant"}, {"constant", "cosine", "linear"}, -kNone, kNone, true,
         "learning rate per optimizer step: constant, or after lr.warmup_steps a cosine or linear decay from the optimizer's lr "
         "to lr.min at step lr.decay_steps (epl)"},
        {"lr.warmup_steps", I{0}, {}, 0, 1 << 30, true, "steps of linear learning-rate warm-up from 0 to the optimizer's lr (epl)"},
        {"lr.decay_steps", I{0}, {}, 0, 1 << 30, true,
         "the step at which a cosine or linear lr.schedule reaches lr.min, warm-up included; usually the run's step count (epl)"},
        {"lr.min", 0.0, {}, 0, kNone, true, "the learning rate a decay ends at (epl)"},
        {"checkpoint.resume_other_data", false, {}, -kNone, kNone, true,
         "resume a run whose data loaders read other data than the saved run's (their count of tokens or checksum differ): on "
         "purpose, e.g. a new corpus; false: such a resume is refused (epl)"},
    };
    // each policy's keys, from its home (policy/homes/), after the pipeline's
    auto policies = policy::config_keys();
    const auto after = std::find_if(all.rbegin(), all.rend(), [](const ConfigKey& k) { return k.name.starts_with("pipeline."); }).base();
    all.insert(after, policies.begin(), policies.end());
    check_unique_keys(all);
    return all;
  }();
  return keys;
}

EPL_LINKED void check_unique_keys(const std::vector<ConfigKey>& keys) {
  std::set<std::string_view> seen;
  for (const auto& k : keys)
    EPL_CHECK(seen.insert(k.name).second, "configuration key ", k.name, " is declared twice (", k.help, "): a policy home's "
              "config_keys() (policy/homes/) repeats a key another home or the library's table declares; give the key one home, "
              "or name the new one apart (its own prefix)");
}

EPL_LINKED const std::vector<LibraryVariable>& library_variables() {
  static const std::vector<LibraryVariable> vars = {
      {"EPL_NUM_RANKS", 1, 4096, "thread ranks of epl::launch"},
      {"EPL_GPU_PER_WORKER", 0, 64, "GPUs per worker, set by tools/epl-launch"},
  };
  return vars;
}
}  // namespace detail
}  // namespace v0
}  // namespace epl
