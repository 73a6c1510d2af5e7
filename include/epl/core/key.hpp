#pragma once
/// \file
/// \brief What a configuration key is, below every floor that declares one: ConfigValue (a key's
/// value), ConfigKey (its description: type, default, valid values, help) and Key<T> (a typed
/// handle on it). config/ holds the table and reads the values; a policy's home (policy/homes/)
/// declares its own keys with these, so the policy and its keys live in one file.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace epl {
inline namespace v0 {

/// \brief One configuration value. A list holds the values of a flag given more than once.
using ConfigValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

/// \brief The description of one key or flag: its type (that of its default), default, valid
/// values and whether this version implements values other than the default.
struct ConfigKey {
  static constexpr double kNoLimit = std::numeric_limits<double>::infinity();  ///< a number's unbounded side
  std::string_view name;
  ConfigValue default_value;
  std::vector<std::string_view> choices;  ///< strings: the valid values (empty: free text)
  double min = -std::numeric_limits<double>::infinity();  ///< numbers: the smallest valid value
  double max = std::numeric_limits<double>::infinity();   ///< numbers: the largest valid value (every integer key has one:
                                                           ///< no value is ever narrowed to another number)
  bool implemented = true;  ///< false: only the default is accepted for now ("not supported yet")
  std::string_view help;
  bool program = false;  ///< a program's own flag (--name), not an EPL key (no EPL_* variable)
  /// Strings: other names accepted for a choice, {alias, choice} (what Megatron and DeepSpeed users
  /// type: zero.level=3 for v2); the key then holds the choice.
  std::vector<std::pair<std::string_view, std::string_view>> aliases = {};
  bool below_max = false;  ///< numbers: max itself is out of range (ema.decay: 0 to below 1)
};

/// \brief A typed handle on a key: `cfg.get(keys::max_splits)` is a std::int64_t, and reading a
/// key as another type does not compile.
/// \tparam T bool, std::int64_t, double, std::string or std::vector<std::string>
template <class T>
struct Key {
  std::string_view name;
};

}  // namespace v0
}  // namespace epl
