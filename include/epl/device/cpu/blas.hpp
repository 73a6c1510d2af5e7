#pragma once
/// \file
/// \brief Row-major GEMM over Eigen, single and batched.
#include <Eigen/Core>
#include <cstdint>

#include "epl/device/cpu/parallel.hpp"

namespace epl::detail::cpu {
inline namespace v0 {

/// C[m,n] = alpha * op(A) * op(B) + beta * C, all row-major with leading dimensions.
/// op(A) is [m,k]: A is stored [m,k] (lda >= k) or, transposed, [k,m] (lda >= m).
template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using In = Eigen::Map<const Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  using Out = Eigen::Map<Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  Out C(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) C.setZero(); else C *= beta;
    return;
  }
  In A(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  In B(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  if (beta == T(0)) C.setZero();
  else if (beta != T(1)) C *= beta;
  if (!ta && !tb) C.noalias() += alpha * A * B;
  else if (!ta && tb) C.noalias() += alpha * A * B.transpose();
  else if (ta && !tb) C.noalias() += alpha * A.transpose() * B;
  else C.noalias() += alpha * A.transpose() * B.transpose();
}

/// batch independent GEMMs on consecutive [.., ..] blocks; parallel over the batch, each
/// product single-threaded (Eigen runs serially inside a parallel region).
template <class T>
void gemm_batched(std::int64_t batch, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                  T alpha, const T* a, std::int64_t stride_a, const T* b, std::int64_t stride_b, T beta,
                  T* c, std::int64_t stride_c) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      gemm<T>(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, n);
  });
}

}  // namespace v0
}  // namespace epl::detail::cpu
