#pragma once
// Forced into every benchmark built with EPL_CHECK_BUILD=ON (CI's presets): such a build
// is unoptimized (-O0), made only to prove the benchmarks compile, so each one says at startup
// that its figures mean nothing.
#include <cstdio>

namespace bench::detail {
inline const bool kSaidCheckOnly = [] {
  std::fprintf(stderr,
               "warning: this benchmark was built with EPL_CHECK_BUILD=ON (-O0) to check that it compiles; "
               "its figures mean nothing: configure without it (e.g. cmake --preset cpu-release -DEPL_BUILD_BENCH=ON)\n");
  return true;
}();
}  // namespace bench::detail
