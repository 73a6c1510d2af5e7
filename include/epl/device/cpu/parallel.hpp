#pragma once
/// \file
/// \brief The one place the CPU backend chooses how to run loops in parallel (OpenMP when the
/// target was built with it, serial otherwise).
#include <algorithm>
#include <cstdint>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace epl {
inline namespace v0 {
namespace detail::cpu {

/// \brief Threads the calling thread's parallel regions use (OpenMP's per-thread setting).
inline int threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}
inline void set_threads(int n) {
#if defined(_OPENMP)
  if (n > 0) omp_set_num_threads(n);
#else
  (void)n;
#endif
}

/// \brief fn(begin, end) over [0, n) in chunks of at least `grain`, in parallel when worth it.
/// fn must not throw: validate inputs before calling.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
  const std::int64_t chunks = std::min<std::int64_t>(threads(), std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, grain)));
  if (chunks <= 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
#endif
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
