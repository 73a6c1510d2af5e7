#pragma once
/// \file
/// \brief The column-major BLAS call that computes a row-major GEMM, written once: device::Cuda
/// passes it to cuBLAS, and a CPU test runs a column-major reference GEMM with the same arguments
/// against device::Cpu (test/device/bodies.test.cpp), so the mapping is checked without a GPU.
///
/// Row-major C[m, n] = op(A) op(B) is, read column-major, C^T = op(B)^T op(A)^T: a column-major
/// product of n x k and k x m operands with B first, A second, and the same transposes.
/// Also the triangle a batched GEMM may skip (causal attention's).
#include <cstdint>

namespace epl {
inline namespace v0 {
namespace device {

/// \brief What a batched GEMM over causal t x t blocks may skip: attention's scores are wanted on
/// and below the diagonal only, and its probabilities and their gradients are zero above it. A
/// device whose gemm_batched takes it as its last argument (device::Cpu) leaves out that work
/// (up to half of it: 62.5% is done at t = 256, blocks of 64 rows); one that does not multiplies
/// everything, which gives the same values where they are wanted, up to the order of the sums.
enum class Triangle {
  kNone,    ///< dense: every entry of c
  kLowerC,  ///< c is square and only its entries on and below the diagonal are wanted (the others are unspecified)
  kLowerA,  ///< op(a) is square and zero above its diagonal (the caller's promise)
  kUpperA,  ///< op(a) is square and zero below its diagonal (the caller's promise)
};

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

/// \brief A GEMM padded for the tensor cores' aligned kernels (AMP on a GPU). cuBLAS runs a
/// product whose k or whose output rows' length n is not a multiple of 8 half elements on its
/// slowest kernels (`align1`: GPT-2's vocabulary of 50257 made its LM head 5x slower). So k and n
/// are rounded up to `to`: the operands' copies (made anyway, to round them to the half type) are
/// stored padded with zeros, which add nothing to any product, and the output is computed into a
/// buffer with rows of n_pad and copied back. A copy keeps its storage's orientation: A is
/// a_rows x a_cols (m x k_pad, or k_pad x m_pad when ta), B is b_rows x b_cols (k_pad x n_pad, or
/// n_pad x k_pad when tb); their row lengths are the leading dimensions.
struct PaddedGemm {
  std::int64_t n, k;  ///< padded
  std::int64_t a_rows, a_cols, b_rows, b_cols;
};
constexpr PaddedGemm padded_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t to = 8) {
  const auto up = [to](std::int64_t x) { return (x + to - 1) / to * to; };
  const std::int64_t np = up(n), kp = up(k);
  return {np, kp, ta ? kp : m, ta ? up(m) : kp, tb ? np : kp, tb ? kp : np};
}

}  // namespace device
}  // namespace v0
}  // namespace epl
