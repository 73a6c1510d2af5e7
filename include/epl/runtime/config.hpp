#pragma once
/// \file
/// \brief epl::Config — EPL's dotted configuration keys, with EPL's defaults, validated.
///
/// Sources, lowest to highest precedence: the default, the environment
/// (EPL_<CATEGORY>_<ATTRIBUTE>, e.g. EPL_PIPELINE_NUM_MICRO_BATCH), the command line
/// (--pipeline.num_micro_batch=4), and code (Config::set). Every value is checked when it is
/// set: an unknown key, a wrong type or an invalid value is an epl::Error naming the key and
/// the valid choices; a key whose feature this version does not have yet is rejected as
/// "not supported yet" unless it holds its default, never silently ignored.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {

/// \brief One configuration value.
using ConfigValue = std::variant<bool, std::int64_t, double, std::string>;

/// \brief The description of one key: its type, default, valid values and whether this
/// version implements values other than the default.
struct ConfigKey {
  std::string_view name;
  ConfigValue default_value;
  std::vector<std::string_view> choices;  ///< strings: the valid values (empty: free text)
  std::int64_t min = 0;                   ///< integers: the smallest valid value
  bool implemented = false;               ///< false: only the default is accepted for now
  std::string_view help;
};

namespace detail {
inline const std::vector<ConfigKey>& config_keys() {
  using S = std::string;
  using I = std::int64_t;
  static const std::vector<ConfigKey> keys = {
      {"pipeline.num_micro_batch", I{1}, {}, 1, true, "micro-batches per step; gradient accumulation with one task graph"},
      {"pipeline.num_stages", I{1}, {}, 1, false, "stages for automatic pipeline partition"},
      {"pipeline.strategy", S{"PreferBackward"}, {"PreferBackward", "PreferForward"}, 0, false, "pipeline schedule: 1F1B or GPipe"},
      {"gradient_checkpoint.type", S{""}, {"", "collection", "auto"}, 0, false, "which activations to recompute"},
      {"gradient_checkpoint.end_taskgraph", I{-1}, {}, -1, false, "last task graph that checkpoints"},
      {"gradient_checkpoint.check_gradients", false, {}, 0, false, "compare checkpointed gradients with plain ones"},
      {"zero.level", S{""}, {"", "v0", "v1"}, 0, false, "ZeRO: v0 shards optimizer state, v1 also gradients"},
      {"offload.level", S{""}, {"", "v0"}, 0, false, "keep weights in host memory"},
      {"amp.level", S{""}, {"", "O1"}, 0, false, "automatic mixed precision"},
      {"amp.debug_log", false, {}, 0, false, "log loss-scale changes"},
      {"amp.loss_scale", S{"dynamic"}, {}, 0, false, "\"dynamic\" or a positive number"},
      {"optimizer.num_apply_group", I{1}, {}, 1, false, "apply the optimizer in this many groups"},
      {"cluster.device_place_prefer_intra_node", true, {}, 0, false, "place a model replica inside one node"},
      {"cluster.run_visible_devices", S{""}, {}, 0, false, "comma-separated device ids to use"},
      {"cluster.colocate_split_and_replicate", false, {}, 0, false, "put split and replicate task graphs on the same devices"},
      {"communication.num_communicators", I{2}, {}, 1, false, "communicators used for gradient traffic"},
      {"communication.sparse_as_dense", false, {}, 0, false, "reduce sparse gradients as dense"},
      {"communication.max_splits", I{5}, {}, 1, true, "gradient fusion buckets"},
      {"communication.fp16", false, {}, 0, true, "send gradients as fp16"},
      {"communication.fp16_scale", I{128}, {}, 1, true, "scale applied before the fp16 cast"},
      {"communication.clip_after_allreduce", true, {}, 0, true, "clip the averaged gradient (true) or per replica (false)"},
      {"communication.gradients_reduce_method", S{"mean"}, {"mean", "sum"}, 0, true, "how replicas' gradients combine"},
      {"io.slicing", false, {}, 0, true, "divide input files among data-parallel ranks"},
      {"io.unbalanced_io_slicing", false, {}, 0, true, "allow uneven file shares"},
      {"io.drop_last_files", false, {}, 0, true, "drop files that do not divide evenly"},
      {"auto.auto_parallel", false, {}, 0, false, "search the parallel strategy automatically"},
  };
  return keys;
}

inline std::string value_str(const ConfigValue& v) {
  return std::visit([](const auto& x) -> std::string {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
    else if constexpr (std::is_same_v<T, std::string>) return "\"" + x + "\"";
    else return std::to_string(x);
  }, v);
}
inline std::string type_str(const ConfigValue& v) {
  constexpr const char* names[] = {"a boolean (true/false)", "an integer", "a number", "a string"};
  return names[v.index()];
}
}  // namespace detail

