/// \file
/// \brief device::detail::CudnnAttention (device/cuda/attention.cuh): fused causal attention
/// through the cuDNN frontend's graph API, compiled once into epl::cudnn_attention, so that no
/// program's translation unit parses the frontend (nvcc took 100 s over it per unit; g++ takes 28
/// s, here only). Host code: g++ compiles it, and it links cuDNN and NVRTC (the frontend compiles
/// some kernels at run time).
#include "epl/device/cuda/attention.cuh"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {
namespace device {
namespace detail {

// The graphs and the handle (what attention.cuh keeps out of its includers).
class CudnnAttention::Graphs {
 public:
  Graphs() = default;
  Graphs(const Graphs&) = delete;
  Graphs& operator=(const Graphs&) = delete;
  ~Graphs() {
    if (handle_) cudnnDestroy(handle_);
  }

  /// The workspace bytes of the forward (backward false) or backward pass, or -1 where cuDNN
  /// cannot run the shape on this GPU: the reason goes to stderr once per shape, and the caller
  /// computes attention unfused.
  std::int64_t workspace(const AttentionShape& s, bool backward, cudaStream_t stream) {
    const Plans& p = plans(s, stream);
    if (!p.ok) return -1;
    return backward ? p.bwd_workspace : p.fwd_workspace;
  }
  void forward(const AttentionShape& s, cudaStream_t stream, const void* qkv, void* o, float* stats, void* workspace) {
    const Plans& p = plans(s, stream);
    const std::int64_t w = s.heads * s.head_dim;
    Pack pack{{kQ, at(qkv, 0, s)}, {kK, at(qkv, w, s)}, {kV, at(qkv, 2 * w, s)}, {kO, o}, {kStats, stats}};
    execute(*p.fwd, pack, workspace, "forward");
  }
  void backward(const AttentionShape& s, cudaStream_t stream, const void* qkv, const void* o, const float* stats, const void* dout,
                void* dqkv, void* workspace) {
    const Plans& p = plans(s, stream);
    const std::int64_t w = s.heads * s.head_dim;
    Pack pack{{kQ, at(qkv, 0, s)},        {kK, at(qkv, w, s)},      {kV, at(qkv, 2 * w, s)},
              {kO, const_cast<void*>(o)}, {kStats, const_cast<float*>(stats)}, {kdO, const_cast<void*>(dout)},
              {kdQ, at(dqkv, 0, s)},      {kdK, at(dqkv, w, s)},    {kdV, at(dqkv, 2 * w, s)}};
    execute(*p.bwd, pack, workspace, "backward");
  }

 private:
  using Graph = cudnn_frontend::graph::Graph;
  using TensorAttrs = cudnn_frontend::graph::Tensor_attributes;
  using Pack = std::unordered_map<TensorAttrs::uid_t, void*>;
  enum Uid : TensorAttrs::uid_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };
  struct Plans {
    bool ok = false;
    std::shared_ptr<Graph> fwd, bwd;
    std::int64_t fwd_workspace = 0, bwd_workspace = 0;
  };

  // Element `column` of the first row of [batch, t, 3 width] (half elements: 2 bytes).
  static void* at(const void* base, std::int64_t column, const AttentionShape&) {
    return const_cast<char*>(static_cast<const char*>(base) + column * 2);
  }
  void execute(Graph& g, Pack& pack, void* workspace, const char* pass) {
    auto st = g.execute(handle_, pack, workspace);
    EPL_CHECK(st.is_good(), "fused attention (cuDNN SDPA) ", pass, " failed: ", st.get_message());
  }

