#pragma once
/// \file
/// \brief device::Cpu — the complete host backend over Eigen.
///
/// Every operation checks shapes and dtypes, then runs one typed kernel from
/// device/cpu/{blas,elementwise,nn_kernels,optim_kernels}.hpp. Output tensors are handles
/// (like std::span): they are taken by const reference and written through.
#include <cstring>

#include "epl/core/tensor.hpp"
#include "epl/device/cpu/blas.hpp"
#include "epl/device/cpu/nn_kernels.hpp"
#include "epl/device/cpu/optim_kernels.hpp"

namespace epl {
inline namespace v0 {
namespace device {

/// \brief The CPU device: host memory from a caching allocator, work in the calling thread
/// (plus OpenMP workers), so ordering is program order and synchronize() is a no-op.
template <class Unused = void>
class BasicCpu {
 public:
  static constexpr DeviceKind kind = DeviceKind::kCpu;

  /// \param index the accounting index (one per thread rank); \param threads OpenMP threads
  /// for this thread's kernels (0 keeps the current setting).
  explicit BasicCpu(int index = 0, int threads = 0) : alloc_(&host_allocator(index)) {
    detail::cpu::set_threads(threads);
  }

  [[nodiscard]] DeviceId id() const noexcept { return alloc_->device(); }
  [[nodiscard]] Allocator& allocator() const noexcept { return *alloc_; }
  [[nodiscard]] int threads() const { return detail::cpu::threads(); }
  void synchronize() const noexcept {}

  // ---- memory ------------------------------------------------------------------------
  [[nodiscard]] Tensor empty(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    return Tensor(*alloc_, s, t, c);
  }
  [[nodiscard]] Tensor zeros(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    Tensor x = empty(s, t, c);
    std::memset(x.raw(), 0, x.bytes());
    return x;
  }
  void copy(const Tensor& src, const Tensor& dst) const {
    same(src, dst, "copy");
    std::memcpy(dst.raw(), src.raw(), src.bytes());
  }
  void upload(const void* host, const Tensor& dst) const { std::memcpy(dst.raw(), host, dst.bytes()); }
  void download(const Tensor& src, void* host) const { std::memcpy(host, src.raw(), src.bytes()); }
  void fill(const Tensor& x, double v) const {
    visit_any(x.dtype(), [&]<class T>() { detail::cpu::fill(x.data<T>(), x.numel(), static_cast<T>(v)); });
  }
  /// dst = src converted to dst's dtype (any float <-> any float).
  void cast(const Tensor& src, const Tensor& dst) const {
    EPL_CHECK(src.numel() == dst.numel(), "cast of ", src.shape(), " into ", dst.shape());
    visit_floating(src.dtype(), [&]<class From>() {
      visit_floating(dst.dtype(), [&]<class To>() {
        detail::cpu::cast(src.data<From>(), dst.data<To>(), src.numel());
      });
    });
  }

  // ---- BLAS --------------------------------------------------------------------------
  /// c = alpha op(a) op(b) + beta c on the 2-D views [rows, last] of a, b and c.
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
            double alpha = 1, double beta = 0) const {
    // plain variables, not structured bindings: lambdas below capture them (clang < 16 cannot)
    const std::int64_t m = ta ? a.shape().back() : a.shape().rows(), k = ta ? a.shape().rows() : a.shape().back();
    const std::int64_t kb = tb ? b.shape().back() : b.shape().rows(), n = tb ? b.shape().rows() : b.shape().back();
    EPL_CHECK(k == kb && c.shape().rows() == m && c.shape().back() == n, "gemm: op(a) is [", m, ", ", k,
              "], op(b) is [", kb, ", ", n, "], c is ", c.shape());
    same_dtype(a, b, "gemm");
    same_dtype(a, c, "gemm");
    visit_compute(a.dtype(), [&]<class T>() {
      detail::cpu::gemm<T>(ta, tb, m, n, k, T(alpha), a.data<T>(), a.shape().back(), b.data<T>(),
                           b.shape().back(), T(beta), c.data<T>(), n);
    });
  }
  /// The same GEMM on each of the [batch, .., ..] blocks of rank-3 tensors.
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
                    double alpha = 1, double beta = 0) const {
    EPL_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3 && a.dim(0) == b.dim(0) && a.dim(0) == c.dim(0),
              "gemm_batched needs rank-3 tensors of one batch: ", a.shape(), b.shape(), c.shape());
    std::int64_t m = ta ? a.dim(2) : a.dim(1), k = ta ? a.dim(1) : a.dim(2);
    std::int64_t kb = tb ? b.dim(2) : b.dim(1), n = tb ? b.dim(1) : b.dim(2);
    EPL_CHECK(k == kb && c.dim(1) == m && c.dim(2) == n, "gemm_batched: shapes ", a.shape(), b.shape(), c.shape());
    same_dtype(a, b, "gemm_batched");
    same_dtype(a, c, "gemm_batched");
    visit_compute(a.dtype(), [&]<class T>() {
      detail::cpu::gemm_batched<T>(a.dim(0), ta, tb, m, n, k, T(alpha), a.data<T>(), m * k, b.data<T>(), k * n,
                                   T(beta), c.data<T>(), m * n);
    });
  }

