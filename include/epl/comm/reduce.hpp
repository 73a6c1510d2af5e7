#pragma once
/// \file
/// \brief Element-wise reduction of one buffer into another, every dtype, for the host backends
/// (the kernels are device/cpu/reduce.hpp's, which device::Isolated's lane shares).
#include "epl/comm/communicator.hpp"
#include "epl/device/cpu/reduce.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
namespace detail {

/// The lane's reduction a ReduceOp combines with (kMean: kSum, divided afterwards).
constexpr device::Reduction reduction_of(ReduceOp op) noexcept {
  return op == ReduceOp::kMax ? device::Reduction::kMax : op == ReduceOp::kMin ? device::Reduction::kMin : device::Reduction::kSum;
}
/// dst[i] = op(a[i], b[i]) for i < n (kMean accumulates as kSum; the caller divides); dst may be a.
inline void combine(void* dst, const void* a, const void* b, std::int64_t n, DType t, ReduceOp op) {
  device::detail::combine(dst, a, b, n, t, reduction_of(op));
}
/// dst[i] = op(dst[i], src[i]) for i < n.
inline void reduce_into(void* dst, const void* src, std::int64_t n, DType t, ReduceOp op) { combine(dst, dst, src, n, t, op); }
/// x[i] /= n (integers divide with truncation, as MPI users expect of a mean of counts).
inline void divide(void* x, std::int64_t count, DType t, int n) { device::detail::divide(x, count, t, n); }

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
