#pragma once
/// \file
/// \brief The column-major BLAS call that computes a row-major GEMM, written once: device::Cuda
/// passes it to cuBLAS, and a CPU test runs a column-major reference GEMM with the same arguments
/// against device::Cpu (test/device/bodies.test.cpp), so the mapping is checked without a GPU.
///
/// Row-major C[m, n] = op(A) op(B) is, read column-major, C^T = op(B)^T op(A)^T: a column-major
/// product of n x k and k x m operands with B first, A second, and the same transposes.
#include <cstdint>

namespace epl {
inline namespace v0 {
namespace device {

/// \brief A column-major call C(rows x cols) = op(first) op(second), C with leading dimension ldc.
struct ColumnMajorGemm {
  bool first_is_b;       ///< the first operand is the row-major B (always: the swap above)
  bool trans_first, trans_second;
  std::int64_t rows, cols, inner;  ///< the column-major m, n, k
  std::int64_t ld_first, ld_second, ldc;
};

/// \brief The column-major arguments of row-major C[m, n] = op(A)[m, k] op(B)[k, n] over
/// contiguous row-major A (m x k, or k x m when ta) and B (k x n, or n x k when tb).
constexpr ColumnMajorGemm column_major_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {true, tb, ta, n, m, k, tb ? k : n, ta ? m : k, n};
}

}  // namespace device
}  // namespace v0
}  // namespace epl
