#pragma once
/// \file
/// \brief The bodies of epl::Config's members and of its helpers (config/config.hpp declares
/// them): included by that header in a header-only program, or compiled once into epl::precompiled
/// (core/linked.hpp).
#include "epl/config/config.hpp"

namespace epl {
inline namespace v0 {

namespace detail {
EPL_LINKED std::string value_str(const ConfigValue& v, bool whole) {
  // cut, two ranks' checkpoint.dir differing past the 64th character were taken to agree
  const auto quote = [whole](const std::string& text) { return whole ? "\"" + text + "\"" : detail::quoted(text); };
  return std::visit([&quote](const auto& x) -> std::string {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
    else if constexpr (std::is_same_v<T, std::string>) return quote(x);
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      std::string s = "[";
      for (const auto& e : x) s += (s.size() > 1 ? ", " : "") + quote(e);
      return s + "]";
    } else if constexpr (std::is_same_v<T, double>) {
      return concat(x);
    } else {
      return std::to_string(x);
    }
  }, v);
}

EPL_LINKED std::string type_str(const ConfigValue& v) {
  constexpr const char* names[] = {"a boolean (true, false, 1 or 0)", "an integer", "a number", "a string",
                                   "a list of strings (give it once per value)"};
  return names[v.index()];
}

EPL_LINKED std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

EPL_LINKED std::string_view nearest(std::string_view name, const std::vector<std::string_view>& candidates) {
  const auto lower = [](std::string_view s) {  // --STEPS, EPL_lr_warmup_steps: a name in the wrong case is near
    std::string out(s);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  const std::string wanted = lower(name);
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(3, name.size() / 4) + 1;
  for (auto c : candidates)
    if (auto d = edit_distance(wanted, lower(c)); d < best_d) {
      best = c;
      best_d = d;
    }
  return best;
}

EPL_LINKED std::vector<double> parse_rank_speeds(std::string_view text) {
  std::vector<double> speeds;
  if (text.empty() || text == "measure") return speeds;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    std::string item(text.substr(at, end - at));
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    double v = 0;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    EPL_CHECK(!item.empty() && ec == std::errc{} && p == item.data() + item.size(), "config key cluster.rank_speeds = ", quoted(text),
              ": ", quoted(item), " is not a number; give each rank's relative speed, comma-separated (\"1,0.5\": rank 1 half as "
              "fast), or \"measure\"");
    EPL_CHECK(std::isfinite(v) && v > 0, "config key cluster.rank_speeds = ", quoted(text), ": rank ", speeds.size(), "'s speed ",
              item, " is not a positive finite number");
    speeds.push_back(v);
    at = end + 1;
  }
  return speeds;
}
}  // namespace detail

EPL_LINKED Config::Config() {
  for (const auto& k : detail::config_keys()) entries_.emplace(std::string(k.name), Entry{k, k.default_value, Source::kDefault});
}

EPL_LINKED Config& Config::set(std::string_view key, ConfigValue v) {
  auto& e = entry(key);
  assign(e, coerce(e.key, std::move(v)), Source::kCode);
  return *this;
}

EPL_LINKED Config& Config::set_text(std::string_view key, std::string_view text, Source src) {
  auto& e = entry(key, src == Source::kCommandLine);
  assign(e, parse(e, text), src);
  return *this;
}

EPL_LINKED std::string Config::usage(std::string_view program, std::string_view about) const {
  std::string out = "usage: " + std::string(program) + " [--flag=value]... [--epl.key=value]...\n";
  if (!about.empty()) out += std::string(about) + "\n";
  out += "flags:\n";
  for (const auto& [name, e] : entries_) {
    if (!e.key.program) continue;
    std::string limits;
    for (auto c : e.key.choices) limits += (limits.empty() ? ", one of " : "|") + std::string(c);
    out += "  --" + name + " (" + detail::type_str(e.key.default_value) + ", default " + detail::value_str(e.key.default_value) +
           limits + ")  " + std::string(e.key.help) + "\n";
  }
  out += "EPL keys (--category.attribute=value or EPL_CATEGORY_ATTRIBUTE): docs/config.md; now (\"\" (unset): the program decides, "
         "e.g. zero.level, offload.level and amp.level take its compiled epl::Zero, epl::Offload and epl::Amp):\n";
  for (const auto& [name, e] : entries_) {
    if (e.key.program) continue;
    const auto* text = std::get_if<std::string>(&e.value);
    const bool unset = text && text->empty() && std::find(e.key.choices.begin(), e.key.choices.end(), "") != e.key.choices.end();
    out += "  --" + name + "=" + detail::value_str(e.value) + (unset ? " (unset)" : "") + "\n";
  }
  return out;
}

EPL_LINKED std::string Config::describe() const {
  std::string out;
  for (const auto& [name, e] : entries_) out += name + " = " + detail::value_str(e.value) + " (" + std::string(name_of(e.source)) + ")\n";
  return out;
}

EPL_LINKED void Config::check_all_read() const {
  // from_args without flags keeps what is not an EPL key for a program that parses its own: one
  // that never asked for them ignored --bogus=3 and --help (a stranger's finding)
  if (!args_.empty() && !args_read_->load(std::memory_order_relaxed)) {
    std::string given;
    for (const auto& a : args_) given += (given.empty() ? "" : " ") + a;
    EPL_FAIL("the command line's ", detail::quoted(given), " is neither an EPL key nor an option this program declared, and the "
             "program never read its own arguments (Config::program_args()), so it would have no effect; declare the program's "
             "options as epl::Flag and pass them to Config::from_args(argc, argv, flags...), which refuses what it does not "
             "know, or drop the argument");
  }
  // a program with flags of its own that never asked trained when given --help (a stranger's finding);
  // one that reads its own arguments (program_args(), where --help stays) may answer it there
  EPL_CHECK(!help_ || help_read_->load(std::memory_order_relaxed) || args_read_->load(std::memory_order_relaxed),
            "--help was given, but this program never asked for it (Config::help_requested()), so it would train instead; after Config::from_args, print cfg.usage(argv[0]) and exit "
            "when cfg.help_requested(), or drop --help");
  for (const auto& [name, e] : entries_) {
    if (e.key.program || e.source == Source::kDefault || e.read->load(std::memory_order_relaxed)) continue;
    const std::string given = "config key " + name + " = " + detail::value_str(e.value) + " was given, but ";
    if (name.rfind("io.", 0) == 0)
      EPL_FAIL(given, "this program reads no files through data::slice_files, where the io.* keys apply; read the training files "
               "with data::slice_files(files, trainer.data_shard(), cfg), or drop the key");
    if (name == "communication.timeout")
      EPL_FAIL(given, "this program started no ranks that read it (a Trainer on one device has no peers to wait for; "
               "comm::run_threads with its own options does not read it): pass {.comm = epl::comm_options(cfg)} to run_threads, "
               "start the ranks with epl::launch, or drop the key");
    EPL_FAIL(given, "nothing in this program read it by its first training step, so it would have no effect; drop the key");
  }
}

EPL_LINKED std::string Config::env_name(std::string_view key) {
  std::string s = "EPL_";
  for (char ch : key) s += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

EPL_LINKED Config& Config::declare(const ConfigKey& k) {
  EPL_CHECK(entries_.find(k.name) == entries_.end(), "flag --", k.name, " is declared twice, or shadows an EPL key");
  // --help and -h ask for usage() (help_requested()): a flag of that name was accepted and never set (a stranger's finding)
  EPL_CHECK(k.name != "help" && k.name != "h", "flag --", k.name, " shadows --help, which asks for the usage (Config::help_requested()); "
            "name the flag otherwise");
  entries_.emplace(std::string(k.name), Entry{k, k.default_value, Source::kDefault});
  return *this;
}

EPL_LINKED std::vector<std::string_view> Config::names(bool program) const {
  std::vector<std::string_view> out;
  for (const auto& [name, e] : entries_)
    if (e.key.program == program) out.push_back(name);
  return out;
}

EPL_LINKED Config::Entry& Config::entry(std::string_view key, bool command_line) {
  auto it = entries_.find(key);
  if (it == entries_.end()) unknown(key, command_line);
  return it->second;
}

EPL_LINKED void Config::unknown(std::string_view key, bool command_line) const {
  const bool dotted = key.find('.') != std::string_view::npos;
  std::vector<std::string_view> candidates;  // dotted: EPL's keys; else the flags and epl's undotted keys
  for (const auto& [name, e] : entries_)
    if ((name.find('.') != std::string::npos) == dotted) candidates.push_back(name);
  auto near = detail::nearest(key, candidates);
  if (!dotted && near.empty()) near = dotted_form(key);  // zero_level, num_micro_batch: an EPL key without its dot
  if (dotted && near.empty()) {  // the right name in another category: communication.run_visible_devices
    const auto leaf = key.substr(key.find('.') + 1);
    for (auto c : candidates)
      if (c.substr(c.find('.') + 1) == leaf) near = c;
  }
  std::string same_category;
  if (dotted)
    for (const auto& k : detail::config_keys())
      if (k.name.substr(0, k.name.find('.')) == key.substr(0, key.find('.')))
        same_category += (same_category.empty() ? "" : ", ") + std::string(k.name);
  const bool near_dotted = near.find('.') != std::string_view::npos;
  const std::string dashes = command_line ? "--" : "";  // from code, cfg.set("steps", 3) names a flag without them
  std::string hint = near.empty() ? std::string(";") : "; did you mean " + (near_dotted ? "" : dashes) + std::string(near) + "?";
  if (dotted)
    EPL_FAIL("unknown config key ", detail::quoted(key), hint,
             !same_category.empty() ? " keys of that category: " + same_category
                                    : std::string(near.empty() ? " see" : " See") + " docs/config.md for the keys epl knows");
  std::string flags;
  for (auto n : names(true)) flags += (flags.empty() ? dashes : ", " + dashes) + std::string(n);
  const bool sentence = hint != ";";  // after "did you mean ...?" a sentence begins; after ";" a clause
  EPL_FAIL(command_line ? "unknown option " : "unknown key ", detail::quoted(dashes + std::string(key)),
           key.empty() ? " (no name before the =)" : "", hint,
           flags.empty() ? (sentence ? " This program has no options of its own" : " this program has no options of its own")
                         : (sentence ? " This program's options: " : " this program's options: ") + flags,
           "; EPL keys are dotted (docs/config.md); --help lists everything");
}

EPL_LINKED void Config::assign(Entry& e, ConfigValue v, Source src) {
  if (src < e.source) return;  // a lower-precedence source never overrides a higher one
  if (!e.key.implemented && v != e.key.default_value)
    EPL_FAIL("config key ", e.key.name, " = ", detail::value_str(v), " is not supported yet in this version of epl (", e.key.help,
             "); leave it at its default ", detail::value_str(e.key.default_value));
  if (auto* list = std::get_if<std::vector<std::string>>(&v); list && src == Source::kCommandLine && e.source == src) {
    auto& mine = std::get<std::vector<std::string>>(e.value);  // a list flag given again: append
    mine.insert(mine.end(), list->begin(), list->end());
    return;
  }
  // a scalar given twice on one command line: one of the two is a mistake, and which is not ours to guess
  EPL_CHECK(!(src == Source::kCommandLine && e.source == src), what(e.key), " is given twice on the command line (",
            detail::value_str(e.value), " and ", detail::value_str(v), "); give it once");
  e.value = std::move(v);
  e.source = src;
}

EPL_LINKED std::string Config::what(const ConfigKey& k) {
  return k.program ? "option --" + std::string(k.name) : "config key " + std::string(k.name);
}

EPL_LINKED void Config::canonical(const ConfigKey& k, ConfigValue& v) {
  if (auto* s = std::get_if<std::string>(&v))
    for (const auto& [alias, choice] : k.aliases)
      if (*s == alias) {
        *s = std::string(choice);
        return;
      }
}

EPL_LINKED ConfigValue Config::coerce(const ConfigKey& k, ConfigValue v) {
  if (std::holds_alternative<std::int64_t>(v) && std::holds_alternative<double>(k.default_value))
    v = static_cast<double>(std::get<std::int64_t>(v));
  if (std::holds_alternative<std::string>(v) && std::holds_alternative<std::vector<std::string>>(k.default_value))
    v = std::vector<std::string>{std::get<std::string>(v)};
  const bool number_as_text = std::holds_alternative<std::string>(k.default_value) &&
                              (std::holds_alternative<std::int64_t>(v) || std::holds_alternative<double>(v));
  EPL_CHECK(v.index() == k.default_value.index(), what(k), " takes ", detail::type_str(k.default_value), ", got ",
            detail::type_str(v), " ", detail::value_str(v),
            number_as_text ? "; pass the number as a string: \"" + detail::value_str(v) + "\"" : std::string());
  canonical(k, v);
  check_value(k, v);
  return v;
}

namespace detail {
// A key's bound as a message gives it: an integral one as digits (1048576, not 1.04858e+06).
EPL_LINKED std::string bound_text(double b) {
  return b == std::floor(b) && std::abs(b) < 1e15 ? std::to_string(static_cast<std::int64_t>(b)) : detail::concat(b);
}
// Where a number too large (or too small) for its type must lie: the key's own range on the side the
// number left it, where the key has one (communication.timeout's 0.001 to 86400), else the type's.
EPL_LINKED std::string range_text(const ConfigKey& k, std::string_view text, const char* type_range) {
  const bool low = std::isfinite(k.min), high = std::isfinite(k.max);
  if (text.find("e-") != std::string_view::npos || text.find("E-") != std::string_view::npos) return type_range;  // underflow
  const std::string top = (k.below_max ? "below " : "") + bound_text(k.max);
  if (low && high) return "it must be from " + bound_text(k.min) + " to " + top;
  if (text.starts_with('-') ? low : high) return low ? "it must be at least " + bound_text(k.min) : (k.below_max ? "it must be " : "it must be at most ") + top;
  return type_range;
}
}  // namespace detail

EPL_LINKED void Config::check_value(const ConfigKey& k, const ConfigValue& v) {
  auto range = [&](double x, const std::string& shown) {
    EPL_CHECK(x >= k.min, what(k), " = ", shown, " is out of range; it must be at least ", detail::bound_text(k.min));
    EPL_CHECK(k.below_max ? x < k.max : x <= k.max, what(k), " = ", shown, " is out of range; it must be ",
              k.below_max ? "below " : "at most ", detail::bound_text(k.max));
  };
  if (auto* i = std::get_if<std::int64_t>(&v)) range(static_cast<double>(*i), std::to_string(*i));
  if (auto* d = std::get_if<double>(&v)) {
    EPL_CHECK(std::isfinite(*d), what(k), " = ", *d, " is not a finite number");
    range(*d, detail::concat(*d));
  }
  auto check_choice = [&](const std::string& s) {
    if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end()) {
      std::string valid, also;
      for (auto c : k.choices) valid += (valid.empty() ? "\"" : ", \"") + std::string(c) + "\"";
      for (const auto& [alias, choice] : k.aliases) also += (also.empty() ? "" : ", ") + std::string(alias) + " for \"" + std::string(choice) + "\"";
      EPL_FAIL(what(k), " = ", detail::quoted(s), " is not valid; choose one of ", valid, also.empty() ? "" : " (also accepted: " + also + ")");
    }
  };
  if (auto* s = std::get_if<std::string>(&v)) {
    check_choice(*s);
    if (k.name == "cluster.rank_speeds") (void)detail::parse_rank_speeds(*s);
    if (k.name == "amp.loss_scale" && *s != "dynamic") {
      double x = 0;
      auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), x);
      const bool number = ec == std::errc{} && p == s->data() + s->size() && !std::isnan(x);
      EPL_CHECK(number && std::isfinite(x) && x >= 1 && x <= 0x1p64, "config key amp.loss_scale = ", detail::quoted(*s),
                " is not valid; use \"dynamic\" or a number from 1 to 2^64",
                !number ? ""
                : x < 1 ? " (a scale below 1 shrinks the gradients toward underflow instead of keeping them above it)"
                        : " (a larger scale overflows f16 and bf16 alike: their largest values are 65504 and about 3.4e38)");
    }
  }
  if (auto* list = std::get_if<std::vector<std::string>>(&v))
    for (const auto& s : *list) check_choice(s);
}

