#pragma once
/// \file
/// \brief Element-wise reductions of host buffers, every dtype: the host communicators' and
/// device::Isolated's lane.
#include <cstring>
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

}  // namespace device::detail
}  // namespace v0
}  // namespace epl
