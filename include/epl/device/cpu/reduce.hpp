#pragma once
/// \file
/// \brief Element-wise reductions of host buffers, every dtype: the host communicators' and
/// device::Isolated's lane.
#include <algorithm>
#include <cstring>
#include <span>
#include <type_traits>

#include "epl/core/dtype.hpp"
#include "epl/device/cpu/parallel.hpp"
#include "epl/device/lane.hpp"

namespace epl {
inline namespace v0 {
namespace device::detail {

template <class T, class Op>
void combine_as(T* dst, const T* a, const T* b, std::int64_t n, Op op) {
  // 16-bit floats combine in float and round once, like NCCL; dst may be a (in place), never b
  using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
EPL_SIMD_LOOP
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op(static_cast<Acc>(a[i]), static_cast<Acc>(b[i])));
}
/// dst[i] = r(a[i], b[i]) for i < n; dst may be a.
inline void combine(void* dst, const void* a, const void* b, std::int64_t n, DType t, Reduction r) {
  visit_any(t, [&]<class T>() {
    auto* d = static_cast<T*>(dst);
    const auto *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
    switch (r) {
      case Reduction::kSum: return combine_as(d, x, y, n, [](auto p, auto q) { return p + q; });
      case Reduction::kMax: return combine_as(d, x, y, n, [](auto p, auto q) { return p < q ? q : p; });
      case Reduction::kMin: return combine_as(d, x, y, n, [](auto p, auto q) { return q < p ? q : p; });
    }
  });
}
/// x[i] /= n (integers divide with truncation, as MPI users expect of a mean of counts).
inline void divide(void* x, std::int64_t count, DType t, int n) {
  visit_any(t, [&]<class T>() {
    using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
    auto* p = static_cast<T*>(x);
EPL_SIMD_LOOP
    for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Acc>(p[i]) / static_cast<Acc>(n));
  });
}

/// dst[i] = r over the sources in order of srcs[k][i] for i < count, divided by `divisor` when above
/// 1, a staging block at a time, so that the result does not depend on who reduces and dst may be
/// any of the sources (each block is read whole before it is written). `staging` holds at least
/// one element; it is not resized (a collective's data phase allocates nothing).
inline void reduce_in_order(void* dst, std::span<const void* const> srcs, std::int64_t count, DType t, Reduction r, int divisor,
                            std::span<char> staging) {
  if (count == 0 || srcs.empty()) return;
  const auto es = static_cast<std::int64_t>(size_of(t));
  const std::int64_t block = std::max<std::int64_t>(1, static_cast<std::int64_t>(staging.size()) / es);
  for (std::int64_t b = 0; b < count; b += block) {
    const std::int64_t len = std::min(block, count - b);
    std::memcpy(staging.data(), static_cast<const char*>(srcs[0]) + b * es, static_cast<std::size_t>(len * es));
    for (std::size_t k = 1; k < srcs.size(); ++k) combine(staging.data(), staging.data(), static_cast<const char*>(srcs[k]) + b * es, len, t, r);
    if (divisor > 1) divide(staging.data(), len, t, divisor);
    std::memcpy(static_cast<char*>(dst) + b * es, staging.data(), static_cast<std::size_t>(len * es));
  }
}

}  // namespace device::detail
}  // namespace v0
}  // namespace epl
