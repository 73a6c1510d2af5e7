#pragma once
/// \file
/// \brief The configuration keys: EPL's dotted keys with EPL's defaults, epl's own additions,
/// typed handles on them (`epl::keys::max_splits`), and typed flags a program declares for its
/// own options (`epl::Flag<std::int64_t>`), validated by the same rules with the same messages.
#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/key.hpp"
#include "epl/policy/setup.hpp"
#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {

/// \brief Limits of a program flag's value.
struct FlagLimits {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string_view> choices = {};  // "= {}": designated initializers may leave it out quietly
};

/// \brief A program's own option, declared once and read typed:
/// \code
///   const epl::Flag<std::int64_t> steps{"steps", 200, "optimizer steps to run", {.min = 1}};
///   auto cfg = epl::Config::from_args(argc, argv, {steps});   // --steps=300 or --steps 300
///   for (std::int64_t s = 0; s < cfg.get(steps); ++s) ...
/// \endcode
/// A flag of type std::vector<std::string> may be given several times (--data=a --data=b).
/// \tparam T bool, std::int64_t, double, std::string or std::vector<std::string>
template <class T>
class Flag {
 public:
  Flag(std::string_view name, T default_value, std::string_view help, FlagLimits limits = {})
      : key_{name, ConfigValue(std::move(default_value)), std::move(limits.choices), limits.min, limits.max, true, help, true} {
    EPL_CHECK(!name.empty() && name.find('.') == std::string_view::npos && name.find('=') == std::string_view::npos,
              "flag name ", detail::quoted(name), " must be non-empty and contain neither '.' (EPL keys have dots) nor '='");
    // the program's own mistakes, caught where the flag is made rather than never
    EPL_CHECK(key_.min <= key_.max, "flag --", name, ": its limits {.min = ", key_.min, ", .max = ", key_.max,
              "} admit no value; give .min <= .max");
    if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
      const auto x = static_cast<double>(std::get<T>(key_.default_value));
      EPL_CHECK(x >= key_.min && x <= key_.max, "flag --", name, ": its default ", x, " lies outside its own limits [",
                key_.min, ", ", key_.max, "]; change the default or the limits");
    }
    if constexpr (std::is_same_v<T, std::string>) {
      const auto& d = std::get<std::string>(key_.default_value);
      EPL_CHECK(key_.choices.empty() || std::find(key_.choices.begin(), key_.choices.end(), d) != key_.choices.end(),
                "flag --", name, ": its default ", detail::quoted(d), " is not one of its own choices");
    }
  }
  [[nodiscard]] const ConfigKey& spec() const noexcept { return key_; }
  operator Key<T>() const noexcept { return {key_.name}; }  // NOLINT: a flag is read as its key

 private:
  ConfigKey key_;
};

namespace keys {
using I = std::int64_t;
using S = std::string;
// EPL's keys (docs/config.md), then epl's own.
inline constexpr Key<I> num_micro_batch{"pipeline.num_micro_batch"};
inline constexpr Key<I> num_stages{"pipeline.num_stages"};
inline constexpr Key<S> pipeline_strategy{"pipeline.strategy"};
inline constexpr Key<I> num_virtual_stages{"pipeline.num_virtual_stages"};
inline constexpr Key<bool> prefer_intra_node{"cluster.device_place_prefer_intra_node"};
inline constexpr Key<S> run_visible_devices{"cluster.run_visible_devices"};
inline constexpr Key<bool> colocate_split_and_replicate{"cluster.colocate_split_and_replicate"};
inline constexpr Key<S> rank_speeds{"cluster.rank_speeds"};
inline constexpr Key<bool> sequence_parallel{"split.sequence_parallel"};
inline constexpr Key<I> num_communicators{"communication.num_communicators"};
inline constexpr Key<bool> sparse_as_dense{"communication.sparse_as_dense"};
inline constexpr Key<bool> io_slicing{"io.slicing"};
inline constexpr Key<bool> unbalanced_io_slicing{"io.unbalanced_io_slicing"};
inline constexpr Key<bool> drop_last_files{"io.drop_last_files"};
inline constexpr Key<bool> auto_parallel{"auto.auto_parallel"};
inline constexpr Key<double> timeout{"communication.timeout"};
inline constexpr Key<S> trace{"trace"};
inline constexpr Key<S> checkpoint_dir{"checkpoint.dir"};
inline constexpr Key<I> checkpoint_every{"checkpoint.every"};
inline constexpr Key<bool> resume_other_data{"checkpoint.resume_other_data"};
inline constexpr Key<S> lr_schedule{"lr.schedule"};
inline constexpr Key<I> lr_warmup_steps{"lr.warmup_steps"};
inline constexpr Key<I> lr_decay_steps{"lr.decay_steps"};
inline constexpr Key<double> lr_min{"lr.min"};
}  // namespace keys

namespace detail {
// pipeline.strategy's choices and help: the schedules strategy/schedule.hpp lists.
inline std::vector<std::string_view> schedule_names() {
  std::vector<std::string_view> names;
  for (const auto& e : strategy::kSchedules) names.push_back(e.name);
  return names;
}
// pipeline.strategy's aliases: each schedule's other names (strategy::ScheduleEntry::aliases).
inline std::vector<std::pair<std::string_view, std::string_view>> schedule_aliases() {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (const auto& e : strategy::kSchedules)
    for (std::string_view rest = e.aliases; !rest.empty();) {
      const auto comma = rest.find(',');
      out.emplace_back(rest.substr(0, comma), e.name);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  return out;
}
inline std::string_view schedule_help() {
  static const std::string help = [] {
    std::string h = "pipeline schedule:";
    for (const auto& e : strategy::kSchedules) h += std::string(h.back() == ':' ? " " : ", ") + std::string(e.name) + " (" + std::string(e.help) + ")";
    return h;
  }();
  return help;
}
inline const std::vector<ConfigKey>& config_keys() {
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
    return all;
  }();
  return keys;
}

/// An environment variable epl reads that is not a configuration key: a whole number in [min, max].
struct LibraryVariable {
  std::string_view name;
  std::int64_t min, max;
  std::string_view help;
};
/// Environment variables epl reads that are not configuration keys; any other EPL_* variable is
/// an error (a typo would otherwise be ignored while the same typo as --key is not), and so is a
/// value of these that is not a whole number in range.
inline const std::vector<LibraryVariable>& library_variables() {
  static const std::vector<LibraryVariable> vars = {
      {"EPL_NUM_RANKS", 1, 4096, "thread ranks of epl::launch"},
      {"EPL_GPU_PER_WORKER", 0, 64, "GPUs per worker, set by tools/epl-launch"},
  };
  return vars;
}
}  // namespace detail

}  // namespace v0
}  // namespace epl