/// \brief The run's configuration: every EPL key, each with a value and where it came from.
class Config {
 public:
  enum class Source { kDefault, kEnvironment, kCommandLine, kCode };

  Config() {
    for (const auto& k : detail::config_keys()) entries_.emplace(std::string(k.name), Entry{&k, k.default_value, Source::kDefault});
  }

  /// \brief Defaults, then EPL_* environment variables, then --key=value arguments. Arguments
  /// that are not dotted keys are kept, in order, in program_args() for the program's own use.
  static Config from_args(int argc, const char* const* argv) {
    Config c;
    c.load_environment();
    for (int i = 1; i < argc; ++i) c.parse_arg(argv[i]);
    return c;
  }
  static Config from_args(int argc, char** argv) { return from_args(argc, const_cast<const char* const*>(argv)); }

  /// \brief Sets a key from code; code wins over the environment and the command line.
  Config& set(std::string_view key, ConfigValue v) {
    assign(key, coerce(entry(key), std::move(v)), Source::kCode);
    return *this;
  }
  /// \brief Sets a key from a C++ value: any integer, bool, floating point or string.
  template <class T>
    requires(!std::is_same_v<std::decay_t<T>, ConfigValue>)
  Config& set(std::string_view key, T&& v) {
    using U = std::decay_t<T>;
    if constexpr (std::is_same_v<U, bool>) return set(key, ConfigValue(v));
    else if constexpr (std::is_integral_v<U>) return set(key, ConfigValue(static_cast<std::int64_t>(v)));
    else if constexpr (std::is_floating_point_v<U>) return set(key, ConfigValue(static_cast<double>(v)));
    else return set(key, ConfigValue(std::string(std::forward<T>(v))));
  }

  /// \brief Sets a key from text (as from the command line or environment).
  Config& set_text(std::string_view key, std::string_view text, Source src = Source::kCode) {
    assign(key, parse(entry(key), text), src);
    return *this;
  }

  /// \brief The value of key as T (bool, std::int64_t, double or std::string).
  template <class T>
  [[nodiscard]] T get(std::string_view key) const {
    const auto& e = entry(key);
    if constexpr (std::is_same_v<T, double>) {
      if (auto* i = std::get_if<std::int64_t>(&e.value)) return static_cast<double>(*i);
    }
    const T* v = std::get_if<T>(&e.value);
    EPL_CHECK(v != nullptr, "config key ", key, " holds ", detail::type_str(e.value), ", read as another type");
    return *v;
  }
  [[nodiscard]] Source source(std::string_view key) const { return entry(key).source; }
  [[nodiscard]] const std::vector<std::string>& program_args() const noexcept { return args_; }

  /// \brief "key = value (source)" lines for every key, for logs.
  [[nodiscard]] std::string describe() const {
    constexpr const char* src[] = {"default", "environment", "command line", "code"};
    std::string out;
    for (const auto& [name, e] : entries_)
      out += name + " = " + detail::value_str(e.value) + " (" + src[static_cast<int>(e.source)] + ")\n";
    return out;
  }
  /// \brief The descriptions of every key this version knows.
  static std::span<const ConfigKey> keys() { return detail::config_keys(); }

  /// \brief The environment variable of a key: EPL_ + upper-cased key with '.' -> '_'.
  static std::string env_name(std::string_view key) {
    std::string s = "EPL_";
    for (char ch : key) s += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
  }

 private:
  struct Entry {
    const ConfigKey* key;
    ConfigValue value;
    Source source;
  };

