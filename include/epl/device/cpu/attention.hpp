#pragma once
/// \file
/// \brief Causal self-attention one head at a time, its t x t scores in the cache: the CPU's
/// fused attention (device::Cpu::attention_heads). The unfused layer moves q, k and v into a
/// head-batched copy, writes every head's scores and probabilities to memory, and reads them back
/// for the next product: on gpt-mini (48 heads of 256 x 256) a third of its GEMMs' time went to
/// packing probabilities read back from memory, and the head permutations were the largest op
/// after the GEMMs (#39). Here each head reads q, k and v where the qkv projection left them,
/// keeps its scores in a per-thread buffer while the softmax and the product with v run, and
/// writes its output where the out projection reads it. The backward recomputes the
/// probabilities rather than keeping them (nothing of size t x t is stored).
///
/// Every product is gemm_triangle's, on the same operands in the same order as the unfused
/// layer's gemm_batched, and every row the same softmax_causal_row. A head's [t, t] buffer keeps
/// each row on a 64-byte boundary (rows of whole 16-float vectors): Eigen sums a row in an order
/// that depends on where it starts, so the results equal the unfused layer's bit for bit where its
/// rows start there too (t a multiple of 16), and to the rounding of a row's sums elsewhere.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/memory.hpp"
#include "epl/device/cpu/blas.hpp"
#include "epl/device/cpu/parallel.hpp"
#include "epl/device/cpu/nn_kernels.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

/// Where one head's operands lie: qkv [b, t, 3 dim] holds q | k | v, head j of each at columns
/// j hd of its third; o (and dout) [b, t, dim] head j at columns j hd.
struct AttentionHeads {
  std::int64_t b, t, heads, hd;
  [[nodiscard]] std::int64_t dim() const { return heads * hd; }
  // the first element of head x (batch x / heads, head x % heads) in qkv's third `part` (0 q, 1 k, 2 v)
  [[nodiscard]] std::int64_t in_qkv(std::int64_t x, int part) const { return x / heads * t * 3 * dim() + part * dim() + x % heads * hd; }
  [[nodiscard]] std::int64_t in_o(std::int64_t x) const { return x / heads * t * dim() + x % heads * hd; }
  // a [t, t] buffer's row stride: whole 16-float vectors
  [[nodiscard]] std::int64_t ld() const { return (t + 15) / 16 * 16; }
};

/// A thread's [t, t] buffers of attention_heads, each starting on a 64-byte boundary; empty when
/// the host could not give them (the threads of parallel_for must not throw: the caller checks).
template <class T>
class HeadBuffers {
 public:
  HeadBuffers(std::int64_t rows, std::int64_t ld, int count)
      : each_((rows * ld + 63) / 64 * 64), all_(new (std::nothrow) T[static_cast<std::size_t>(each_ * count + 64)]) {}
  [[nodiscard]] bool empty() const noexcept { return !all_; }
  T* operator[](int i) {
    auto at = reinterpret_cast<std::uintptr_t>(all_.get());
    return reinterpret_cast<T*>((at + 63) / 64 * 64) + i * each_;
  }

 private:
  std::int64_t each_;
  std::unique_ptr<T[]> all_;
};

/// The host bytes attention's threads take for `count` [t, t] buffers each: checked against what
/// the machine has left before any is drawn, as a large tensor is (they are not tensors, and the
/// allocator's check did not see them: a stranger's 100,000-token context ended in a bare
/// std::bad_alloc, where a smaller one past the memory would meet the OOM killer).
template <class T>
void check_head_buffers(const AttentionHeads& g, int count, const char* op) {
  const double each = static_cast<double>(g.t) * static_cast<double>(g.ld()) * static_cast<double>(sizeof(T)) * count;
  const double all = each * static_cast<double>(std::min<std::int64_t>(g.b * g.heads, threads()));
  if (all < static_cast<double>(std::int64_t{64} << 20)) return;  // small: /proc is not read
  const std::int64_t left = available_host_bytes();
  EPL_CHECK(leaves_reserve(all, left), op, ": the causal scores of a head "
            "are [t, t] with t = ", g.t, " positions, ", mib(each), " a thread and ", mib(all), " for the threads that run the ",
            g.b * g.heads, " heads, which would leave less than ", mib(kHostReserve), " of this machine's memory (",
            mib(static_cast<double>(left)), " available); shorten the sequence (the context), or run fewer threads (OMP_NUM_THREADS)");
}
inline void check_drawn(bool failed, const AttentionHeads& g, const char* op) {
  EPL_CHECK(!failed, op, ": the host could not give a thread the [t, t] buffer of a head's causal scores (t = ", g.t,
            " positions); shorten the sequence (the context), or run fewer threads (OMP_NUM_THREADS)");
}