EPL_LINKED ConfigValue Config::parse(const Entry& e, std::string_view text) {
  const auto& k = e.key;
  auto bad = [&]() -> ConfigValue { EPL_FAIL(what(k), " takes ", detail::type_str(k.default_value), ", got ", detail::quoted(text)); };
  ConfigValue v;
  if (std::holds_alternative<bool>(k.default_value)) {
    if (text == "true" || text == "True" || text == "1") v = true;
    else if (text == "false" || text == "False" || text == "0") v = false;
    else return bad();
  } else if (std::holds_alternative<std::int64_t>(k.default_value)) {
    std::int64_t x = 0;  // digits and an optional '-' only: " 2", "+2" and "2x" are not integers
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    EPL_CHECK(ec != std::errc::result_out_of_range || p != text.data() + text.size(), what(k), " = ", detail::quoted(text),
              " is out of range: ", detail::range_text(k, text, "an integer here lies between -2^63 and 2^63 - 1"));
    if (text.empty() || ec != std::errc{} || p != text.data() + text.size()) return bad();
    v = x;
  } else if (std::holds_alternative<double>(k.default_value)) {
    double x = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    EPL_CHECK(ec != std::errc::result_out_of_range || p != text.data() + text.size(), what(k), " = ", detail::quoted(text),
              " is out of range: ", detail::range_text(k, text, "a number here has a magnitude between 2.2e-308 and 1.8e308, or is 0"));
    if (text.empty() || ec != std::errc{} || p != text.data() + text.size()) return bad();
    v = x;
  } else if (std::holds_alternative<std::vector<std::string>>(k.default_value)) {
    v = std::vector<std::string>{std::string(text)};
  } else {
    v = std::string(text);
  }
  canonical(k, v);
  check_value(k, v);
  return v;
}

