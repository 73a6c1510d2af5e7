#pragma once
// What the benchmarks share: the median of a run's samples, the seconds a call takes and the
// CPU's name for the tables.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace bench {
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
/// The seconds fn() takes, on the steady clock.
template <class Fn>
double seconds(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
/// The integer of an argument `--flag=value` (value after `prefix` characters), from lo to hi; else
/// `bench: --flag=value wants an integer from lo to hi` and exit 2, before anything runs.
inline long long int_arg(const char* bench, const std::string& arg, std::size_t prefix, long long lo, long long hi) {
  const std::string v = arg.substr(prefix);
  long long x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || x < lo || x > hi) {
    std::fprintf(stderr, "%s: %s wants an integer from %lld to %lld\n", bench, arg.c_str(), lo, hi);
    std::exit(2);
  }
  return x;
}
inline std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "an unknown CPU";
}
}  // namespace bench