  const Entry& entry(std::string_view key) const {
    auto it = entries_.find(std::string(key));
    if (it == entries_.end()) unknown(key);
    return it->second;
  }
  [[noreturn]] static void unknown(std::string_view key) {
    std::string near;
    auto dot = key.find('.');
    for (const auto& k : detail::config_keys())
      if (dot != std::string_view::npos && k.name.substr(0, k.name.find('.')) == key.substr(0, dot))
        near += (near.empty() ? "" : ", ") + std::string(k.name);
    EPL_FAIL("unknown config key \"", key, "\"", near.empty() ? "" : "; keys of that category: ", near,
             near.empty() ? "; see docs/config.md for the keys epl knows" : "");
  }
  void assign(std::string_view key, ConfigValue v, Source src) {
    auto& e = entries_.find(std::string(key))->second;
    if (src < e.source) return;  // a lower-precedence source never overrides a higher one
    if (!e.key->implemented && v != e.key->default_value)
      EPL_FAIL("config key ", key, " = ", detail::value_str(v), " is not supported yet in this version of epl (",
               e.key->help, "); leave it at its default ", detail::value_str(e.key->default_value));
    e.value = std::move(v);
    e.source = src;
  }
  static ConfigValue coerce(const Entry& e, ConfigValue v) {
    const auto& k = *e.key;
    if (std::holds_alternative<std::int64_t>(v) && std::holds_alternative<double>(k.default_value))
      v = static_cast<double>(std::get<std::int64_t>(v));
    EPL_CHECK(v.index() == k.default_value.index(), "config key ", k.name, " takes ", detail::type_str(k.default_value),
              ", got ", detail::type_str(v), " ", detail::value_str(v));
    check_value(k, v);
    return v;
  }
  static void check_value(const ConfigKey& k, const ConfigValue& v) {
    if (auto* i = std::get_if<std::int64_t>(&v))
      EPL_CHECK(*i >= k.min, "config key ", k.name, " = ", *i, " is out of range; it must be at least ", k.min);
    if (auto* s = std::get_if<std::string>(&v)) {
      if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), *s) == k.choices.end()) {
        std::string valid;
        for (auto c : k.choices) valid += (valid.empty() ? "\"" : ", \"") + std::string(c) + "\"";
        EPL_FAIL("config key ", k.name, " = \"", *s, "\" is not valid; choose one of ", valid);
      }
      if (k.name == "amp.loss_scale" && *s != "dynamic") {
        double x = 0;
        auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), x);
        EPL_CHECK(ec == std::errc{} && p == s->data() + s->size() && x > 0, "config key amp.loss_scale = \"", *s,
                  "\" is not valid; use \"dynamic\" or a positive number");
      }
    }
  }
  static ConfigValue parse(const Entry& e, std::string_view text) {
    const auto& k = *e.key;
    auto bad = [&]() -> ConfigValue {
      EPL_FAIL("config key ", k.name, " takes ", detail::type_str(k.default_value), ", got \"", text, "\"");
    };
    ConfigValue v;
    if (std::holds_alternative<bool>(k.default_value)) {
      if (text == "true" || text == "True" || text == "1") v = true;
      else if (text == "false" || text == "False" || text == "0") v = false;
      else return bad();
    } else if (std::holds_alternative<std::int64_t>(k.default_value)) {
      std::int64_t x = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec != std::errc{} || p != text.data() + text.size()) return bad();
      v = x;
    } else if (std::holds_alternative<double>(k.default_value)) {
      double x = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec != std::errc{} || p != text.data() + text.size()) return bad();
      v = x;
    } else {
      v = std::string(text);
    }
    check_value(k, v);
    return v;
  }
  void load_environment() {
    for (const auto& k : detail::config_keys())
      if (const char* s = std::getenv(env_name(k.name).c_str())) set_text(k.name, s, Source::kEnvironment);
  }
  void parse_arg(std::string_view a) {
    if (a.substr(0, 2) != "--") return args_.emplace_back(a), void();
    auto body = a.substr(2);
    auto eq = body.find('=');
    auto key = body.substr(0, eq);
    if (key.find('.') == std::string_view::npos) return args_.emplace_back(a), void();
    EPL_CHECK(eq != std::string_view::npos, "command-line config key --", key, " needs a value: --", key, "=VALUE");
    set_text(key, body.substr(eq + 1), Source::kCommandLine);
  }

  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> args_;
};

}  // namespace v0
}  // namespace epl