EPL_LINKED const detail::LibraryVariable* Config::library_variable(std::string_view name) {
  for (const auto& v : detail::library_variables())
    if (v.name == name) return &v;
  return nullptr;
}

EPL_LINKED void Config::read_environment(const char* const* envp) {
  std::vector<std::string_view> known;
  std::map<std::string, std::string_view> key_of;
  for (const auto& k : detail::config_keys()) key_of.emplace(env_name(k.name), k.name);
  for (const auto& [env, key] : key_of) known.push_back(env);
  for (const auto& v : detail::library_variables()) known.push_back(v.name);
  for (const char* const* p = envp; p && *p; ++p) {
    std::string_view var(*p);
    if (var.substr(0, 4) != "EPL_") continue;
    auto name = var.substr(0, var.find('='));
    auto value = var.substr(std::min(var.size(), name.size() + 1));
    if (auto it = key_of.find(std::string(name)); it != key_of.end()) {
      try {
        set_text(it->second, value, Source::kEnvironment);
      } catch (const Error& e) {  // say where the value came from
        EPL_FAIL("environment variable ", std::string(name), ": ", e.detail());
      }
    } else if (const auto* lib = library_variable(name)) {
      std::int64_t n = 0;  // digits only: " 2", "+2" and "2x" are not numbers
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      EPL_CHECK(!value.empty() && ec == std::errc{} && end == value.data() + value.size() && n >= lib->min && n <= lib->max,
                "environment variable ", std::string(name), "=", detail::quoted(value), " is not valid (", lib->help, "); set a whole "
                "number from ", lib->min, " to ", lib->max, ", or unset it");
    } else if (std::find(known.begin(), known.end(), name) == known.end()) {
      auto near = detail::nearest(name, known);
      std::string hint;
      if (!near.empty()) {
        auto k = key_of.find(std::string(near));
        hint = "; did you mean " + std::string(near) + (k != key_of.end() ? " (" + std::string(k->second) + ")" : "") + "?";
      }
      EPL_FAIL("unknown environment variable ", std::string(name), hint.empty() ? ";" : hint,
               " epl reads EPL_<CATEGORY>_<ATTRIBUTE> for its config keys (docs/config.md), EPL_NUM_RANKS and EPL_GPU_PER_WORKER; "
               "unset it or correct the name");
    }
  }
}

