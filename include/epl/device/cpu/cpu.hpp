#pragma once
/// \file
/// \brief device::Cpu — the complete host backend over Eigen.
///
/// Every operation checks shapes and dtypes, then runs one typed kernel from
/// device/cpu/{blas,elementwise,nn_kernels,optim_kernels}.hpp. Output tensors are handles
/// (like std::span): they are taken by const reference and written through.
///
/// The device computes in the element types Compute... (device::Cpu: f32; device::CpuF64: f32
/// and f64, for gradient checks). Kernels are instantiated for those types only, and a member
/// function only when a program calls it (BasicCpu is a class template): a program pays in
/// compile time for what it runs. Copies, fills and casts take every dtype.
#include <concepts>
#include <cstring>
#include <string_view>
#include <tuple>

#include "epl/core/tensor.hpp"
#include "epl/device/checks.hpp"
#include "epl/device/functors.hpp"
#include "epl/device/cpu/blas.hpp"
#include "epl/device/cpu/nn_kernels.hpp"
#include "epl/device/cpu/optim_kernels.hpp"

namespace epl {
inline namespace v0 {
namespace device {

/// \brief The CPU device: host memory from a caching allocator, work in the calling thread
/// (plus OpenMP workers), so ordering is program order and synchronize() is a no-op.
/// \tparam Compute the element types kernels compute in (float, double)
template <class... Compute>
class BasicCpu {
  static_assert(sizeof...(Compute) > 0, "epl: device::BasicCpu<Compute...> needs at least one compute type (float, double)");

 public:
  static constexpr DeviceKind kind = DeviceKind::kCpu;
  static constexpr std::string_view kName = sizeof...(Compute) == 1 ? "device::Cpu" : "device::CpuF64";
  /// Whether the device computes in T.
  template <class T>
  static constexpr bool kComputes = (std::is_same_v<T, Compute> || ...);

  /// \param index the accounting index (one per thread rank); \param threads OpenMP threads
  /// for this thread's kernels (0 keeps the current setting).
  explicit BasicCpu(int index = 0, int threads = 0) : alloc_(&host_allocator(index)) {
    epl::detail::cpu::set_threads(threads);
  }

  [[nodiscard]] DeviceId id() const noexcept { return alloc_->device(); }
  [[nodiscard]] Allocator& allocator() const noexcept { return *alloc_; }
  [[nodiscard]] int threads() const { return epl::detail::cpu::threads(); }
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
  /// \brief A tensor in the host pool this device offloads to (offload.level): host memory on
  /// an account of its own (host:index), which every kernel of this device reads and writes.
  [[nodiscard]] Tensor host_empty(Shape s, DType t, MemoryCategory c) const {
    return Tensor(offload_allocator(id().index), s, t, c);
  }
  [[nodiscard]] Tensor host_zeros(Shape s, DType t, MemoryCategory c) const {
    Tensor x = host_empty(s, t, c);
    std::memset(x.raw(), 0, x.bytes());
    return x;
  }
  /// dst = src, between this device's memory and its host pool in either direction too.
  void copy(const Tensor& src, const Tensor& dst) const {
    detail::same(src, dst, "copy");
    std::memcpy(dst.raw(), src.raw(), src.bytes());
  }  /// \brief A copy started by copy_ahead(). The CPU copies at once: nothing to wait for.
  struct CopyTicket {};
  /// \brief dst = src, started ahead of its use (offload's prefetch; the CUDA device runs it on
  /// a copy stream). The CPU copies now.
  CopyTicket copy_ahead(const Tensor& src, const Tensor& dst) const {
    copy(src, dst);
    return {};
  }
  /// \brief The device's later work sees the copy (always, on the CPU).
  void await(const CopyTicket&) const {}

  void upload(const void* host, const Tensor& dst) const { std::memcpy(dst.raw(), host, dst.bytes()); }
  void download(const Tensor& src, void* host) const { std::memcpy(host, src.raw(), src.bytes()); }
  void fill(const Tensor& x, double v) const {
    visit_any(x.dtype(), [&]<class T>() { epl::detail::cpu::fill(x.data<T>(), x.numel(), static_cast<T>(v)); });
  }
  /// dst = src converted to dst's dtype (any float <-> any float).
  void cast(const Tensor& src, const Tensor& dst) const {
    EPL_CHECK(src.numel() == dst.numel(), "cast of ", src.shape(), " into ", dst.shape());
    visit_floating(src.dtype(), [&]<class From>() {
      visit_floating(dst.dtype(), [&]<class To>() {
        epl::detail::cpu::cast(src.data<From>(), dst.data<To>(), src.numel());
      });
    });
  }

  // ---- BLAS --------------------------------------------------------------------------
  /// c = alpha op(a) op(b) + beta c on the 2-D views [rows, last] of a, b and c.
  /// \param inputs a half type (bf16, f16: AMP) rounds op(a) and op(b) to it (nearest even)
  /// before they multiply; products accumulate in c's dtype. bf16 on f32 with AVX512-BF16 packs
  /// the rounded operands straight into the kernel, which multiplies them as bf16; otherwise the
  /// operands are rounded into workspace copies that live for this call and multiply in c's dtype.
  /// Any other dtype multiplies them as they are.
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
            double alpha = 1, double beta = 0, DType inputs = DType::kF32) const {
    const auto g = detail::gemm_dims(a, ta, b, tb, c);
    const bool native = native_bf16(a, inputs);
    const Tensor ra = native ? a : rounded(a, inputs), rb = native ? b : rounded(b, inputs);
    visit(a.dtype(), [&]<class T>() {
      epl::detail::cpu::gemm<T>(ta, tb, g.m, g.n, g.k, T(alpha), ra.data<T>(), a.shape().back(), rb.data<T>(), b.shape().back(), T(beta),
                                c.data<T>(), g.n, native);
    });
  }
  /// The same GEMM on each of the [batch, .., ..] blocks of rank-3 tensors.
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
                    double alpha = 1, double beta = 0, DType inputs = DType::kF32) const {
    const auto g = detail::gemm_batched_dims(a, ta, b, tb, c);
    const bool native = native_bf16(a, inputs);
    const Tensor ra = native ? a : rounded(a, inputs), rb = native ? b : rounded(b, inputs);
    visit(a.dtype(), [&]<class T>() {
      epl::detail::cpu::gemm_batched<T>(a.dim(0), ta, tb, g.m, g.n, g.k, T(alpha), ra.data<T>(), g.m * g.k, rb.data<T>(), g.k * g.n,
                                        T(beta), c.data<T>(), g.m * g.n, native);
    });
  }

  // ---- element-wise and reductions ---------------------------------------------------
  void add(const Tensor& a, const Tensor& b, const Tensor& out) const {
    detail::same(a, b, "add");
    detail::same(a, out, "add");
    visit(a.dtype(), [&]<class T>() { epl::detail::cpu::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
  }
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) const {
    detail::same(a, b, "mul");
    detail::same(a, out, "mul");
    visit(a.dtype(), [&]<class T>() { epl::detail::cpu::mul(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
  }
  /// y += alpha x
  void axpy(double alpha, const Tensor& x, const Tensor& y) const {
    detail::same(x, y, "axpy");
    visit(x.dtype(), [&]<class T>() { epl::detail::cpu::axpy(T(alpha), x.data<T>(), y.data<T>(), x.numel()); });
  }
  void scale(const Tensor& x, double alpha) const {
    visit(x.dtype(), [&]<class T>() { epl::detail::cpu::scale(x.data<T>(), x.numel(), T(alpha)); });
  }
  /// y[r, :] += v over the rows of y's 2-D view.
  void add_row_vector(const Tensor& y, const Tensor& v) const {
    EPL_CHECK(v.numel() == y.shape().back(), "add_row_vector: vector ", v.shape(), " for rows of ", y.shape());
    detail::same_dtype(y, v, "add_row_vector");
    visit(y.dtype(), [&]<class T>() {
      epl::detail::cpu::add_row_vector(y.data<T>(), v.data<T>(), y.shape().rows(), y.shape().back());
    });
  }
  /// out = beta out + the column sums of x's 2-D view.
  void sum_rows(const Tensor& x, const Tensor& out, double beta = 0) const {
    EPL_CHECK(out.numel() == x.shape().back(), "sum_rows: output ", out.shape(), " for rows of ", x.shape());
    detail::same_dtype(x, out, "sum_rows");
    visit(x.dtype(), [&]<class T>() {
      epl::detail::cpu::sum_rows(x.data<T>(), out.data<T>(), x.shape().rows(), x.shape().back(), T(beta));
    });
  }
  [[nodiscard]] double sum_squares(const Tensor& x) const {
    return visit(x.dtype(), [&]<class T>() { return epl::detail::cpu::sum_squares(x.data<T>(), x.numel()); });
  }
  void gelu(const Tensor& x, const Tensor& y) const { unary(x, y, "gelu", [](auto* a, auto* b, auto n) { epl::detail::cpu::gelu(a, b, n); }); }
  void relu(const Tensor& x, const Tensor& y) const { map(y, ops::Relu{}, x); }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
    binary(x, dy, dx, "gelu_backward", [](auto* a, auto* b, auto* c, auto n) { epl::detail::cpu::gelu_backward(a, b, c, n); });
  }
  void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const { map(dx, ops::ReluGrad{}, x, dy); }

  /// out[i] = fn(in[i]...) for every element: element-wise math of any kind, on any device
  /// (device/functors.hpp has the built-in functions and says how to write one).
  template <class Fn, std::same_as<Tensor>... In>
  void map(const Tensor& out, Fn fn, const In&... in) const {
    static_assert(sizeof...(In) >= 1 && sizeof...(In) <= 4, "epl: map takes one to four input tensors");
    (detail::same(in, out, "map"), ...);
    visit(out.dtype(), [&]<class T>() {
      T* o = out.data<T>();
      const auto src = std::make_tuple(static_cast<const T*>(in.template data<T>())...);
      epl::detail::cpu::parallel_for(out.numel(), epl::detail::cpu::kGrain, [&](std::int64_t b, std::int64_t e) {
        std::apply([&](auto... p) {
          for (std::int64_t i = b; i < e; ++i) o[i] = fn(p[i]...);
        }, src);
      });
    });
  }

  // ---- layer kernels -----------------------------------------------------------------
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
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
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) const {
    detail::same(x, dy, "layer_norm_backward");
    detail::same(x, dx, "layer_norm_backward");
    visit(x.dtype(), [&]<class T>() {
      epl::detail::cpu::layer_norm_backward(x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(),
                                       dx.data<T>(), dgamma.data<T>(), dbeta.data<T>(), x.shape().rows(), x.shape().back());
    });
  }
  /// p = causal softmax(scale s) over [batch, t, t].
  void softmax_causal(const Tensor& s, const Tensor& p, double scale) const {
    EPL_CHECK(s.rank() == 3 && s.dim(1) == s.dim(2), "softmax_causal needs [batch, t, t], got ", s.shape());
    detail::same(s, p, "softmax_causal");
    visit(s.dtype(), [&]<class T>() {
      epl::detail::cpu::softmax_causal(s.data<T>(), p.data<T>(), s.dim(0), s.dim(1), T(scale));
    });
  }
  void softmax_causal_backward(const Tensor& p, const Tensor& dp, const Tensor& ds, double scale) const {
    detail::same(p, dp, "softmax_causal_backward");
    detail::same(p, ds, "softmax_causal_backward");
    visit(p.dtype(), [&]<class T>() {
      epl::detail::cpu::softmax_causal_backward(p.data<T>(), dp.data<T>(), ds.data<T>(), p.dim(0), p.dim(1), T(scale));
    });
  }
  /// out[i, :] = table[ids[i], :]; ids out of [0, rows) are an error naming the bad id. A part
  /// of a vocabulary-parallel table holds rows [first, first + its rows) of a vocabulary of
  /// `vocab` (0: its own rows): ids of other parts give zero rows, ids outside the vocabulary are
  /// the error.
  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, std::int64_t first = 0, std::int64_t vocab = 0) const {
    check_ids(ids, vocab > 0 ? vocab : table.dim(0), "embedding");
    EPL_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: output ", out.shape(), " for ", ids.shape(), " ids");
    visit_index(ids.dtype(), [&]<class I>() {
      visit(table.dtype(), [&]<class T>() {
        epl::detail::cpu::embedding(ids.data<I>(), table.data<T>(), out.data<T>(), ids.numel(), table.dim(1), first, table.dim(0));
      });
    });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, std::int64_t first = 0,
                          std::int64_t vocab = 0) const {
    check_ids(ids, vocab > 0 ? vocab : dtable.dim(0), "embedding_backward");
    visit_index(ids.dtype(), [&]<class I>() {
      visit(dtable.dtype(), [&]<class T>() {
        epl::detail::cpu::embedding_backward(ids.data<I>(), dout.data<T>(), dtable.data<T>(), ids.numel(), dtable.dim(1), first,
                                             dtable.dim(0));
      });
    });
  }
  /// y = softmax over the last dimension of each row of x.
  void softmax_rows(const Tensor& x, const Tensor& y) const {
    detail::same(x, y, "softmax_rows");
    visit(x.dtype(), [&]<class T>() { epl::detail::cpu::softmax_rows(x.data<T>(), y.data<T>(), x.shape().rows(), x.shape().back()); });
  }
  /// dx = y (dy - sum(dy y)) per row: softmax_rows' backward from its output y.
  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const {
    detail::same(y, dy, "softmax_rows_backward");
    detail::same(y, dx, "softmax_rows_backward");
    visit(y.dtype(), [&]<class T>() {
      epl::detail::cpu::softmax_rows_backward(y.data<T>(), dy.data<T>(), dx.data<T>(), y.shape().rows(), y.shape().back());
    });
  }
  /// dst[i, :] = src[index[i], :]; index an i64 tensor of row numbers of src.
  void gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const {
    check_rows(src, index, dst, "gather_rows");
    visit(src.dtype(), [&]<class T>() {
      epl::detail::cpu::gather_rows(src.data<T>(), index.data<std::int64_t>(), dst.data<T>(), index.numel(), src.shape().back());
    });
  }
  /// dst[index[i], :] += weight[i] src[i, :] (weight undefined: 1).
  void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& weight, const Tensor& dst) const {
    check_rows(dst, index, src, "scatter_add_rows");
    EPL_CHECK(!weight.defined() || weight.numel() == index.numel(), "scatter_add_rows: ", weight.numel(), " weights for ",
              index.numel(), " rows");
    visit(src.dtype(), [&]<class T>() {
      epl::detail::cpu::scatter_add_rows(src.data<T>(), index.data<std::int64_t>(), weight.defined() ? weight.data<T>() : nullptr,
                                         dst.data<T>(), index.numel(), src.shape().back());
    });
  }
  /// out[i] = the dot product of row i of a and of b.
  void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) const {
    detail::same(a, b, "row_dot");
    EPL_CHECK(out.numel() == a.shape().rows(), "row_dot: ", out.numel(), " outputs for ", a.shape().rows(), " rows");
    visit(a.dtype(), [&]<class T>() { epl::detail::cpu::row_dot(a.data<T>(), b.data<T>(), out.data<T>(), a.shape().rows(), a.shape().back()); });
  }
  /// out[r] = max over the last dimension of x's row r.
  void row_max(const Tensor& x, const Tensor& out) const {
    EPL_CHECK(out.numel() == x.shape().rows(), "row_max: ", out.numel(), " outputs for ", x.shape().rows(), " rows of ", x.shape());
    detail::same_dtype(x, out, "row_max");
    visit(x.dtype(), [&]<class T>() { epl::detail::cpu::row_max(x.data<T>(), out.data<T>(), x.shape().rows(), x.shape().back()); });
  }
  /// A part of a vocabulary-parallel cross-entropy: logits [rows, cols] are classes [first, first +
  /// cols) of a vocabulary of `vocab`; given each row's maximum over the whole vocabulary, writes
  /// each row's sum of exp(logit - max) over this part and its target's logit (0 when the target is
  /// in another part). Targets outside the vocabulary are an error naming them.
  void cross_entropy_stats(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
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
  /// dlogits = scale (softmax - onehot(target)) over a part of the classes, from the whole rows'
  /// maxima and sums of exponentials (cross_entropy_stats, summed over the parts).
  void cross_entropy_part_backward(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
                                   const Tensor& dlogits, std::int64_t first, double scale) const {
    detail::same(logits, dlogits, "cross_entropy_part_backward");
    visit_index(targets.dtype(), [&]<class I>() {
      visit(logits.dtype(), [&]<class T>() {
        epl::detail::cpu::cross_entropy_part_backward(logits.data<T>(), targets.data<I>(), max.data<T>(), sum_exp.data<T>(),
                                                      dlogits.data<T>(), logits.shape().rows(), logits.shape().back(), first, T(scale));
      });
    });
  }
  /// Sum over rows of the cross-entropy of logits [rows, classes] against class ids.
  [[nodiscard]] double cross_entropy(const Tensor& logits, const Tensor& targets) const {
    check_ids(targets, logits.shape().back(), "cross_entropy targets");
    EPL_CHECK(targets.numel() == logits.shape().rows(), "cross_entropy: ", targets.numel(), " targets for ",
              logits.shape().rows(), " rows of logits ", logits.shape());
    return visit_index(targets.dtype(), [&]<class I>() {
      return visit(logits.dtype(), [&]<class T>() {
        return epl::detail::cpu::cross_entropy(logits.data<T>(), targets.data<I>(), logits.shape().rows(), logits.shape().back());
      });
    });
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, double scale) const {
    detail::same(logits, dlogits, "cross_entropy_backward");
    visit_index(targets.dtype(), [&]<class I>() {
      visit(logits.dtype(), [&]<class T>() {
        epl::detail::cpu::cross_entropy_backward(logits.data<T>(), targets.data<I>(), dlogits.data<T>(),
                                            logits.shape().rows(), logits.shape().back(), T(scale));
      });
    });
  }
  /// y = x * keep / (1 - p); element i keeps iff uniform(key, offset + i) >= p, so a shard of a
  /// tensor (a rank's rows of the global batch) draws exactly its part of the whole tensor's mask.
  void dropout(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset = 0) const {
    detail::same(x, y, "dropout");
    visit(x.dtype(), [&]<class T>() { epl::detail::cpu::dropout(x.data<T>(), y.data<T>(), x.numel(), p, key, offset); });
  }
  /// dropout of columns [col0, col0 + x's last dimension) of a tensor whose rows hold
  /// `whole_cols`: each element draws at its position in the whole tensor, so a tensor-parallel
  /// part draws exactly its part of the single-device mask.
  void dropout_columns(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset, std::int64_t whole_cols,
                       std::int64_t col0) const {
    detail::same(x, y, "dropout_columns");
    EPL_CHECK(col0 >= 0 && col0 + x.shape().back() <= whole_cols, "dropout_columns: columns [", col0, ", ", col0 + x.shape().back(),
              ") outside rows of ", whole_cols);
    visit(x.dtype(), [&]<class T>() {
      epl::detail::cpu::dropout_columns(x.data<T>(), y.data<T>(), x.shape().rows(), x.shape().back(), p, key, offset, whole_cols, col0);
    });
  }
  /// Between tokens [b, t, row] (heads at column offset + h d) and heads [b, h, t, d].
  void permute_heads(const Tensor& tokens, const Tensor& heads, std::int64_t offset, bool to_heads) const {
    EPL_CHECK(tokens.rank() == 3 && heads.rank() == 4 && tokens.dim(0) == heads.dim(0) && tokens.dim(1) == heads.dim(2) &&
                  offset + heads.dim(1) * heads.dim(3) <= tokens.dim(2),
              "permute_heads: tokens ", tokens.shape(), ", heads ", heads.shape(), ", offset ", offset);
    detail::same_dtype(tokens, heads, "permute_heads");
    visit(tokens.dtype(), [&]<class T>() {
      epl::detail::cpu::permute_heads(tokens.data<T>(), heads.data<T>(), heads.dim(0), heads.dim(2), heads.dim(1),
                                 heads.dim(3), tokens.dim(2), offset, to_heads);
    });
  }

  // ---- optimizer updates -------------------------------------------------------------
  void sgd_update(const Tensor& p, const Tensor& g, double lr, double wd) const {
    detail::same(p, g, "sgd_update");
    visit(p.dtype(), [&]<class T>() { epl::detail::cpu::sgd_update(p.data<T>(), g.data<T>(), p.numel(), T(lr), T(wd)); });
  }
  void momentum_update(const Tensor& p, const Tensor& g, const Tensor& v, double lr, double mu, double wd, bool nesterov) const {
    detail::same(p, g, "momentum_update");
    detail::same(p, v, "momentum_update");
    visit(p.dtype(), [&]<class T>() {
      epl::detail::cpu::momentum_update(p.data<T>(), g.data<T>(), v.data<T>(), p.numel(), T(lr), T(mu), T(wd), nesterov);
    });
  }
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double beta1,
                    double beta2, double eps, double wd, std::int64_t step) const {
    detail::same(p, g, "adamw_update");
    detail::same(p, m, "adamw_update");
    detail::same(p, v, "adamw_update");
    visit(p.dtype(), [&]<class T>() {
      epl::detail::cpu::adamw_update(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), T(lr), T(beta1),
                                T(beta2), T(eps), T(wd), step);
    });
  }

 private:
  // Whether the GEMM kernel rounds f32 operands to bf16 itself (AVX512-BF16).
  static bool native_bf16(const Tensor& a, DType inputs) {
    return epl::detail::cpu::kNativeBF16Gemm && inputs == DType::kBF16 && a.dtype() == DType::kF32;
  }
  // x rounded through the half type `to` into a workspace copy (x itself for any other dtype).
  Tensor rounded(const Tensor& x, DType to) const {
    if (to != DType::kBF16 && to != DType::kF16) return x;
    Tensor r = empty(x.shape(), x.dtype(), MemoryCategory::kWorkspace);
    visit(x.dtype(), [&]<class T>() {
      if (to == DType::kBF16) epl::detail::cpu::round_through<bfloat16>(x.data<T>(), r.data<T>(), x.numel());
      else epl::detail::cpu::round_through<half>(x.data<T>(), r.data<T>(), x.numel());
    });
    return r;
  }
  // rows[index[i]] of `table` and rows[i] of `rows` exist, and both have the same row length
  static void check_rows(const Tensor& table, const Tensor& index, const Tensor& rows, const char* what) {
    EPL_CHECK(index.dtype() == DType::kI64 && rows.shape().rows() == index.numel() && table.shape().back() == rows.shape().back(),
              what, ": table ", table.shape(), ", ", index.numel(), " ", name_of(index.dtype()), " indices, rows ", rows.shape());
    detail::same_dtype(table, rows, what);
    for (auto i : index.span<std::int64_t>())
      EPL_CHECK(i >= 0 && i < table.shape().rows(), what, ": row ", i, " outside [0, ", table.shape().rows(), ")");
  }
  static void check_ids(const Tensor& ids, std::int64_t limit, const char* what) {
    visit_index(ids.dtype(), [&]<class I>() {
      for (auto id : ids.span<I>())
        EPL_CHECK(id >= 0 && id < limit, what, ": id ", id, " outside [0, ", limit, "); check the vocabulary size");
    });
  }
  template <class Fn>
  static void unary(const Tensor& x, const Tensor& y, const char* op, Fn fn) {
    detail::same(x, y, op);
    visit(x.dtype(), [&]<class T>() { fn(x.data<T>(), y.data<T>(), x.numel()); });
  }
  template <class Fn>
  static void binary(const Tensor& x, const Tensor& dy, const Tensor& dx, const char* op, Fn fn) {
    detail::same(x, dy, op);
    detail::same(x, dx, op);
    visit(x.dtype(), [&]<class T>() { fn(x.data<T>(), dy.data<T>(), dx.data<T>(), x.numel()); });
  }

  template <class Fn>
  static decltype(auto) visit(DType t, Fn&& fn) {
    return detail::visit_among<Compute...>(t, kName, std::forward<Fn>(fn));
  }

  HostAllocator* alloc_;
};

/// \brief The CPU device for training: computes in f32.
using Cpu = BasicCpu<float>;
/// \brief The CPU device for gradient checks: f32 and f64.
using CpuF64 = BasicCpu<float, double>;

}  // namespace device
}  // namespace v0
}  // namespace epl
