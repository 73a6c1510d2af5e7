#pragma once
/// \file
/// \brief The argument checks every device runs before a kernel, written once for all of them:
/// matching sizes and dtypes, GEMM shapes, and the dtypes a device computes in.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "epl/core/tensor.hpp"
#include "epl/device/blas_args.hpp"

namespace epl {
inline namespace v0 {
namespace device::detail {

// A tensor with no storage reaching a kernel is most often a Parameter that was never
// materialized: a layer's visit() that leaves it out (its shape would otherwise be reported as
// [1, 1], naming neither).
inline void defined(const Tensor& t, const char* op, const char* which) {
  EPL_CHECK(t.defined(), op, ": ", which, " is an empty tensor (no storage); a Parameter whose layer's visit() does not "
            "list it is never materialized: list every Parameter there, or allocate the tensor (device.empty); under ZeRO stage 3 "
            "a sub-layer run as sub.forward(ctx, x) instead of nn::forward(sub, ctx, x) has its parameters never gathered, and a "
            "Trainer's model run by hand holds only its shard between steps: call trainer.gather_parameters() first, or "
            "trainer.predict(inputs)");
}
inline void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  const bool ids = a.dtype() == DType::kI32 || a.dtype() == DType::kI64 || b.dtype() == DType::kI32 || b.dtype() == DType::kI64;
  EPL_CHECK(a.dtype() == b.dtype(), op, ": dtypes ", name_of(a.dtype()), " and ", name_of(b.dtype()), " differ",
            ids ? "; integer tensors are ids (tokens for nn::Embedding, class targets for the loss): a layer that computes "
                  "on features takes them as f32"
                : "");
}
inline void same(const Tensor& a, const Tensor& b, const char* op) {
  same_dtype(a, b, op);
  EPL_CHECK(a.numel() == b.numel(), op, ": ", a.shape(), " and ", b.shape(), " differ in size");
}

/// rows[i] and table[index[i]] have the same length and dtype, and index is one i64 per row
/// (gather_rows, scatter_add_rows); the indices' values are the device's to check where they live.
inline void rows_by_index(const Tensor& table, const Tensor& index, const Tensor& rows, const char* what) {
  EPL_CHECK(index.dtype() == DType::kI64 && rows.shape().rows() == index.numel() && table.shape().back() == rows.shape().back(),
            what, ": table ", table.shape(), ", ", index.numel(), " ", name_of(index.dtype()), " indices, rows ", rows.shape());
  same_dtype(table, rows, what);
}

/// A GEMM's `inputs`: the type its operands are rounded to before they are multiplied (bf16 or f16:
/// mixed precision, what ctx.matmul() gives), or f32 / f64 for none. An id type there was taken
/// for none, silently (a stranger's kI32).
inline void gemm_inputs(DType inputs, const char* op) {
  EPL_CHECK(inputs == DType::kF32 || inputs == DType::kF64 || inputs == DType::kBF16 || inputs == DType::kF16, op, ": inputs = ",
            name_of(inputs), " is not a type to round the operands to; give bf16 or f16 for mixed precision (ctx.matmul() gives "
            "the run's), or f32 for none");
}

/// The sizes of c = op(a) op(b) on the 2-D views [rows, last], checked.
struct GemmDims {
  std::int64_t m, n, k;
};
inline GemmDims gemm_dims(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  defined(a, "gemm", "a"), defined(b, "gemm", "b"), defined(c, "gemm", "c");
  const std::int64_t m = ta ? a.shape().back() : a.shape().rows(), k = ta ? a.shape().rows() : a.shape().back();
  const std::int64_t kb = tb ? b.shape().back() : b.shape().rows(), n = tb ? b.shape().rows() : b.shape().back();
  EPL_CHECK(k == kb && c.shape().rows() == m && c.shape().back() == n, "gemm: op(a) is [", m, ", ", k, "], op(b) is [", kb, ", ",
            n, "], c is ", c.shape(),
            k != kb ? "; op(a)'s " + std::to_string(k) + " columns must equal op(b)'s " + std::to_string(kb) +
                          " rows (a layer given inputs of another width than its weight's)"
                    : "; c must be [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  same_dtype(a, b, "gemm");
  same_dtype(a, c, "gemm");
  return {m, n, k};
}
/// The sizes of the same GEMM on each [batch, .., ..] block of rank-3 tensors, checked.
inline GemmDims gemm_batched_dims(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  defined(a, "gemm_batched", "a"), defined(b, "gemm_batched", "b"), defined(c, "gemm_batched", "c");
  EPL_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3 && a.dim(0) == b.dim(0) && a.dim(0) == c.dim(0),
            "gemm_batched needs rank-3 tensors of one batch: ", a.shape(), b.shape(), c.shape());
  const std::int64_t m = ta ? a.dim(2) : a.dim(1), k = ta ? a.dim(1) : a.dim(2);
  const std::int64_t kb = tb ? b.dim(2) : b.dim(1), n = tb ? b.dim(1) : b.dim(2);
  EPL_CHECK(k == kb && c.dim(1) == m && c.dim(2) == n, "gemm_batched: shapes ", a.shape(), b.shape(), c.shape());
  same_dtype(a, b, "gemm_batched");
  same_dtype(a, c, "gemm_batched");
  return {m, n, k};
}

/// A triangle a batched GEMM skips is the square matrix it names.
inline void triangle_fits(const GemmDims& g, Triangle tri) {
  EPL_CHECK(tri == Triangle::kNone || tri == Triangle::kLowerC || tri == Triangle::kLowerA || tri == Triangle::kUpperA,
            "gemm_batched: triangle ", static_cast<int>(tri), " is not a device::Triangle (kNone, kLowerC, kLowerA, kUpperA)");
  EPL_CHECK(tri == Triangle::kNone || (tri == Triangle::kLowerC ? g.m == g.n : g.m == g.k),
            "gemm_batched: a triangle (", tri == Triangle::kLowerC ? "of c" : "of op(a)", ") needs a square matrix; c is [", g.m, ", ",
            g.n, "] and op(a) [", g.m, ", ", g.k, "]");
}

/// Calls fn.template operator()<T>() with T the one of Compute... that is dtype t; any other
/// dtype is an error naming the device and the types it computes in. This is where a device's
/// compute types bound what a program instantiates: kernels exist only for those.
template <class... Compute, class Fn>
decltype(auto) visit_among(DType t, std::string_view device, Fn&& fn) {
  using R = decltype(fn.template operator()<std::tuple_element_t<0, std::tuple<Compute...>>>());
  if constexpr (std::is_void_v<R>) {
    bool done = ((t == dtype_v<Compute> ? (fn.template operator()<Compute>(), true) : false) || ...);
    if (done) return;
  } else {
    R result{};
    bool done = ((t == dtype_v<Compute> ? (result = fn.template operator()<Compute>(), true) : false) || ...);
    if (done) return result;
  }
  std::string types;
  ((types += (types.empty() ? "" : ", ") + std::string(name_of(dtype_v<Compute>))), ...);
  EPL_FAIL("dtype ", name_of(t), " is not computed by ", device, ", which computes in ", types,
           (t == DType::kF64 ? "; f64 (gradient checks) runs on device::CpuF64" : "; cast to a compute type first"));
}

// An optimizer update's hyper-parameters, checked where every device's update starts (the
// Updater checks its own options; a program may call the device directly): a factor that is not
// finite, a step of 0 (AdamW's bias corrections divide by 1 - beta^step) or a beta of 1 write NaN
// or nothing, silently.
inline void update(const char* op, double lr, double wd, double grad_scale) {
  EPL_CHECK(std::isfinite(lr) && std::isfinite(wd), op, ": lr ", lr, " and weight decay ", wd, " must be finite numbers");
  EPL_CHECK(std::isfinite(grad_scale), op, ": gradient factor ", grad_scale, " is not finite (AMP's unscale times the clip "
            "coefficient: skip the step when the gradients overflowed)");
}
inline void momentum(double mu) {
  EPL_CHECK(std::isfinite(mu) && mu >= 0, "momentum_update: momentum ", mu, " must be finite and not negative");
}
inline void adamw(double beta1, double beta2, double eps, std::int64_t step) {
  EPL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "adamw_update: betas (", beta1, ", ", beta2, ") must lie in [0, 1)");
  EPL_CHECK(std::isfinite(eps) && eps > 0, "adamw_update: eps ", eps, " must be positive and finite");
  EPL_CHECK(step >= 1, "adamw_update: step ", step, "; steps count from 1 (the bias corrections divide by 1 - beta^step)");
}

}  // namespace device::detail
}  // namespace v0
}  // namespace epl
