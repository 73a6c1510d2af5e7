// libFuzzer target: epl::Config over untrusted text. The input, split on NUL or newline, is in
// turn a command line (lenient and with program flags), an environment block, and values for every
// key. Bad input must end in an exception; a crash, sanitizer report, leak or hang is a finding,
// and so is a value the parser accepted that Config::set then refuses.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epl/config/config.hpp"

namespace {

std::vector<std::string> split(std::string_view in) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= in.size(); ++i)
    if (i == in.size() || in[i] == '\0' || in[i] == '\n') {
      out.emplace_back(in.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// argv or envp: pointers into pieces, with a null at the end as main() and environ have.
std::vector<const char*> pointers(const std::vector<std::string>& pieces, const char* first) {
  std::vector<const char*> p;
  if (first) p.push_back(first);
  for (const auto& s : pieces) p.push_back(s.c_str());
  p.push_back(nullptr);
  return p;
}

// What a parse accepted, Config::set must accept again, and reading and printing it must not
// fail: noexcept, so an exception here ends the run as a finding rather than a rejected input.
void check_accepted(const epl::Config& c) noexcept {
  epl::Config again;
  for (const auto& k : epl::Config::keys()) {
    const std::string name(k.name);
    (void)c.value_text(name);
    std::visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      const T got = c.get<T>(name);
      try {
        again.set(name, epl::ConfigValue(got));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "config key %s: a parsed value is refused by Config::set: %s\n", name.c_str(), e.what());
        std::abort();
      }
    }, k.default_value);
  }
  (void)c.describe();
  (void)c.usage("fuzz", "a fuzzed command line");
}

const epl::Flag<std::int64_t> steps{"steps", 200, "an integer flag", {.min = 1, .max = 1 << 20}};
const epl::Flag<bool> verbose{"verbose", false, "a boolean flag"};
const epl::Flag<double> lr{"lr", 0.1, "a number flag", {.min = 0, .max = 10}};
const epl::Flag<std::string> mode{"mode", "a", "a choice flag", {.choices = {"a", "b"}}};
const epl::Flag<std::string> name{"name", "", "a free-text flag"};
const epl::Flag<std::vector<std::string>> data{"data", {}, "a list flag"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(bytes), size);
  const auto pieces = split(in);
  const auto argv = pointers(pieces, "prog");
  const int argc = static_cast<int>(argv.size() - 1);

  // parse without flags reads the real environment; it holds no EPL_* variable under the test.
  try {
    check_accepted(epl::Config::parse(argc, argv.data()));
  } catch (const std::exception&) {
  }
  try {
    auto c = epl::Config::parse(argc, argv.data(), steps, verbose, lr, mode, name, data);
    check_accepted(c);
    (void)c.get(steps), (void)c.get(verbose), (void)c.get(lr), (void)c.get(mode), (void)c.get(name), (void)c.get(data);
  } catch (const std::exception&) {
  }
  try {
    const auto envp = pointers(pieces, nullptr);
    epl::Config c;
    check_accepted(c.load_environment(envp.data()));
  } catch (const std::exception&) {
  }

  // Every piece as the text of one key (a string key also takes it through Config::set), and the
  // first 8 bytes as an integer and a number for two keys they choose. Few throws per input:
  // unwinding costs more than the parsing, and every key taking both numbers ran half as fast.
  epl::Config c;
  const auto keys = epl::Config::keys();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& k = keys[i % keys.size()];
    try {
      c.set_text(k.name, pieces[i], epl::Config::Source::kCommandLine);
    } catch (const std::exception&) {
    }
    if (!std::holds_alternative<std::string>(k.default_value)) continue;
    try {
      c.set(k.name, pieces[i]);
    } catch (const std::exception&) {
    }
  }
  if (size >= 8) {
    std::int64_t i = 0;
    double d = 0;
    std::memcpy(&i, bytes, 8);
    std::memcpy(&d, bytes, 8);
    try {
      c.set(keys[bytes[0] % keys.size()].name, i);
    } catch (const std::exception&) {
    }
    try {
      c.set(keys[bytes[1] % keys.size()].name, d);
    } catch (const std::exception&) {
    }
  }
  check_accepted(c);
  return 0;
}
