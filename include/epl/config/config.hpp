#pragma once
/// \file
/// \brief epl::Config — EPL's dotted configuration keys (config/keys.hpp) and a
/// program's own flags, each validated when it is set.
///
/// Sources, lowest to highest precedence: the default, the environment
/// (EPL_<CATEGORY>_<ATTRIBUTE>, e.g. EPL_PIPELINE_NUM_MICRO_BATCH), the command line
/// (--pipeline.num_micro_batch=4 or --pipeline.num_micro_batch 4), and code (Config::set).
/// An unknown key, flag or EPL_* variable, a wrong type or an invalid value is an epl::Error
/// naming it, the nearest known name and the valid values; a key whose feature this version
/// does not have yet is rejected as "not supported yet" unless it holds its default.
#include <algorithm>
#include <atomic>
#include <memory>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epl/config/keys.hpp"
#include "epl/core/linked.hpp"

#include <unistd.h>  // environ: the process environment (POSIX)

namespace epl {
inline namespace v0 {

namespace detail {
/// A value for a message (strings quoted, cut after 64 characters, their control characters
/// escaped); whole: every character as it is, for what compares or saves values (value_text).
EPL_LINKED std::string value_str(const ConfigValue& v, bool whole = false);
EPL_LINKED std::string type_str(const ConfigValue& v);
/// Levenshtein distance, for "did you mean".
EPL_LINKED std::size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate nearest to name, if it is near enough to be a typo of it.
EPL_LINKED std::string_view nearest(std::string_view name, const std::vector<std::string_view>& candidates);
}  // namespace detail

/// \brief The run's configuration: every EPL key and the program's flags, each with a value
namespace detail {
/// \brief cluster.rank_speeds' text: "" (even), "measure", or one positive finite number per rank,
/// comma-separated; an error names the item that is not. Returns the numbers (empty for "" and
/// "measure").
EPL_LINKED std::vector<double> parse_rank_speeds(std::string_view text);
}  // namespace detail
/// and where it came from.
class Config {
 public:
  enum class Source { kDefault, kEnvironment, kCommandLine, kCode };

  EPL_LINKED Config();

  /// \brief Defaults, then EPL_* environment variables, then --key=value arguments. Arguments
  /// that are not dotted keys are kept, in order, in program_args() for a program that parses
  /// its own; programs with flags of their own declare them instead (the overload below).
  ///
  /// A command line is the user's input: a mistake in it (an unknown key or option, a value of
  /// the wrong type or out of range) prints epl's message, naming the option and the fix, and
  /// exits with status 2, as getopt programs do, rather than escaping main as an exception.
  /// parse() is the same reading, throwing epl::Error instead, for a program that handles it.
  static Config from_args(int argc, const char* const* argv) {
    return or_exit(argc, argv, [&] { return parse(argc, argv); });
  }
  static Config from_args(int argc, char** argv) { return from_args(argc, const_cast<const char* const*>(argv)); }

  /// \brief As above, for a program with flags of its own: every argument must then be an EPL key
  /// or one of `flags` (--name=value, or --name value; a boolean flag alone means true), and
  /// anything else is an error naming the nearest known option. --help sets help_requested().
  template <class... T>
    requires(sizeof...(T) > 0)
  static Config from_args(int argc, const char* const* argv, const Flag<T>&... flags) {
    return or_exit(argc, argv, [&] { return parse(argc, argv, flags...); });
  }
  template <class... T>
    requires(sizeof...(T) > 0)
  static Config from_args(int argc, char** argv, const Flag<T>&... flags) {
    return from_args(argc, const_cast<const char* const*>(argv), flags...);
  }

  /// \brief from_args() that throws epl::Error on a bad command line or environment.
  static Config parse(int argc, const char* const* argv) {
    Config c;
    c.load_environment(environ);
    c.parse_args(argc, argv, false);
    return c;
  }
  template <class... T>
  static Config parse(int argc, const char* const* argv, const Flag<T>&... flags) {
    if constexpr (sizeof...(T) == 0) {
      return parse(argc, argv);
    } else {
      Config c;
      (c.declare(flags.spec()), ...);
      c.load_environment(environ);
      c.parse_args(argc, argv, true);
      return c;
    }
  }
  static Config parse(int argc, char** argv) { return parse(argc, const_cast<const char* const*>(argv)); }
  template <class... T>
    requires(sizeof...(T) > 0)
  static Config parse(int argc, char** argv, const Flag<T>&... flags) {
    return parse(argc, const_cast<const char* const*>(argv), flags...);
  }

  /// \brief Reads EPL_* variables from an environment block as from_args reads the process's own:
  /// NAME=VALUE strings ending with a null pointer, environ's layout. A test or fuzzer passes its
  /// own block rather than changing the process environment, which every thread shares.
  Config& load_environment(const char* const* envp) {
    read_environment(envp);
    return *this;
  }

  /// \brief Adds a program flag (its default as value).
  template <class T>
  Config& declare(const Flag<T>& flag) {
    return declare(flag.spec());
  }

  /// \brief Sets a key from code; code wins over the environment and the command line.
  EPL_LINKED Config& set(std::string_view key, ConfigValue v);
  /// \brief Sets a key from a C++ value: any integer, bool, floating point or string.
  template <class T>
    requires(!std::is_same_v<std::decay_t<T>, ConfigValue>)
  Config& set(std::string_view key, T&& v) {
    using U = std::decay_t<T>;
    if constexpr (std::is_same_v<U, bool>) return set(key, ConfigValue(v));
    else if constexpr (std::is_integral_v<U>) return set(key, ConfigValue(static_cast<std::int64_t>(v)));
    else if constexpr (std::is_floating_point_v<U>) return set(key, ConfigValue(static_cast<double>(v)));
    else if constexpr (std::is_same_v<U, std::vector<std::string>>) return set(key, ConfigValue(std::forward<T>(v)));
    else return set(key, ConfigValue(std::string(std::forward<T>(v))));
  }
  template <class T, class V>
  Config& set(Key<T> key, V&& v) {
    return set(key.name, std::forward<V>(v));
  }

  /// \brief Sets a key from text (as from the command line or environment).
  EPL_LINKED Config& set_text(std::string_view key, std::string_view text, Source src = Source::kCode);

  /// \brief The value of key as T (bool, std::int64_t, double, std::string or a list).
  template <class T>
  [[nodiscard]] T get(std::string_view key) const {
    entry(key).read->store(true, std::memory_order_relaxed);
    return peek<T>(key);
  }
  /// \brief The value of key as T without counting it as read (check_all_read): for code that
  /// adapts to a key that something else acts on (trainer.data_shard() to io.slicing, which
  /// data::slice_files reads).
  template <class T>
  [[nodiscard]] T peek(std::string_view key) const {
    const auto& e = entry(key);
    if constexpr (std::is_same_v<T, double>) {
      if (auto* i = std::get_if<std::int64_t>(&e.value)) return static_cast<double>(*i);
    }
    const T* v = std::get_if<T>(&e.value);
    EPL_CHECK(v != nullptr, "config key ", key, " holds ", detail::type_str(e.value), ", read as another type");
    return *v;
  }
  /// \brief The value of a typed key: `cfg.get(keys::max_splits)`.
  template <class T>
  [[nodiscard]] T get(Key<T> key) const {
    return get<T>(key.name);
  }
  /// \brief The value of a program flag: `cfg.get(steps)`.
  template <class T>
  [[nodiscard]] T get(const Flag<T>& flag) const {
    return get<T>(flag.spec().name);
  }
  /// \brief A key's value as text (strings quoted, whole: the ranks' agreement compares it and a
  /// checkpoint's manifest saves it).
  [[nodiscard]] std::string value_text(std::string_view key) const { return detail::value_str(entry(key).value, true); }
  /// \brief A key's value for a message: strings quoted, cut after 64 characters, their control
  /// characters escaped.
  [[nodiscard]] std::string value_shown(std::string_view key) const { return detail::value_str(entry(key).value); }
  /// \brief Where a key's value came from (a Source; Config::name_of(source) as text).
  [[nodiscard]] Source source(std::string_view key) const { return entry(key).source; }
  /// \brief A Source as describe() prints it: "default", "environment", "command line" or "code".
  [[nodiscard]] static constexpr std::string_view name_of(Source s) {
    constexpr std::string_view names[] = {"default", "environment", "command line", "code"};
    return names[static_cast<int>(s)];
  }
  template <class T>
  [[nodiscard]] Source source(Key<T> key) const {
    return source(key.name);
  }
  /// \brief The arguments that are neither EPL keys nor declared flags (from_args without flags),
  /// for a program that parses its own. A program that never asks for them has them refused at its
  /// first training step (check_all_read): they would have no effect.
  [[nodiscard]] const std::vector<std::string>& program_args() const noexcept {
    args_read_->store(true, std::memory_order_relaxed);
    return args_;
  }
  /// \brief --help or -h was given: print usage() and exit 0. Without flags of the program's own,
  /// --help also stays in program_args(), for a program that prints its own usage.
  /// A program given --help that never asks is refused at its first training step (check_all_read).
  [[nodiscard]] bool help_requested() const noexcept {
    help_read_->store(true, std::memory_order_relaxed);
    return help_;
  }
  /// \brief The program's flags with their defaults and help, and where EPL's keys are listed.
  [[nodiscard]] EPL_LINKED std::string usage(std::string_view program, std::string_view about = {}) const;

  /// \brief "key = value (source)" lines for every key, for logs.
  [[nodiscard]] EPL_LINKED std::string describe() const;
  /// \brief Fails naming the first EPL key that was given (not left at its default) but that
  /// nothing has read, or the program's own arguments (program_args()) when it never asked for them:
  /// a key that would have no effect is an error, not ignored. A Trainer calls
  /// it at its first step, when the program has built what reads its keys (io.slicing is read by
  /// data::slice_files, communication.timeout by epl::launch or epl::comm_options).
  EPL_LINKED void check_all_read() const;
  /// \brief The descriptions of every EPL key this version knows.
  static std::span<const ConfigKey> keys() { return detail::config_keys(); }
  /// \brief The names of the program's own flags (epl::Flag) this configuration holds, in name order.
  [[nodiscard]] std::vector<std::string_view> flags() const { return names(true); }

  /// \brief The environment variable of a key: EPL_ + upper-cased key with '.' -> '_'.
  EPL_LINKED static std::string env_name(std::string_view key);

 private:
  struct Entry {
    ConfigKey key;
    ConfigValue value;
    Source source;
    // Set when the value is read (get): copies of a Config share it, so a key read through any
    // copy counts.
    std::shared_ptr<std::atomic<bool>> read = std::make_shared<std::atomic<bool>>(false);
  };

  EPL_LINKED Config& declare(const ConfigKey& k);
  EPL_LINKED std::vector<std::string_view> names(bool program) const;
  /// command_line: an unknown key is named as the option the user typed (--key), else as the
  /// key the program's code named.
  EPL_LINKED Entry& entry(std::string_view key, bool command_line = false);
  const Entry& entry(std::string_view key) const { return const_cast<Config*>(this)->entry(key); }
  [[noreturn]] EPL_LINKED void unknown(std::string_view key, bool command_line) const;
  EPL_LINKED static std::string_view dotted_form(std::string_view key);
  EPL_LINKED void assign(Entry& e, ConfigValue v, Source src);
  EPL_LINKED static std::string what(const ConfigKey& k);
  // A choice's other name (ConfigKey::aliases) replaced by the choice.
  EPL_LINKED static void canonical(const ConfigKey& k, ConfigValue& v);
  EPL_LINKED static ConfigValue coerce(const ConfigKey& k, ConfigValue v);
  EPL_LINKED static void check_value(const ConfigKey& k, const ConfigValue& v);
  EPL_LINKED static ConfigValue parse(const Entry& e, std::string_view text);
  EPL_LINKED static const detail::LibraryVariable* library_variable(std::string_view name);
  EPL_LINKED void read_environment(const char* const* envp);
  EPL_LINKED void parse_args(int argc, const char* const* argv, bool strict);

  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> args_;
  std::shared_ptr<std::atomic<bool>> args_read_ = std::make_shared<std::atomic<bool>>(false);  // shared by copies, as Entry::read
  std::shared_ptr<std::atomic<bool>> help_read_ = std::make_shared<std::atomic<bool>>(false);
  bool help_ = false;

  template <class Read>
  static Config or_exit(int argc, const char* const* argv, Read&& read) {
    try {
      return read();
    } catch (const Error& e) {
      const std::string_view program = argc > 0 && argv[0] != nullptr ? argv[0] : "epl";
      std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), e.detail().c_str());
      std::fflush(stderr);
      std::exit(2);
    }
  }
};

}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/config/config.ipp"
#endif
