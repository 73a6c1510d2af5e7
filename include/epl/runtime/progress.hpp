#pragma once
/// \file
/// \brief epl::print_progress — the per-step progress line a training program prints.
#include <cstdint>
#include <cstdio>

#include "epl/core/memory.hpp"

namespace epl {
inline namespace v0 {

/// \brief Prints the per-step progress line: step, loss, throughput, peak memory.
inline void print_progress(std::int64_t step, double loss, double items_per_s, const char* unit, DeviceId d) {
  std::printf("step %5lld  loss %.4f  %10.1f %s/s  peak %.1f MiB\n", static_cast<long long>(step), loss, items_per_s, unit,
              static_cast<double>(memory_stats(d).total_peak) / (1024.0 * 1024.0));
  std::fflush(stdout);
}

}  // namespace v0
}  // namespace epl