EPL_LINKED void Config::parse_args(int argc, const char* const* argv, bool strict) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i] ? argv[i] : "";
    if (a == "--help" || a == "-h") {
      help_ = true;
      if (strict) continue;  // without flags of its own, the program may print its own usage too
    }
    EPL_CHECK(!strict || !a.starts_with("--help="), "option --help takes no value (got ", detail::quoted(a), "); give --help alone");
    if (a.substr(0, 2) != "--" || a.size() == 2) {
      EPL_CHECK(!strict, "unexpected argument ", detail::quoted(a), "; options are given as --name=value (--help lists them)");
      args_.emplace_back(a);
      continue;
    }
    auto body = a.substr(2);
    auto eq = body.find('=');
    auto key = body.substr(0, eq);
    const bool dotted = key.find('.') != std::string_view::npos;
    auto known = entries_.find(key);
    const bool library_key = known != entries_.end() && !known->second.key.program;  // epl's own undotted keys (trace)
    if (!dotted && !strict && !library_key) {
      const auto epl_key = dotted_form(key);  // --zero_level: EPL's zero.level mistyped, not the program's own
      EPL_CHECK(epl_key.empty(), "option --", key, " is not EPL's key ", epl_key, ", which is dotted: write --", epl_key,
                body.substr(key.size()), " (or declare --", key, " as the program's own flag)");
      args_.emplace_back(a);
      continue;
    }
    auto& e = entry(key, true);
    if (eq != std::string_view::npos) {
      assign(e, parse(e, body.substr(eq + 1)), Source::kCommandLine);
      continue;
    }
    // --name value, or a boolean flag alone (true), or followed by its value
    const bool boolean = std::holds_alternative<bool>(e.key.default_value);
    std::string_view next = i + 1 < argc && argv[i + 1] ? argv[i + 1] : "";
    const bool next_is_bool = next == "true" || next == "false" || next == "True" || next == "False" || next == "0" || next == "1";
    if (boolean && !next_is_bool) {
      assign(e, true, Source::kCommandLine);
      continue;
    }
    EPL_CHECK(i + 1 < argc && (boolean || next.substr(0, 2) != "--"), what(e.key), " needs a value: --", key, "=VALUE");
    assign(e, parse(e, next), Source::kCommandLine);
    ++i;
  }
}

EPL_LINKED std::string_view Config::dotted_form(std::string_view key) {
  // an EPL key written with '_' or '-' for its dot (zero_level, zero-level), or its attribute alone
  // where only one key has it (num_micro_batch)
  std::string_view alone;
  int with_attribute = 0;
  for (const auto& k : detail::config_keys()) {
    const auto dot = k.name.find('.');
    if (dot == std::string_view::npos) continue;
    if (k.name.size() == key.size() && (key[dot] == '_' || key[dot] == '-') && k.name.substr(0, dot) == key.substr(0, dot) &&
        k.name.substr(dot + 1) == key.substr(dot + 1))
      return k.name;
    if (k.name.substr(dot + 1) == key) {
      alone = k.name;
      ++with_attribute;
    }
  }
  return with_attribute == 1 ? alone : std::string_view();
}

}  // namespace v0
}  // namespace epl
