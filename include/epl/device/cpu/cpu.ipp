#pragma once
/// \file
/// \brief The definitions of device::BasicCpu's operations (the part of device/cpu/cpu.hpp that
/// is not its declaration: an .ipp, included only at that header's end), each a check of shapes
/// and dtypes and one typed kernel from device/cpu/{blas,elementwise,nn_kernels,optim_kernels}.hpp:
/// the only part of the CPU device that needs Eigen. cpu.hpp includes it, unless the program links
/// epl::precompiled, which compiles it once (src/precompiled.cpp).
#include <cstring>
#include <limits>

#include "epl/device/cpu/attention.hpp"
#include "epl/device/cpu/blas.hpp"
#include "epl/device/cpu/nn_kernels.hpp"
#include "epl/device/cpu/optim_kernels.hpp"

namespace epl {
inline namespace v0 {
namespace device {

template <class... Compute>
CpuBf16Kernel BasicCpu<Compute...>::bf16_kernel() {
  return epl::detail::cpu::bf16_kernel();
}

template <class... Compute>
const char* BasicCpu<Compute...>::f32_kernel() {
  return epl::detail::cpu::f32_kernel();
}

template <class... Compute>
void BasicCpu<Compute...>::use_bf16_kernel(std::optional<CpuBf16Kernel> kernel) {
  epl::detail::cpu::use_bf16_kernel(kernel);
}

template <class... Compute>
bool BasicCpu<Compute...>::rounds_in_kernel(const Tensor& a, DType inputs) {
  return a.dtype() == DType::kF32 && epl::detail::cpu::rounds_operands<float>(inputs);
}

template <class... Compute>
void BasicCpu<Compute...>::fill(const Tensor& x, double v) const {
  visit_any(x.dtype(), [&]<class T>() { epl::detail::cpu::fill(x.data<T>(), x.numel(), static_cast<T>(v)); });
}

template <class... Compute>
void BasicCpu<Compute...>::cast(const Tensor& src, const Tensor& dst) const {
  EPL_CHECK(src.numel() == dst.numel(), "cast of ", src.shape(), " into ", dst.shape());
  visit_any(src.dtype(), [&]<class From>() {
    visit_any(dst.dtype(), [&]<class To>() {
      if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
        // a float that To cannot hold (NaN, infinite, out of range) has no conversion in C++: refused
        const double lo = static_cast<double>(std::numeric_limits<To>::min()), hi = -lo;
        const From* x = src.data<From>();
        for (std::int64_t i = 0; i < src.numel(); ++i) {
          const double v = epl::detail::cpu::convert<double>(x[i]);
          EPL_CHECK(v >= lo && v < hi, "cast of ", name_of(src.dtype()), " ", src.shape(), " to ", name_of(dst.dtype()), ": element ", i,
                    " is ", v, ", which ", name_of(dst.dtype()), " cannot hold; an integer tensor holds ids and counts: make them "
                    "finite whole numbers in [", lo, ", ", hi, ") first");
        }
      }
      epl::detail::cpu::cast(src.data<From>(), dst.data<To>(), src.numel());
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
    double alpha, double beta, DType inputs) const {
  const auto g = detail::gemm_dims(a, ta, b, tb, c);
  detail::gemm_inputs(inputs, "gemm");
  const bool in_kernel = rounds_in_kernel(a, inputs);
  const Tensor ra = in_kernel ? a : rounded(a, inputs), rb = in_kernel ? b : rounded(b, inputs);
  const DType kernel_inputs = in_kernel ? inputs : DType::kF32;
  visit(a.dtype(), [&]<class T>() {
    epl::detail::cpu::gemm<T>(ta, tb, g.m, g.n, g.k, T(alpha), ra.data<T>(), a.shape().back(), rb.data<T>(), b.shape().back(), T(beta),
                              c.data<T>(), g.n, kernel_inputs);
  });
}

template <class... Compute>
void BasicCpu<Compute...>::gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
    double alpha, double beta, DType inputs, Triangle tri) const {
  const auto g = detail::gemm_batched_dims(a, ta, b, tb, c);
  detail::gemm_inputs(inputs, "gemm_batched");
  detail::triangle_fits(g, tri);
  const bool in_kernel = rounds_in_kernel(a, inputs);
  const Tensor ra = in_kernel ? a : rounded(a, inputs), rb = in_kernel ? b : rounded(b, inputs);
  const DType kernel_inputs = in_kernel ? inputs : DType::kF32;
  visit(a.dtype(), [&]<class T>() {
    epl::detail::cpu::gemm_batched<T>(a.dim(0), ta, tb, g.m, g.n, g.k, T(alpha), ra.data<T>(), g.m * g.k, rb.data<T>(), g.k * g.n,
                                      T(beta), c.data<T>(), g.m * g.n, kernel_inputs, tri);
  });
}

template <class... Compute>
void BasicCpu<Compute...>::add(const Tensor& a, const Tensor& b, const Tensor& out) const {
  detail::same(a, b, "add");
  detail::same(a, out, "add");
  visit(a.dtype(), [&]<class T>() { epl::detail::cpu::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
}

template <class... Compute>
void BasicCpu<Compute...>::mul(const Tensor& a, const Tensor& b, const Tensor& out) const {
  detail::same(a, b, "mul");
  detail::same(a, out, "mul");
  visit(a.dtype(), [&]<class T>() { epl::detail::cpu::mul(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
}

template <class... Compute>
void BasicCpu<Compute...>::axpy(double alpha, const Tensor& x, const Tensor& y) const {
  detail::same(x, y, "axpy");
  visit(x.dtype(), [&]<class T>() { epl::detail::cpu::axpy(T(alpha), x.data<T>(), y.data<T>(), x.numel()); });
}

template <class... Compute>
void BasicCpu<Compute...>::scale(const Tensor& x, double alpha) const {
  visit(x.dtype(), [&]<class T>() { epl::detail::cpu::scale(x.data<T>(), x.numel(), T(alpha)); });
}

template <class... Compute>
void BasicCpu<Compute...>::add_row_vector(const Tensor& y, const Tensor& v) const {
  EPL_CHECK(v.numel() == y.shape().back(), "add_row_vector: vector ", v.shape(), " for rows of ", y.shape());
  detail::same_dtype(y, v, "add_row_vector");
  visit(y.dtype(), [&]<class T>() {
    epl::detail::cpu::add_row_vector(y.data<T>(), v.data<T>(), y.shape().rows(), y.shape().back());
  });
}

template <class... Compute>
void BasicCpu<Compute...>::sum_rows(const Tensor& x, const Tensor& out, double beta) const {
  EPL_CHECK(out.numel() == x.shape().back(), "sum_rows: output ", out.shape(), " for rows of ", x.shape());
  detail::same_dtype(x, out, "sum_rows");
  visit(x.dtype(), [&]<class T>() {
    epl::detail::cpu::sum_rows(x.data<T>(), out.data<T>(), x.shape().rows(), x.shape().back(), T(beta));
  });
}

template <class... Compute>
double BasicCpu<Compute...>::sum_squares(const Tensor& x) const {
  return visit(x.dtype(), [&]<class T>() { return epl::detail::cpu::sum_squares(x.data<T>(), x.numel()); });
}

template <class... Compute>
void BasicCpu<Compute...>::gelu(const Tensor& x, const Tensor& y) const { unary(x, y, "gelu", [](auto* a, auto* b, auto n) { epl::detail::cpu::gelu(a, b, n); }); }

template <class... Compute>
void BasicCpu<Compute...>::relu(const Tensor& x, const Tensor& y) const { map(y, ops::Relu{}, x); }

template <class... Compute>
void BasicCpu<Compute...>::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
  binary(x, dy, dx, "gelu_backward", [](auto* a, auto* b, auto* c, auto n) { epl::detail::cpu::gelu_backward(a, b, c, n); });
}

template <class... Compute>
void BasicCpu<Compute...>::relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const { map(dx, ops::ReluGrad{}, x, dy); }

template <class... Compute>
void BasicCpu<Compute...>::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
    const Tensor& mean, const Tensor& rstd, double eps) const {
  auto rows = x.shape().rows(), cols = x.shape().back();
  EPL_CHECK(gamma.numel() == cols && beta.numel() == cols && mean.numel() == rows && rstd.numel() == rows,
            "layer_norm: x ", x.shape(), " gamma ", gamma.shape(), " beta ", beta.shape());
  detail::same(x, y, "layer_norm");
  visit(x.dtype(), [&]<class T>() {
    epl::detail::cpu::layer_norm(x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.data<T>(),
                            rstd.data<T>(), rows, cols, T(eps));
  });
}

template <class... Compute>
void BasicCpu<Compute...>::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
    const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) const {
  detail::same(x, dy, "layer_norm_backward");
  detail::same(x, dx, "layer_norm_backward");
  visit(x.dtype(), [&]<class T>() {
    epl::detail::cpu::layer_norm_backward(x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(),
                                     dx.data<T>(), dgamma.data<T>(), dbeta.data<T>(), x.shape().rows(), x.shape().back());
  });
}

template <class... Compute>
void BasicCpu<Compute...>::softmax_causal(const Tensor& s, const Tensor& p, double scale) const {
  EPL_CHECK(s.rank() == 3 && s.dim(1) == s.dim(2), "softmax_causal needs [batch, t, t], got ", s.shape());
  detail::same(s, p, "softmax_causal");
  visit(s.dtype(), [&]<class T>() {
    epl::detail::cpu::softmax_causal(s.data<T>(), p.data<T>(), s.dim(0), s.dim(1), T(scale));
  });
}

template <class... Compute>
void BasicCpu<Compute...>::softmax_causal_backward(const Tensor& p, const Tensor& dp, const Tensor& ds, double scale) const {
  detail::same(p, dp, "softmax_causal_backward");
  detail::same(p, ds, "softmax_causal_backward");
  visit(p.dtype(), [&]<class T>() {
    epl::detail::cpu::softmax_causal_backward(p.data<T>(), dp.data<T>(), ds.data<T>(), p.dim(0), p.dim(1), T(scale));
  });
}

namespace detail {
// attention_heads' geometry from qkv [b, t, 3 dim] and o [b, t, dim], or an error naming `op`
inline epl::detail::cpu::AttentionHeads attention_heads_of(const Tensor& qkv, const Tensor& o, std::int64_t heads, const char* op) {
  EPL_CHECK(heads > 0 && qkv.rank() == 3 && qkv.dim(2) % (3 * heads) == 0, op, ": qkv ", qkv.shape(), " is not [batch, t, 3 dim] with ",
            heads, " heads dividing dim");
  const std::int64_t dim = qkv.dim(2) / 3;
  const Shape want{qkv.dim(0), qkv.dim(1), dim};
  EPL_CHECK(o.shape() == want, op, ": ", o.shape(), " for qkv ", qkv.shape(), "; expected ", want);
  same_dtype(qkv, o, op);
  return {qkv.dim(0), qkv.dim(1), heads, dim / heads};
}
}  // namespace detail

template <class... Compute>
bool BasicCpu<Compute...>::attention_heads(const Tensor& qkv, const Tensor& o, std::int64_t heads, double scale, DType inputs) const {
  const auto g = detail::attention_heads_of(qkv, o, heads, "attention_heads");
  if ((inputs == DType::kBF16 || inputs == DType::kF16) && !rounds_in_kernel(qkv, inputs)) return false;
  visit(qkv.dtype(), [&]<class T>() { epl::detail::cpu::attention_heads(g, qkv.data<T>(), o.data<T>(), T(scale), inputs); });
  return true;
}

template <class... Compute>
bool BasicCpu<Compute...>::attention_heads_backward(const Tensor& qkv, const Tensor& dout, const Tensor& dqkv, std::int64_t heads,
                                                    double scale, DType inputs) const {
  const auto g = detail::attention_heads_of(qkv, dout, heads, "attention_heads_backward");
  detail::same(qkv, dqkv, "attention_heads_backward");
  if ((inputs == DType::kBF16 || inputs == DType::kF16) && !rounds_in_kernel(qkv, inputs)) return false;
  visit(qkv.dtype(), [&]<class T>() {
    epl::detail::cpu::attention_heads_backward(g, qkv.data<T>(), dout.data<T>(), dqkv.data<T>(), T(scale), inputs);
  });
  return true;
}

template <class... Compute>
void BasicCpu<Compute...>::embedding(const Tensor& ids, const Tensor& table, const Tensor& out, std::int64_t first, std::int64_t vocab) const {
  check_ids(ids, vocab > 0 ? vocab : table.dim(0), "embedding");
  EPL_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: output ", out.shape(), " for ", ids.shape(), " ids");
  visit_index(ids.dtype(), [&]<class I>() {
    visit(table.dtype(), [&]<class T>() {
      epl::detail::cpu::embedding(ids.data<I>(), table.data<T>(), out.data<T>(), ids.numel(), table.dim(1), first, table.dim(0));
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, std::int64_t first,
    std::int64_t vocab) const {
  check_ids(ids, vocab > 0 ? vocab : dtable.dim(0), "embedding_backward");
  visit_index(ids.dtype(), [&]<class I>() {
    visit(dtable.dtype(), [&]<class T>() {
      epl::detail::cpu::embedding_backward(ids.data<I>(), dout.data<T>(), dtable.data<T>(), ids.numel(), dtable.dim(1), first,
                                           dtable.dim(0));
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::softmax_rows(const Tensor& x, const Tensor& y) const {
  detail::same(x, y, "softmax_rows");
  visit(x.dtype(), [&]<class T>() { epl::detail::cpu::softmax_rows(x.data<T>(), y.data<T>(), x.shape().rows(), x.shape().back()); });
}

template <class... Compute>
void BasicCpu<Compute...>::softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const {
  detail::same(y, dy, "softmax_rows_backward");
  detail::same(y, dx, "softmax_rows_backward");
  visit(y.dtype(), [&]<class T>() {
    epl::detail::cpu::softmax_rows_backward(y.data<T>(), dy.data<T>(), dx.data<T>(), y.shape().rows(), y.shape().back());
  });
}

template <class... Compute>
void BasicCpu<Compute...>::gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const {
  check_rows(src, index, dst, "gather_rows");
  visit(src.dtype(), [&]<class T>() {
    epl::detail::cpu::gather_rows(src.data<T>(), index.data<std::int64_t>(), dst.data<T>(), index.numel(), src.shape().back());
  });
}

template <class... Compute>
void BasicCpu<Compute...>::scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& weight, const Tensor& dst) const {
  check_rows(dst, index, src, "scatter_add_rows");
  EPL_CHECK(!weight.defined() || weight.numel() == index.numel(), "scatter_add_rows: ", weight.numel(), " weights for ",
            index.numel(), " rows");
  visit(src.dtype(), [&]<class T>() {
    epl::detail::cpu::scatter_add_rows(src.data<T>(), index.data<std::int64_t>(), weight.defined() ? weight.data<T>() : nullptr,
                                       dst.data<T>(), index.numel(), src.shape().back());
  });
}

template <class... Compute>
void BasicCpu<Compute...>::row_dot(const Tensor& a, const Tensor& b, const Tensor& out) const {
  detail::same(a, b, "row_dot");
  EPL_CHECK(out.numel() == a.shape().rows(), "row_dot: ", out.numel(), " outputs for ", a.shape().rows(), " rows");
  visit(a.dtype(), [&]<class T>() { epl::detail::cpu::row_dot(a.data<T>(), b.data<T>(), out.data<T>(), a.shape().rows(), a.shape().back()); });
}

template <class... Compute>
void BasicCpu<Compute...>::row_max(const Tensor& x, const Tensor& out) const {
  EPL_CHECK(out.numel() == x.shape().rows(), "row_max: ", out.numel(), " outputs for ", x.shape().rows(), " rows of ", x.shape());
  detail::same_dtype(x, out, "row_max");
  visit(x.dtype(), [&]<class T>() { epl::detail::cpu::row_max(x.data<T>(), out.data<T>(), x.shape().rows(), x.shape().back()); });
}

template <class... Compute>
void BasicCpu<Compute...>::cross_entropy_stats(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
    const Tensor& target_logit, std::int64_t first, std::int64_t vocab) const {
  check_ids(targets, vocab, "cross_entropy targets");
  const auto rows = logits.shape().rows();
  EPL_CHECK(targets.numel() == rows && max.numel() == rows && sum_exp.numel() == rows && target_logit.numel() == rows,
            "cross_entropy_stats: ", targets.numel(), " targets and ", max.numel(), ", ", sum_exp.numel(), ", ", target_logit.numel(),
            " row statistics for ", rows, " rows of logits ", logits.shape());
  visit_index(targets.dtype(), [&]<class I>() {
    visit(logits.dtype(), [&]<class T>() {
      epl::detail::cpu::cross_entropy_stats(logits.data<T>(), targets.data<I>(), max.data<T>(), sum_exp.data<T>(), target_logit.data<T>(),
                                            rows, logits.shape().back(), first);
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::cross_entropy_part_backward(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
    const Tensor& dlogits, std::int64_t first, double scale) const {
  detail::same(logits, dlogits, "cross_entropy_part_backward");
  visit_index(targets.dtype(), [&]<class I>() {
    visit(logits.dtype(), [&]<class T>() {
      epl::detail::cpu::cross_entropy_part_backward(logits.data<T>(), targets.data<I>(), max.data<T>(), sum_exp.data<T>(),
                                                    dlogits.data<T>(), logits.shape().rows(), logits.shape().back(), first, T(scale));
    });
  });
}

template <class... Compute>
double BasicCpu<Compute...>::cross_entropy(const Tensor& logits, const Tensor& targets) const {
  check_ids(targets, logits.shape().back(), "cross_entropy targets");
  EPL_CHECK(targets.numel() == logits.shape().rows(), "cross_entropy: ", targets.numel(), " targets for ",
            logits.shape().rows(), " rows of logits ", logits.shape());
  return visit_index(targets.dtype(), [&]<class I>() {
    return visit(logits.dtype(), [&]<class T>() {
      return epl::detail::cpu::cross_entropy(logits.data<T>(), targets.data<I>(), logits.shape().rows(), logits.shape().back());
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, double scale) const {
  detail::same(logits, dlogits, "cross_entropy_backward");
  visit_index(targets.dtype(), [&]<class I>() {
    visit(logits.dtype(), [&]<class T>() {
      epl::detail::cpu::cross_entropy_backward(logits.data<T>(), targets.data<I>(), dlogits.data<T>(),
                                          logits.shape().rows(), logits.shape().back(), T(scale));
    });
  });
}

template <class... Compute>
void BasicCpu<Compute...>::dropout(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset) const {
  detail::same(x, y, "dropout");
  visit(x.dtype(), [&]<class T>() { epl::detail::cpu::dropout(x.data<T>(), y.data<T>(), x.numel(), p, key, offset); });
}

template <class... Compute>
void BasicCpu<Compute...>::dropout_columns(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset, std::int64_t whole_cols,
    std::int64_t col0) const {
  detail::same(x, y, "dropout_columns");
  EPL_CHECK(col0 >= 0 && col0 + x.shape().back() <= whole_cols, "dropout_columns: columns [", col0, ", ", col0 + x.shape().back(),
            ") outside rows of ", whole_cols);
  visit(x.dtype(), [&]<class T>() {
    epl::detail::cpu::dropout_columns(x.data<T>(), y.data<T>(), x.shape().rows(), x.shape().back(), p, key, offset, whole_cols, col0);
  });
}

template <class... Compute>
void BasicCpu<Compute...>::permute_heads(const Tensor& tokens, const Tensor& heads, std::int64_t offset, bool to_heads) const {
  EPL_CHECK(tokens.rank() == 3 && heads.rank() == 4 && tokens.dim(0) == heads.dim(0) && tokens.dim(1) == heads.dim(2) &&
                offset + heads.dim(1) * heads.dim(3) <= tokens.dim(2),
            "permute_heads: tokens ", tokens.shape(), ", heads ", heads.shape(), ", offset ", offset);
  detail::same_dtype(tokens, heads, "permute_heads");
  visit(tokens.dtype(), [&]<class T>() {
    epl::detail::cpu::permute_heads(tokens.data<T>(), heads.data<T>(), heads.dim(0), heads.dim(2), heads.dim(1),
                               heads.dim(3), tokens.dim(2), offset, to_heads);
  });
}

template <class... Compute>
void BasicCpu<Compute...>::sgd_update(const Tensor& p, const Tensor& g, double lr, double wd, double grad_scale) const {
  detail::same(p, g, "sgd_update");
  detail::update("sgd_update", lr, wd, grad_scale);
  visit(p.dtype(), [&]<class T>() { epl::detail::cpu::sgd_update(p.data<T>(), g.data<T>(), p.numel(), T(lr), T(wd), T(grad_scale)); });
}

template <class... Compute>
void BasicCpu<Compute...>::momentum_update(const Tensor& p, const Tensor& g, const Tensor& v, double lr, double mu, double wd, bool nesterov,
                                              double grad_scale) const {
  detail::same(p, g, "momentum_update");
  detail::same(p, v, "momentum_update");
  detail::update("momentum_update", lr, wd, grad_scale);
  detail::momentum(mu);
  visit(p.dtype(), [&]<class T>() {
    epl::detail::cpu::momentum_update(p.data<T>(), g.data<T>(), v.data<T>(), p.numel(), T(lr), T(mu), T(wd), nesterov, T(grad_scale));
  });
}

template <class... Compute>
void BasicCpu<Compute...>::adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double beta1,
    double beta2, double eps, double wd, std::int64_t step, double grad_scale) const {
  detail::same(p, g, "adamw_update");
  detail::same(p, m, "adamw_update");
  detail::same(p, v, "adamw_update");
  detail::update("adamw_update", lr, wd, grad_scale);
  detail::adamw(beta1, beta2, eps, step);
  visit(p.dtype(), [&]<class T>() {
    epl::detail::cpu::adamw_update(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), T(lr), T(beta1),
                              T(beta2), T(eps), T(wd), step, T(grad_scale));
  });
}

template <class... Compute>
Tensor BasicCpu<Compute...>::rounded(const Tensor& x, DType to) const {
  if (to != DType::kBF16 && to != DType::kF16) return x;
  Tensor r = empty(x.shape(), x.dtype(), MemoryCategory::kWorkspace);
  visit(x.dtype(), [&]<class T>() {
    if (to == DType::kBF16) epl::detail::cpu::round_through<bfloat16>(x.data<T>(), r.data<T>(), x.numel());
    else epl::detail::cpu::round_through<half>(x.data<T>(), r.data<T>(), x.numel());
  });
  return r;
}

template <class... Compute>
void BasicCpu<Compute...>::check_rows(const Tensor& table, const Tensor& index, const Tensor& rows, const char* what) {
  detail::rows_by_index(table, index, rows, what);
  for (auto i : index.span<std::int64_t>())
    EPL_CHECK(i >= 0 && i < table.shape().rows(), what, ": row ", i, " outside [0, ", table.shape().rows(), ")");
}

template <class... Compute>
void BasicCpu<Compute...>::check_ids(const Tensor& ids, std::int64_t limit, const char* what) {
  visit_index(ids.dtype(), [&]<class I>() {
    const auto all = ids.span<I>();
    for (std::size_t k = 0; k < all.size(); ++k) {
      if (all[k] >= 0 && all[k] < limit) continue;
      std::string at;  // where it is: [row] or [row, column] in the ids' shape
      for (std::int64_t d = ids.rank() - 1, rest = static_cast<std::int64_t>(k); d >= 0; rest /= ids.dim(d), --d)
        at = std::to_string(rest % ids.dim(d)) + (at.empty() ? "" : ", ") + at;
      EPL_FAIL(what, ": id ", all[k], " at [", at, "] of ", ids.shape(), " outside [0, ", limit, "); check the vocabulary size");
    }
  });
}

}  // namespace device
}  // namespace v0
}  // namespace epl
