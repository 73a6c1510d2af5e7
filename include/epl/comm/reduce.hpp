#pragma once
/// \file
/// \brief Element-wise reduction of one buffer into another, every dtype, for the host backends.
#include <Eigen/Core>
#include <cstring>

#include "epl/comm/communicator.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
namespace detail {

/// dst[i] = op(a[i], b[i]) for i < n (kMean accumulates as kSum; the caller divides); dst may be a.
/// 16-bit floats combine in float and round once, like NCCL.
inline void combine(void* dst, const void* a, const void* b, std::int64_t n, DType t, ReduceOp op) {
  visit_any(t, [&]<class T>() {
    using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<Array> d(static_cast<T*>(dst), n);
    Eigen::Map<const Array> x(static_cast<const T*>(a), n), y(static_cast<const T*>(b), n);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: d = (x.template cast<Acc>() + y.template cast<Acc>()).template cast<T>(); break;
      case ReduceOp::kMax: d = x.template cast<Acc>().max(y.template cast<Acc>()).template cast<T>(); break;
      case ReduceOp::kMin: d = x.template cast<Acc>().min(y.template cast<Acc>()).template cast<T>(); break;
    }
  });
}
/// dst[i] = op(dst[i], src[i]) for i < n.
inline void reduce_into(void* dst, const void* src, std::int64_t n, DType t, ReduceOp op) { combine(dst, dst, src, n, t, op); }
/// x[i] /= n (integers divide with truncation, as MPI users expect of a mean of counts).
inline void divide(void* x, std::int64_t count, DType t, int n) {
  visit_any(t, [&]<class T>() {
    using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(static_cast<T*>(x), count);
    a = (a.template cast<Acc>() / static_cast<Acc>(n)).template cast<T>();
  });
}

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
