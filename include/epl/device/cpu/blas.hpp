#pragma once
/// \file
/// \brief Row-major GEMM over Eigen, single and batched.
#include <Eigen/Core>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/device/blas_args.hpp"
#include "epl/device/cpu/bf16_kernel.hpp"
#include "epl/device/cpu/parallel.hpp"
#include "epl/device/cpu/sgemm_amx.hpp"
#include "epl/device/cpu/sgemm_avx2.hpp"
#include "epl/device/cpu/sgemm_avx512.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

/// Whether the GEMM below rounds op(A) and op(B) to `inputs` (AMP's bf16 or f16) itself, as it
/// packs them: f32 on epl's packed kernels. Elsewhere the caller rounds copies.
template <class T>
constexpr bool rounds_operands(DType inputs) {
  return kPackedGemm && std::is_same_v<T, float> && (inputs == DType::kBF16 || inputs == DType::kF16);
}

/// The kernel f32 GEMMs run in this build, as benchmarks print it: epl's AVX-512 14 x 32 tile,
/// its AVX2 6 x 16 tile, or Eigen's product.
constexpr const char* f32_kernel() {
  return EPL_SGEMM_F32 == 512 ? "avx512" : EPL_SGEMM_F32 == 256 ? "avx2" : "eigen";
}

/// One GEMM on the calling thread (Eigen runs serially inside a parallel region). f32 on an
/// AVX-512 target uses epl's packed kernels (sgemm_avx512.hpp, sgemm_amx.hpp), on an AVX2 one
/// sgemm_avx2.hpp's; everything else Eigen's. `inputs` bf16 or f16 (only where rounds_operands) rounds op(A) and op(B) to it; bf16
/// then multiplies on `kernel` (bf16_kernel.hpp chooses it), accumulating in f32.
/// Calls f.template operator()<Fmt>() with the packed format of epl's kernels that an f32 GEMM of
/// `inputs` runs in (bf16 on `kernel`), and returns true; false where this build has none (Eigen
/// multiplies). f32 on an AVX-512 target takes sgemm_avx512.hpp's formats (sgemm_amx.hpp's for
/// AMX), on an AVX2 one sgemm_avx2.hpp's.
template <class F>
bool with_packed_format([[maybe_unused]] DType inputs, [[maybe_unused]] device::CpuBf16Kernel kernel, [[maybe_unused]] F&& f) {
#if EPL_SGEMM_F32
#if EPL_SGEMM_F32 == 512
  namespace fmt = sgemm;
#else
  namespace fmt = sgemm::avx2;  // bf16's only kernel here is the rounded f32 one
#endif
  if (inputs == DType::kF16) return f.template operator()<fmt::F32<fmt::RoundF16>>(), true;
  if (inputs != DType::kBF16) return f.template operator()<fmt::F32<>>(), true;
#if defined(EPL_SGEMM_AMX)
  if (kernel == device::CpuBf16Kernel::kAmx) return f.template operator()<sgemm::Amx<>>(), true;
#endif
#if defined(EPL_SGEMM_BF16)
  if (kernel == device::CpuBf16Kernel::kAvx512Bf16) return f.template operator()<sgemm::BF16>(), true;
#endif
  return f.template operator()<fmt::F32<fmt::RoundBF16>>(), true;
#else
  return false;
#endif
}

/// The bf16 kernel a GEMM of `inputs` multiplies with (bf16_kernel.hpp's choice for bf16).
inline device::CpuBf16Kernel kernel_for(DType inputs) {
  return inputs == DType::kBF16 ? bf16_kernel() : device::CpuBf16Kernel::kRoundedF32;
}

/// One GEMM on the calling thread (Eigen runs serially inside a parallel region): f32 on epl's
/// packed kernels where this build has them (with_packed_format), everything else Eigen's.
/// `inputs` bf16 or f16 (only where rounds_operands) rounds op(A) and op(B) to it; bf16 then
/// multiplies on `kernel` (bf16_kernel.hpp chooses it), accumulating in f32.
template <class T>
void gemm_serial(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda, const T* b,
                 std::int64_t ldb, T beta, T* c, std::int64_t ldc, DType inputs = DType::kF32,
                 device::CpuBf16Kernel kernel = device::CpuBf16Kernel::kRoundedF32) {
  if constexpr (std::is_same_v<T, float>) {
    auto run = [&]<class Fmt>() { sgemm::gemm<Fmt>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); };
    if (with_packed_format(inputs, kernel, run)) return;
  }
  (void)kernel;
  EPL_CHECK(inputs != DType::kBF16 && inputs != DType::kF16, "internal: Eigen's GEMM was asked to round its operands (round copies)");
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

