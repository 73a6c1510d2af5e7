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
#include "epl/core/linked.hpp"

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
inline constexpr Key<I> checkpoint_keep{"checkpoint.keep"};
inline constexpr Key<bool> resume_other_data{"checkpoint.resume_other_data"};
inline constexpr Key<S> lr_schedule{"lr.schedule"};
inline constexpr Key<I> lr_warmup_steps{"lr.warmup_steps"};
inline constexpr Key<I> lr_decay_steps{"lr.decay_steps"};
inline constexpr Key<double> lr_min{"lr.min"};
}  // namespace keys

namespace detail {
// pipeline.strategy's choices and help: the schedules strategy/schedule.hpp lists.
EPL_LINKED std::vector<std::string_view> schedule_names();
// pipeline.strategy's aliases: each schedule's other names (strategy::ScheduleEntry::aliases).
EPL_LINKED std::vector<std::pair<std::string_view, std::string_view>> schedule_aliases();
EPL_LINKED std::string_view schedule_help();
EPL_LINKED const std::vector<ConfigKey>& config_keys();
// Fails naming a key that two entries declare: a policy home's key that another home or the
// library's table has already (the second would be ignored, its default and range with it).
EPL_LINKED void check_unique_keys(const std::vector<ConfigKey>& keys);

/// An environment variable epl reads that is not a configuration key: a whole number in [min, max].
struct LibraryVariable {
  std::string_view name;
  std::int64_t min, max;
  std::string_view help;
};
/// Environment variables epl reads that are not configuration keys; any other EPL_* variable is
/// an error (a typo would otherwise be ignored while the same typo as --key is not), and so is a
/// value of these that is not a whole number in range.
EPL_LINKED const std::vector<LibraryVariable>& library_variables();
}  // namespace detail

}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/config/keys.ipp"
#endif
