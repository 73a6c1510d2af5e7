#pragma once
/// \file
/// \brief Fused causal attention on a CUDA device: cuDNN's scaled dot-product attention (flash
/// attention, forward and backward), built through the cuDNN frontend's graph API. Nothing of
/// size t × t is stored: the forward keeps each row's log-sum-exp, and the backward recomputes
/// the probabilities from it.
///
/// The frontend is header-only but heavy (nvcc spent 100 s on it per translation unit), so its
/// code is compiled once, into epl::cuda's library epl::cudnn_attention (src/cudnn_attention.cpp),
/// where CMake found the frontend's headers (cmake/FindCudnnFrontend.cmake); epl::cuda then defines
/// EPL_CUDNN_FRONTEND, device::Cuda offers attention_causal(), and nn::CausalSelfAttention uses it
/// under AMP. Without them, or for a shape cuDNN declines, the layer computes attention unfused.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "epl/core/dtype.hpp"

namespace epl {
inline namespace v0 {
namespace device {
namespace detail {

/// \brief One fused causal attention: q, k and v are read from one buffer [batch, t, 3 width]
/// (q | k | v, heads inside each, width = heads × head_dim), the output is [batch, t, width], and
/// the statistics [batch, heads, t] (f32) are each row's log-sum-exp of its scaled scores.
struct AttentionShape {
  std::int64_t batch = 0, t = 0, heads = 0, head_dim = 0;
  DType half = DType::kBF16;
  float scale = 1;
  auto operator<=>(const AttentionShape&) const = default;
};

/// \brief The cuDNN graphs of fused attention, built on first use of a shape and cached. One per
/// device::Cuda: its handle is bound to that device's stream.
class CudnnAttention {
 public:
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// The workspace bytes of the forward (backward false) or backward pass, or -1 where cuDNN
  /// cannot run the shape on this GPU: the reason goes to stderr once per shape, and the caller
  /// computes attention unfused.
  std::int64_t workspace(const AttentionShape& s, bool backward, cudaStream_t stream);
  void forward(const AttentionShape& s, cudaStream_t stream, const void* qkv, void* o, float* stats, void* workspace);
  void backward(const AttentionShape& s, cudaStream_t stream, const void* qkv, const void* o, const float* stats, const void* dout,
                void* dqkv, void* workspace);

 private:
  class Graphs;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace detail
}  // namespace device
}  // namespace v0
}  // namespace epl
