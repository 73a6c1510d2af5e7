#pragma once
/// \file
/// \brief The one place the CPU backend chooses how to run loops in parallel (OpenMP when the
/// target was built with it, serial otherwise).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#if defined(_OPENMP)
#include <omp.h>
#endif

/// Vectorise the next loop (its iterations are independent): OpenMP's simd when g++ builds the
/// target with OpenMP, nothing otherwise (clang vectorises these loops unasked, and warns for each
/// 16-bit conversion loop an omp simd could not vectorise).
#if defined(_OPENMP) && !defined(__clang__)
#define EPL_SIMD_LOOP _Pragma("omp simd")
#else
#define EPL_SIMD_LOOP
#endif

namespace epl {
inline namespace v0 {
namespace detail::cpu {

/// The elements (or work items) a loop gives each thread at least.
inline constexpr std::int64_t kGrain = 1 << 15;

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

/// \brief body(state, begin, end) for `chunks` equal chunks of [0, n), on that many threads. The
/// one parallel region of the CPU backend: a kernel's loop reaches it through a function pointer,
/// so the compiler outlines one OpenMP region per program instead of one per kernel and lambda (it
/// was a sixth of a training program's compile time); one indirect call per chunk costs nothing.
inline void run_chunks(std::int64_t n, std::int64_t chunks, void (*body)(void*, std::int64_t, std::int64_t), void* state) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) body(state, n * c / chunks, n * (c + 1) / chunks);
#else
  body(state, 0, n);
  (void)chunks;
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
  using F = std::remove_reference_t<Fn>;
  run_chunks(n, chunks, [](void* f, std::int64_t b, std::int64_t e) { (*static_cast<F*>(f))(b, e); },
             const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