  // ---- element-wise and reductions ---------------------------------------------------
  void add(const Tensor& a, const Tensor& b, const Tensor& out) const {
    same(a, b, "add");
    same(a, out, "add");
    visit_floating(a.dtype(), [&]<class T>() { detail::cpu::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
  }
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) const {
    same(a, b, "mul");
    same(a, out, "mul");
    visit_floating(a.dtype(), [&]<class T>() { detail::cpu::mul(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
  }
  /// y += alpha x
  void axpy(double alpha, const Tensor& x, const Tensor& y) const {
    same(x, y, "axpy");
    visit_floating(x.dtype(), [&]<class T>() { detail::cpu::axpy(T(alpha), x.data<T>(), y.data<T>(), x.numel()); });
  }
  void scale(const Tensor& x, double alpha) const {
    visit_floating(x.dtype(), [&]<class T>() { detail::cpu::scale(x.data<T>(), x.numel(), T(alpha)); });
  }
  /// y[r, :] += v over the rows of y's 2-D view.
  void add_row_vector(const Tensor& y, const Tensor& v) const {
    EPL_CHECK(v.numel() == y.shape().back(), "add_row_vector: vector ", v.shape(), " for rows of ", y.shape());
    same_dtype(y, v, "add_row_vector");
    visit_floating(y.dtype(), [&]<class T>() {
      detail::cpu::add_row_vector(y.data<T>(), v.data<T>(), y.shape().rows(), y.shape().back());
    });
  }
  /// out = beta out + the column sums of x's 2-D view.
  void sum_rows(const Tensor& x, const Tensor& out, double beta = 0) const {
    EPL_CHECK(out.numel() == x.shape().back(), "sum_rows: output ", out.shape(), " for rows of ", x.shape());
    same_dtype(x, out, "sum_rows");
    visit_compute(x.dtype(), [&]<class T>() {
      detail::cpu::sum_rows(x.data<T>(), out.data<T>(), x.shape().rows(), x.shape().back(), T(beta));
    });
  }
  [[nodiscard]] double sum_squares(const Tensor& x) const {
    return visit_floating(x.dtype(), [&]<class T>() { return detail::cpu::sum_squares(x.data<T>(), x.numel()); });
  }
  void gelu(const Tensor& x, const Tensor& y) const { unary(x, y, "gelu", [](auto* a, auto* b, auto n) { detail::cpu::gelu(a, b, n); }); }
  void relu(const Tensor& x, const Tensor& y) const { unary(x, y, "relu", [](auto* a, auto* b, auto n) { detail::cpu::relu(a, b, n); }); }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
    binary(x, dy, dx, "gelu_backward", [](auto* a, auto* b, auto* c, auto n) { detail::cpu::gelu_backward(a, b, c, n); });
  }
  void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
    binary(x, dy, dx, "relu_backward", [](auto* a, auto* b, auto* c, auto n) { detail::cpu::relu_backward(a, b, c, n); });
  }

  // ---- layer kernels -----------------------------------------------------------------
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd, double eps) const {
    auto rows = x.shape().rows(), cols = x.shape().back();
    EPL_CHECK(gamma.numel() == cols && beta.numel() == cols && mean.numel() == rows && rstd.numel() == rows,
              "layer_norm: x ", x.shape(), " gamma ", gamma.shape(), " beta ", beta.shape());
    same(x, y, "layer_norm");
    visit_compute(x.dtype(), [&]<class T>() {
      detail::cpu::layer_norm(x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.data<T>(),
                              rstd.data<T>(), rows, cols, T(eps));
    });
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) const {
    same(x, dy, "layer_norm_backward");
    same(x, dx, "layer_norm_backward");
    visit_compute(x.dtype(), [&]<class T>() {
      detail::cpu::layer_norm_backward(x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(),
                                       dx.data<T>(), dgamma.data<T>(), dbeta.data<T>(), x.shape().rows(), x.shape().back());
    });
  }
  /// p = causal softmax(scale s) over [batch, t, t].
  void softmax_causal(const Tensor& s, const Tensor& p, double scale) const {
    EPL_CHECK(s.rank() == 3 && s.dim(1) == s.dim(2), "softmax_causal needs [batch, t, t], got ", s.shape());
    same(s, p, "softmax_causal");
    visit_compute(s.dtype(), [&]<class T>() {
      detail::cpu::softmax_causal(s.data<T>(), p.data<T>(), s.dim(0), s.dim(1), T(scale));
    });
  }
  void softmax_causal_backward(const Tensor& p, const Tensor& dp, const Tensor& ds, double scale) const {
    same(p, dp, "softmax_causal_backward");
    same(p, ds, "softmax_causal_backward");
    visit_compute(p.dtype(), [&]<class T>() {
      detail::cpu::softmax_causal_backward(p.data<T>(), dp.data<T>(), ds.data<T>(), p.dim(0), p.dim(1), T(scale));
    });
  }
  /// out[i, :] = table[ids[i], :]; ids out of [0, rows) are an error naming the bad id.
  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) const {
    check_ids(ids, table.dim(0), "embedding");
    EPL_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: output ", out.shape(), " for ", ids.shape(), " ids");
    visit_index(ids.dtype(), [&]<class I>() {
      visit_floating(table.dtype(), [&]<class T>() {
        detail::cpu::embedding(ids.data<I>(), table.data<T>(), out.data<T>(), ids.numel(), table.dim(1));
      });
    });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) const {
    check_ids(ids, dtable.dim(0), "embedding_backward");
    visit_index(ids.dtype(), [&]<class I>() {
      visit_floating(dtable.dtype(), [&]<class T>() {
        detail::cpu::embedding_backward(ids.data<I>(), dout.data<T>(), dtable.data<T>(), ids.numel(), dtable.dim(1));
      });
    });
  }
  /// Sum over rows of the cross-entropy of logits [rows, classes] against class ids.
  [[nodiscard]] double cross_entropy(const Tensor& logits, const Tensor& targets) const {
    check_ids(targets, logits.shape().back(), "cross_entropy targets");
    EPL_CHECK(targets.numel() == logits.shape().rows(), "cross_entropy: ", targets.numel(), " targets for ",
              logits.shape().rows(), " rows of logits ", logits.shape());
    return visit_index(targets.dtype(), [&]<class I>() {
      return visit_compute(logits.dtype(), [&]<class T>() {
        return detail::cpu::cross_entropy(logits.data<T>(), targets.data<I>(), logits.shape().rows(), logits.shape().back());
      });
    });
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, double scale) const {
    same(logits, dlogits, "cross_entropy_backward");
    visit_index(targets.dtype(), [&]<class I>() {
      visit_compute(logits.dtype(), [&]<class T>() {
        detail::cpu::cross_entropy_backward(logits.data<T>(), targets.data<I>(), dlogits.data<T>(),
                                            logits.shape().rows(), logits.shape().back(), T(scale));
      });
    });
  }
  void dropout(const Tensor& x, const Tensor& y, double p, std::uint64_t key) const {
    same(x, y, "dropout");
    visit_floating(x.dtype(), [&]<class T>() { detail::cpu::dropout(x.data<T>(), y.data<T>(), x.numel(), p, key); });
  }
  /// Between tokens [b, t, row] (heads at column offset + h d) and heads [b, h, t, d].
  void permute_heads(const Tensor& tokens, const Tensor& heads, std::int64_t offset, bool to_heads) const {
    EPL_CHECK(tokens.rank() == 3 && heads.rank() == 4 && tokens.dim(0) == heads.dim(0) && tokens.dim(1) == heads.dim(2) &&
                  offset + heads.dim(1) * heads.dim(3) <= tokens.dim(2),
              "permute_heads: tokens ", tokens.shape(), ", heads ", heads.shape(), ", offset ", offset);
    same_dtype(tokens, heads, "permute_heads");
    visit_floating(tokens.dtype(), [&]<class T>() {
      detail::cpu::permute_heads(tokens.data<T>(), heads.data<T>(), heads.dim(0), heads.dim(2), heads.dim(1),
                                 heads.dim(3), tokens.dim(2), offset, to_heads);
    });
  }