/// C[m,n] = alpha * op(A) * op(B) + beta * C, all row-major with leading dimensions.
/// op(A) is [m,k]: A is stored [m,k] (lda >= k) or, transposed, [k,m] (lda >= m).
///
/// With several threads the larger output dimension is cut into one block per thread, each a
/// serial GEMM with its own packing: measured 5-12% faster on the GEMM shapes of a GPT than
/// Eigen's own threading, which synchronises the threads around shared packed panels.
/// `inputs` as for gemm_serial; bf16's kernel is resolved here, before any thread starts.
template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc, DType inputs = DType::kF32) {
  const auto kernel = kernel_for(inputs);
  const std::int64_t parts = std::min<std::int64_t>(threads(), std::max(m, n) / 64);
  if (parts <= 1 || 2 * m * n * k < (std::int64_t{1} << 22)) return gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, inputs, kernel);
  const bool by_rows = m >= n;
  parallel_for(parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      if (by_rows) {  // rows [i0, i1) of C and of op(A)
        std::int64_t i0 = m * p / parts, i1 = m * (p + 1) / parts;
        gemm_serial(ta, tb, i1 - i0, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, beta, c + i0 * ldc, ldc, inputs, kernel);
      } else {        // columns [j0, j1) of C and of op(B)
        std::int64_t j0 = n * p / parts, j1 = n * (p + 1) / parts;
        gemm_serial(ta, tb, m, j1 - j0, k, alpha, a, lda, tb ? b + j0 * ldb : b + j0, ldb, beta, c + j0, ldc, inputs, kernel);
      }
    }
  });
}

/// Rows of a causal block each product of gemm_batched's takes at a time (device::Triangle): a row
/// block multiplies up to the diagonal of its last row, so smaller blocks skip more of the upper
/// triangle, and larger ones pack their operands for more rows.
inline constexpr std::int64_t kTriangleRows = 64;

/// One product C[m, n] = alpha op(A) op(B) + beta C on the calling thread, with leading
/// dimensions, of which a triangle (device::Triangle) is wanted or nonzero: its rows are taken
/// kTriangleRows at a time, every such row block [r0, r1) multiplying only C's columns up to r1
/// (kLowerC, rounded up to whole 16-column vectors), op(A)'s columns up to r1 (kLowerA) or from
/// r0 (kUpperA): the entries left out are unwanted or products of zeros. Each kept entry sums the
/// same products in the same order as the dense product does (the zeros' products are exact), so
/// on epl's packed kernels kLowerA and kLowerC give its values bit for bit; kUpperA too while k
/// fits one of the kernel's k blocks (its blocks start at r0, the dense product's at 0). Eigen's
/// product blocks by the sizes it is given, so there the sums round differently. On epl's packed
/// kernels the row blocks share one packing of op(B) (sgemm::gemm_row_blocks). `blocks` is the
/// caller's buffer, reused across calls.
template <class T>
void gemm_triangle(device::Triangle tri, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                   std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc, DType inputs,
                   device::CpuBf16Kernel kernel, std::vector<sgemm::RowBlock>& blocks) {
  using device::Triangle;
  // one block's product for c's rows [r0, r1) over op(a)'s columns and op(b)'s rows [k0, k1), c's columns [0, n1)
  auto part = [&](const sgemm::RowBlock& r) {
    gemm_serial<T>(ta, tb, r.r1 - r.r0, r.n1, r.k1 - r.k0, alpha, ta ? a + r.k0 * lda + r.r0 : a + r.r0 * lda + r.k0, lda,
                   tb ? b + r.k0 : b + r.k0 * ldb, ldb, beta, c + r.r0 * ldc, ldc, inputs, kernel);
  };
  if (tri == Triangle::kNone) return part({0, m, 0, k, n});
  blocks.clear();
  for (std::int64_t r0 = 0; r0 < m; r0 += kTriangleRows) {
    const std::int64_t r1 = std::min(m, r0 + kTriangleRows);
    if (tri == Triangle::kLowerC) blocks.push_back({r0, r1, 0, k, std::min(n, (r1 + 15) / 16 * 16)});
    else if (tri == Triangle::kLowerA) blocks.push_back({r0, r1, 0, std::min(k, r1), n});
    else blocks.push_back({r0, r1, std::min(k, r0), k, n});
  }
  if constexpr (std::is_same_v<T, float>) {
    auto run = [&]<class Fmt>() { sgemm::gemm_row_blocks<Fmt>(ta, tb, n, k, alpha, a, lda, b, ldb, beta, c, ldc, blocks); };
    if (with_packed_format(inputs, kernel, run)) return;
  }
  for (const sgemm::RowBlock& r : blocks) part(r);
}

/// batch independent GEMMs on consecutive [.., ..] blocks (gemm_triangle's, each of which may
/// be a triangle); parallel over the batch, each product single-threaded (Eigen runs serially
/// inside a parallel region).
template <class T>
void gemm_batched(std::int64_t batch, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                  T alpha, const T* a, std::int64_t stride_a, const T* b, std::int64_t stride_b, T beta,
                  T* c, std::int64_t stride_c, DType inputs = DType::kF32, device::Triangle tri = device::Triangle::kNone) {
  const auto kernel = kernel_for(inputs);
  parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<sgemm::RowBlock> blocks;
    for (std::int64_t i = begin; i < end; ++i)
      gemm_triangle<T>(tri, ta, tb, m, n, k, alpha, a + i * stride_a, ta ? m : k, b + i * stride_b, tb ? k : n, beta, c + i * stride_c, n,
                       inputs, kernel, blocks);
  });
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
