#pragma once
/// \file
/// \brief Element-wise reduction of one buffer into another, every dtype, for the host backends.
#include <cstring>
#include <type_traits>

#include "epl/comm/communicator.hpp"
#include "epl/device/cpu/parallel.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
namespace detail {

template <class T, class Op>
void combine_as(T* dst, const T* a, const T* b, std::int64_t n, Op op) {
  // 16-bit floats combine in float and round once, like NCCL; dst may be a (in place), never b
  using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
EPL_SIMD_LOOP
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op(static_cast<Acc>(a[i]), static_cast<Acc>(b[i])));
}
/// dst[i] = op(a[i], b[i]) for i < n (kMean accumulates as kSum; the caller divides); dst may be a.
inline void combine(void* dst, const void* a, const void* b, std::int64_t n, DType t, ReduceOp op) {
  visit_any(t, [&]<class T>() {
    auto* d = static_cast<T*>(dst);
    const auto *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: return combine_as(d, x, y, n, [](auto p, auto q) { return p + q; });
      case ReduceOp::kMax: return combine_as(d, x, y, n, [](auto p, auto q) { return p < q ? q : p; });
      case ReduceOp::kMin: return combine_as(d, x, y, n, [](auto p, auto q) { return q < p ? q : p; });
    }
  });
}
/// dst[i] = op(dst[i], src[i]) for i < n.
inline void reduce_into(void* dst, const void* src, std::int64_t n, DType t, ReduceOp op) { combine(dst, dst, src, n, t, op); }
/// x[i] /= n (integers divide with truncation, as MPI users expect of a mean of counts).
inline void divide(void* x, std::int64_t count, DType t, int n) {
  visit_any(t, [&]<class T>() {
    using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
    auto* p = static_cast<T*>(x);
EPL_SIMD_LOOP
    for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Acc>(p[i]) / static_cast<Acc>(n));
  });
}

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