  // ---- optimizer updates -------------------------------------------------------------
  void sgd_update(const Tensor& p, const Tensor& g, double lr, double wd) const {
    same(p, g, "sgd_update");
    visit_compute(p.dtype(), [&]<class T>() { detail::cpu::sgd_update(p.data<T>(), g.data<T>(), p.numel(), T(lr), T(wd)); });
  }
  void momentum_update(const Tensor& p, const Tensor& g, const Tensor& v, double lr, double mu, double wd, bool nesterov) const {
    same(p, g, "momentum_update");
    same(p, v, "momentum_update");
    visit_compute(p.dtype(), [&]<class T>() {
      detail::cpu::momentum_update(p.data<T>(), g.data<T>(), v.data<T>(), p.numel(), T(lr), T(mu), T(wd), nesterov);
    });
  }
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double beta1,
                    double beta2, double eps, double wd, std::int64_t step) const {
    same(p, g, "adamw_update");
    same(p, m, "adamw_update");
    same(p, v, "adamw_update");
    visit_compute(p.dtype(), [&]<class T>() {
      detail::cpu::adamw_update(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), T(lr), T(beta1),
                                T(beta2), T(eps), T(wd), step);
    });
  }

 private:
  static void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
    EPL_CHECK(a.dtype() == b.dtype(), op, ": dtypes ", name_of(a.dtype()), " and ", name_of(b.dtype()), " differ");
  }
  static void same(const Tensor& a, const Tensor& b, const char* op) {
    same_dtype(a, b, op);
    EPL_CHECK(a.numel() == b.numel(), op, ": ", a.shape(), " and ", b.shape(), " differ in size");
  }
  static void check_ids(const Tensor& ids, std::int64_t limit, const char* what) {
    visit_index(ids.dtype(), [&]<class I>() {
      for (auto id : ids.span<I>())
        EPL_CHECK(id >= 0 && id < limit, what, ": id ", id, " outside [0, ", limit, "); check the vocabulary size");
    });
  }
  template <class Fn>
  static void unary(const Tensor& x, const Tensor& y, const char* op, Fn fn) {
    same(x, y, op);
    visit_compute(x.dtype(), [&]<class T>() { fn(x.data<T>(), y.data<T>(), x.numel()); });
  }
  template <class Fn>
  static void binary(const Tensor& x, const Tensor& dy, const Tensor& dx, const char* op, Fn fn) {
    same(x, dy, op);
    same(x, dx, op);
    visit_compute(x.dtype(), [&]<class T>() { fn(x.data<T>(), dy.data<T>(), dx.data<T>(), x.numel()); });
  }

  HostAllocator* alloc_;
};
using Cpu = BasicCpu<>;

}  // namespace device
}  // namespace v0
}  // namespace epl
