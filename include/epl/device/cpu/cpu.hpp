#pragma once
/// \file
/// \brief device::Cpu — the complete host backend over Eigen.
///
/// Every operation checks shapes and dtypes, then runs one typed kernel from
/// device/cpu/{blas,elementwise,nn_kernels,optim_kernels}.hpp. Output tensors are handles
/// (like std::span): they are taken by const reference and written through. This header declares
/// the device; device/cpu/cpu.ipp (included at the end) defines its operations.
///
/// The device computes in the element types Compute... (device::Cpu: f32; device::CpuF64: f32
/// and f64, for gradient checks). Kernels are instantiated for those types only, and a member
/// function only when a program calls it (BasicCpu is a class template): a program pays in
/// compile time for what it runs. Copies, fills and casts take every dtype.
#include <concepts>
#include <cstring>
#include <optional>
#include <string_view>
#include <tuple>

#include "epl/core/memory.hpp"
#include "epl/core/tensor.hpp"
#include "epl/device/checks.hpp"
#include "epl/device/functors.hpp"
#include "epl/device/cpu/isa.hpp"
#include "epl/device/cpu/parallel.hpp"

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
  /// \brief Returns the cached blocks that no allocation since the last trim needed (all: every
  /// cached block), of this device's pool and of the host pool it offloads to
  /// (CachingAllocator::trim); the bytes. The Trainer calls it after each step, evaluation and
  /// prediction, and with all once it is built (start-up's whole model).
  std::size_t trim_cache(bool all = false) const noexcept {
    auto& device = host_allocator(id().index);
    auto& host = offload_allocator(id().index);
    return all ? device.release_cached() + host.release_cached() : device.trim() + host.trim();
  }

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
  }
  /// \brief A copy started by copy_ahead(). The CPU copies at once: nothing to wait for.
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
  void fill(const Tensor& x, double v) const;
  /// dst = src converted to dst's dtype (any dtype to any dtype).
  void cast(const Tensor& src, const Tensor& dst) const;

  // ---- BLAS --------------------------------------------------------------------------
  /// \brief The kernel that multiplies bf16 operands (AMP) in this process: AMX where the CPU
  /// has it, AVX512-BF16 where it measures faster than f32 here, else f32 on rounded operands
  /// (device/cpu/bf16_kernel.hpp).
  [[nodiscard]] static CpuBf16Kernel bf16_kernel();
  /// \brief Forces that kernel for the whole process (nullopt: back to the measured choice), for
  /// tests and benchmarks; one this CPU or build cannot run is an error naming what it lacks.
  static void use_bf16_kernel(std::optional<CpuBf16Kernel> kernel);
  /// \brief The kernel f32 GEMMs run, as compiled where the device's operations are (this
  /// program, or epl::precompiled when it links it): "avx512" (epl's 14 x 32 register tile),
  /// "avx2" (its 6 x 16 tile, AVX2 with FMA and F16C) or "eigen" (Eigen's product).
  [[nodiscard]] static const char* f32_kernel();
  /// c = alpha op(a) op(b) + beta c on the 2-D views [rows, last] of a, b and c.
  /// \param inputs a half type (bf16, f16: AMP) rounds op(a) and op(b) to it (nearest even)
  /// before they multiply; products accumulate in c's dtype. f32 on an AVX-512 build rounds them
  /// as the kernel packs them (bf16 multiplies on bf16_kernel()); otherwise the operands are
  /// rounded into workspace copies that live for this call. Any other dtype multiplies them as
  /// they are.
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
            double alpha = 1, double beta = 0, DType inputs = DType::kF32) const;
  /// The same GEMM on each of the [batch, .., ..] blocks of rank-3 tensors.
  /// \param tri a triangle the blocks' work may skip (causal attention's, device::Triangle): up
  /// to half of it. c's entries above the diagonal under kLowerC are unspecified; the others sum
  /// the dense product's products (the ones left out are of zeros: b must be finite). On epl's
  /// packed f32 and bf16 kernels kLowerC and kLowerA give the dense values bit for bit, and
  /// kUpperA while k fits one of the kernel's k blocks (AVX-512: 384 in f32, 768 in bf16; AVX2:
  /// 256); past it, and on Eigen's product (f64, or a build without those kernels), the sums are
  /// grouped by other block sizes and round differently.
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c,
                    double alpha = 1, double beta = 0, DType inputs = DType::kF32, Triangle tri = Triangle::kNone) const;

  // ---- element-wise and reductions ---------------------------------------------------
  void add(const Tensor& a, const Tensor& b, const Tensor& out) const;
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) const;
  /// y += alpha x
  void axpy(double alpha, const Tensor& x, const Tensor& y) const;
  void scale(const Tensor& x, double alpha) const;
  /// y[r, :] += v over the rows of y's 2-D view.
  void add_row_vector(const Tensor& y, const Tensor& v) const;
  /// out = beta out + the column sums of x's 2-D view.
  void sum_rows(const Tensor& x, const Tensor& out, double beta = 0) const;
  [[nodiscard]] double sum_squares(const Tensor& x) const;
  void gelu(const Tensor& x, const Tensor& y) const;
  void relu(const Tensor& x, const Tensor& y) const;
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const;
  void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const;

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
                  const Tensor& mean, const Tensor& rstd, double eps) const;
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                           const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) const;
  /// p = causal softmax(scale s) over [batch, t, t].
  void softmax_causal(const Tensor& s, const Tensor& p, double scale) const;
  void softmax_causal_backward(const Tensor& p, const Tensor& dp, const Tensor& ds, double scale) const;
  /// Causal self-attention fused, one head at a time with its scores in the cache
  /// (device/cpu/attention.hpp): o [b, t, dim] = softmax_causal(scale q k^T) v for each of the
  /// `heads` heads of qkv [b, t, 3 dim] (q | k | v, head j at columns j dim / heads of each), the
  /// products' operands rounded to `inputs` as gemm_batched rounds them. Equal bit for bit to
  /// permute_heads, gemm_batched with the causal triangles, softmax_causal and back. Returns
  /// false, doing nothing, where those would round copies of the operands (a build without epl's
  /// packed kernels, or a compute type other than f32 with half `inputs`): run them instead.
  [[nodiscard]] bool attention_heads(const Tensor& qkv, const Tensor& o, std::int64_t heads, double scale, DType inputs) const;
  /// attention_heads' backward: dqkv [b, t, 3 dim] (dq | dk | dv) from dout [b, t, dim], the
  /// probabilities recomputed from qkv. Returns false, doing nothing, where attention_heads does.
  [[nodiscard]] bool attention_heads_backward(const Tensor& qkv, const Tensor& dout, const Tensor& dqkv, std::int64_t heads, double scale,
                                              DType inputs) const;
  /// out[i, :] = table[ids[i], :]; ids out of [0, rows) are an error naming the bad id. A part
  /// of a vocabulary-parallel table holds rows [first, first + its rows) of a vocabulary of
  /// `vocab` (0: its own rows): ids of other parts give zero rows, ids outside the vocabulary are
  /// the error.
  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, std::int64_t first = 0, std::int64_t vocab = 0) const;
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, std::int64_t first = 0,
                          std::int64_t vocab = 0) const;
  /// y = softmax over the last dimension of each row of x.
  void softmax_rows(const Tensor& x, const Tensor& y) const;
  /// dx = y (dy - sum(dy y)) per row: softmax_rows' backward from its output y.
  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const;
  /// dst[i, :] = src[index[i], :]; index an i64 tensor of row numbers of src.
  void gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const;
  /// dst[index[i], :] += weight[i] src[i, :] (weight undefined: 1).
  void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& weight, const Tensor& dst) const;
  /// out[i] = the dot product of row i of a and of b.
  void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) const;
  /// out[r] = max over the last dimension of x's row r.
  void row_max(const Tensor& x, const Tensor& out) const;
  /// A part of a vocabulary-parallel cross-entropy: logits [rows, cols] are classes [first, first +
  /// cols) of a vocabulary of `vocab`; given each row's maximum over the whole vocabulary, writes
  /// each row's sum of exp(logit - max) over this part and its target's logit (0 when the target is
  /// in another part). Targets outside the vocabulary are an error naming them.
  void cross_entropy_stats(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
                           const Tensor& target_logit, std::int64_t first, std::int64_t vocab) const;
  /// dlogits = scale (softmax - onehot(target)) over a part of the classes, from the whole rows'
  /// maxima and sums of exponentials (cross_entropy_stats, summed over the parts).
  void cross_entropy_part_backward(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
                                   const Tensor& dlogits, std::int64_t first, double scale) const;
  /// Sum over rows of the cross-entropy of logits [rows, classes] against class ids.
  [[nodiscard]] double cross_entropy(const Tensor& logits, const Tensor& targets) const;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, double scale) const;
  /// y = x * keep / (1 - p); element i keeps iff uniform(key, offset + i) >= p, so a shard of a
  /// tensor (a rank's rows of the global batch) draws exactly its part of the whole tensor's mask.
  void dropout(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset = 0) const;
  /// dropout of columns [col0, col0 + x's last dimension) of a tensor whose rows hold
  /// `whole_cols`: each element draws at its position in the whole tensor, so a tensor-parallel
  /// part draws exactly its part of the single-device mask.
  void dropout_columns(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset, std::int64_t whole_cols,
                       std::int64_t col0) const;
  /// Between tokens [b, t, row] (heads at column offset + h d) and heads [b, h, t, d].
  void permute_heads(const Tensor& tokens, const Tensor& heads, std::int64_t offset, bool to_heads) const;

  // ---- optimizer updates -------------------------------------------------------------
  // Each reads the gradient as grad_scale g (AMP's unscale times the clip coefficient: no pass of
  // their own over the gradients).
  void sgd_update(const Tensor& p, const Tensor& g, double lr, double wd, double grad_scale = 1) const;
  void momentum_update(const Tensor& p, const Tensor& g, const Tensor& v, double lr, double mu, double wd, bool nesterov,
                       double grad_scale = 1) const;
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double beta1,
                    double beta2, double eps, double wd, std::int64_t step, double grad_scale = 1) const;

 private:
  // Whether the GEMM kernel rounds the operands to `inputs` itself as it packs them.
  static bool rounds_in_kernel(const Tensor& a, DType inputs);
  // x rounded through the half type `to` into a workspace copy (x itself for any other dtype).
  Tensor rounded(const Tensor& x, DType to) const;
  // rows[index[i]] of `table` and rows[i] of `rows` exist, and both have the same row length
  static void check_rows(const Tensor& table, const Tensor& index, const Tensor& rows, const char* what);
  static void check_ids(const Tensor& ids, std::int64_t limit, const char* what);
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

// The operations' definitions and the kernels under them (Eigen, epl's SGEMM): compiled into every
// program that uses the device, or, in a program linked with epl::precompiled (EPL_PRECOMPILED),
// once in that library for device::Cpu and device::CpuF64, by its source of their own
// (src/precompiled_device.cpp: EPL_PRECOMPILED_DEVICE_SOURCE; docs/architecture.md).
#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_DEVICE_SOURCE)
namespace epl {
inline namespace v0 {
namespace device {
extern template class BasicCpu<float>;
extern template class BasicCpu<float, double>;
}  // namespace device
}  // namespace v0
}  // namespace epl
#else
#include "epl/device/cpu/cpu.ipp"  // the definitions
#endif