  const Plans& plans(const AttentionShape& s, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    if (!handle_) {
      EPL_CHECK(cudnnCreate(&handle_) == CUDNN_STATUS_SUCCESS, "cudnnCreate failed: is cuDNN's library the one epl was built against?");
    }
    EPL_CHECK(cudnnSetStream(handle_, stream) == CUDNN_STATUS_SUCCESS, "cudnnSetStream failed");
    auto [it, fresh] = cache_.try_emplace(s);
    if (!fresh) return it->second;
    Plans& p = it->second;
    std::string why;
    if (s.head_dim % 8 != 0 || s.head_dim > 256) {  // cuDNN's strides are whole 16 bytes; its kernels go to 256
      why = "a head size of " + std::to_string(s.head_dim) + " is not a multiple of 8 up to 256";
    } else {
      p.fwd = build(s, false, why);
      if (p.fwd) p.bwd = build(s, true, why);
    }
    if (p.fwd && p.bwd) {
      p.ok = p.fwd->get_workspace_size(p.fwd_workspace).is_good() && p.bwd->get_workspace_size(p.bwd_workspace).is_good();
      if (!p.ok) why = "no workspace size";
    }
    if (!p.ok)
      std::fprintf(stderr, "epl: fused attention (cuDNN SDPA) declines batch %lld, t %lld, %lld heads of %lld: %s; attention runs unfused\n",
                   static_cast<long long>(s.batch), static_cast<long long>(s.t), static_cast<long long>(s.heads),
                   static_cast<long long>(s.head_dim), why.c_str());
    return p;
  }

  // The forward graph (q, k, v -> o, stats) or the backward one (q, k, v, o, do, stats -> dq, dk,
  // dv), strided into the token-major buffers; null with `why` set when cuDNN declines.
  std::shared_ptr<Graph> build(const AttentionShape& s, bool backward, std::string& why) {
    namespace fe = cudnn_frontend;
    const std::int64_t b = s.batch, t = s.t, h = s.heads, d = s.head_dim, w = h * d;
    auto g = std::make_shared<Graph>();
    g->set_io_data_type(s.half == DType::kF16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const std::vector<std::int64_t> dims{b, h, t, d}, packed{t * 3 * w, d, 3 * w, 1}, tokens{t * w, d, w, 1};
    auto tensor = [&](const char* name, Uid uid, const std::vector<std::int64_t>& stride) {
      return g->tensor(TensorAttrs().set_name(name).set_uid(uid).set_dim(dims).set_stride(stride));
    };
    auto q = tensor("q", kQ, packed), k = tensor("k", kK, packed), v = tensor("v", kV, packed);
    if (!backward) {
      auto opt = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_causal_mask(true).set_attn_scale(s.scale);
      auto [o, stats] = g->sdpa(q, k, v, opt);
      o->set_output(true).set_uid(kO).set_dim(dims).set_stride(tokens);
      stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({b, h, t, 1}).set_stride({h * t, t, 1, 1});
    } else {
      auto o = tensor("o", kO, tokens), dout = tensor("do", kdO, tokens);
      auto stats = g->tensor(TensorAttrs().set_name("stats").set_uid(kStats).set_dim({b, h, t, 1}).set_stride({h * t, t, 1, 1})
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto opt = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_causal_mask(true).set_attn_scale(s.scale);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
      dq->set_output(true).set_uid(kdQ).set_dim(dims).set_stride(packed);
      dk->set_output(true).set_uid(kdK).set_dim(dims).set_stride(packed);
      dv->set_output(true).set_uid(kdV).set_dim(dims).set_stride(packed);
    }
    auto st = g->build(handle_, {fe::HeurMode_t::A});
    if (!st.is_good()) {
      why = std::string(backward ? "backward: " : "forward: ") + st.get_message();
      return nullptr;
    }
    return g;
  }

  std::mutex mutex_;
  cudnnHandle_t handle_ = nullptr;
  std::map<AttentionShape, Plans> cache_;
};

CudnnAttention::CudnnAttention() : graphs_(std::make_unique<Graphs>()) {}
CudnnAttention::~CudnnAttention() = default;
std::int64_t CudnnAttention::workspace(const AttentionShape& s, bool backward, cudaStream_t stream) {
  return graphs_->workspace(s, backward, stream);
}
void CudnnAttention::forward(const AttentionShape& s, cudaStream_t stream, const void* qkv, void* o, float* stats, void* workspace) {
  graphs_->forward(s, stream, qkv, o, stats, workspace);
}
void CudnnAttention::backward(const AttentionShape& s, cudaStream_t stream, const void* qkv, const void* o, const float* stats,
                              const void* dout, void* dqkv, void* workspace) {
  graphs_->backward(s, stream, qkv, o, stats, dout, dqkv, workspace);
}

}  // namespace detail
}  // namespace device
}  // namespace v0
}  // namespace epl