/// p = the causal softmax of scale q k^T for head x, into its [t, t] buffer.
template <class T>
void attention_probabilities(const AttentionHeads& g, std::int64_t x, const T* qkv, T* p, T scale, DType inputs,
                             device::CpuBf16Kernel kernel, std::vector<sgemm::RowBlock>& blocks) {
  const std::int64_t ld = 3 * g.dim(), lp = g.ld();
  gemm_triangle<T>(device::Triangle::kLowerC, false, true, g.t, g.t, g.hd, T(1), qkv + g.in_qkv(x, 0), ld, qkv + g.in_qkv(x, 1), ld, T(0),
                   p, lp, inputs, kernel, blocks);
  for (std::int64_t i = 0; i < g.t; ++i) softmax_causal_row(p + i * lp, p + i * lp, i, g.t, scale);
}

/// o = softmax_causal(scale q k^T) v for every head, its products' operands rounded to `inputs`
/// as gemm_triangle rounds them.
template <class T>
void attention_heads(const AttentionHeads& g, const T* qkv, T* o, T scale, DType inputs) {
  const auto kernel = kernel_for(inputs);
  check_head_buffers<T>(g, 1, "attention_heads");
  std::atomic<bool> failed{false};
  parallel_for(g.b * g.heads, 1, [&](std::int64_t x0, std::int64_t x1) {
    HeadBuffers<T> buffers(g.t, g.ld(), 1);
    if (buffers.empty()) {
      failed = true;
      return;
    }
    T* p = buffers[0];
    std::vector<sgemm::RowBlock> blocks;
    for (std::int64_t x = x0; x < x1; ++x) {
      attention_probabilities(g, x, qkv, p, scale, inputs, kernel, blocks);
      gemm_triangle<T>(device::Triangle::kLowerA, false, false, g.t, g.hd, g.t, T(1), p, g.ld(), qkv + g.in_qkv(x, 2), 3 * g.dim(), T(0),
                       o + g.in_o(x), g.dim(), inputs, kernel, blocks);
    }
  });
  check_drawn(failed, g, "attention_heads");
}

/// attention_heads' backward: dqkv [b, t, 3 dim] (dq | dk | dv) from dout [b, t, dim], the
/// probabilities recomputed from q and k.
template <class T>
void attention_heads_backward(const AttentionHeads& g, const T* qkv, const T* dout, T* dqkv, T scale, DType inputs) {
  using device::Triangle;
  const auto kernel = kernel_for(inputs);
  const std::int64_t ld = 3 * g.dim(), t = g.t, lp = g.ld();
  check_head_buffers<T>(g, 2, "attention_heads_backward");
  std::atomic<bool> failed{false};
  parallel_for(g.b * g.heads, 1, [&](std::int64_t x0, std::int64_t x1) {
    HeadBuffers<T> buffers(t, lp, 2);
    if (buffers.empty()) {
      failed = true;
      return;
    }
    T *p = buffers[0], *ds = buffers[1];
    std::vector<sgemm::RowBlock> blocks;
    for (std::int64_t x = x0; x < x1; ++x) {
      const T *q = qkv + g.in_qkv(x, 0), *k = qkv + g.in_qkv(x, 1), *v = qkv + g.in_qkv(x, 2), *dox = dout + g.in_o(x);
      attention_probabilities(g, x, qkv, p, scale, inputs, kernel, blocks);
      // dp = do v^T (into ds), dv = p^T do, ds = the softmax's backward, dq = ds k, dk = ds^T q
      gemm_triangle<T>(Triangle::kLowerC, false, true, t, t, g.hd, T(1), dox, g.dim(), v, ld, T(0), ds, lp, inputs, kernel, blocks);
      gemm_triangle<T>(Triangle::kUpperA, true, false, t, g.hd, t, T(1), p, lp, dox, g.dim(), T(0), dqkv + g.in_qkv(x, 2), ld, inputs,
                       kernel, blocks);
      for (std::int64_t i = 0; i < t; ++i) softmax_causal_backward_row(p + i * lp, ds + i * lp, ds + i * lp, i, t, scale);
      gemm_triangle<T>(Triangle::kLowerA, false, false, t, g.hd, t, T(1), ds, lp, k, ld, T(0), dqkv + g.in_qkv(x, 0), ld, inputs, kernel,
                       blocks);
      gemm_triangle<T>(Triangle::kUpperA, true, false, t, g.hd, t, T(1), ds, lp, q, ld, T(0), dqkv + g.in_qkv(x, 1), ld, inputs, kernel,
                       blocks);
    }
  });
  check_drawn(failed, g, "attention_heads_backward");
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
