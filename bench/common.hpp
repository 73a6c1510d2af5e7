#pragma once
// What the benchmarks share: the median of a run's samples, the seconds a call takes and the
// CPU's name for the tables.
#include <algorithm>
#include <chrono>
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
inline std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "an unknown CPU";
}
}  // namespace bench
