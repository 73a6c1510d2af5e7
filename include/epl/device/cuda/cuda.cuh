#pragma once
/// \file
/// \brief device::Cuda — one CUDA device: memory from a caching allocator, work enqueued on
/// the device's own stream, GEMM through cuBLAS, element-wise kernels of our own.
///
/// Models device_math (memory, BLAS, element-wise). The layer kernels of device_for_layers
/// (norms, softmax, embedding, cross-entropy, optimizer updates) follow in a later step;
/// docs/architecture.md tracks what each backend models.
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "epl/core/tensor.hpp"
#include "epl/device/checks.hpp"
#include "epl/device/cuda/check.cuh"
#include "epl/device/functors.hpp"
#include "epl/device/cuda/kernels.cuh"

namespace epl {
inline namespace v0 {
namespace device {

/// \brief Device memory of one GPU through cudaMalloc (cached by CachingAllocator: cudaMalloc
/// synchronises the device, so a training step must not call it per tensor).
struct CudaMemory {
  static void* allocate(DeviceId d, std::size_t size) {
    void* p = nullptr;
    EPL_CUDA_CHECK(cudaSetDevice(d.index));
    EPL_CUDA_CHECK(cudaMalloc(&p, size));
    return p;
  }
  static void release(void* p) noexcept { cudaFree(p); }
};

/// \brief Device memory with freed blocks cached by size.
using CudaAllocator = CachingAllocator<CudaMemory>;

/// \brief Pinned host memory (cudaHostAlloc, mapped: under unified addressing the device's
/// kernels read and write it through the same pointer, and copies to and from it are
/// asynchronous), the pool a device offloads to.
struct PinnedMemory {
  static void* allocate(DeviceId d, std::size_t size) {
    void* p = nullptr;
    EPL_CUDA_CHECK(cudaHostAlloc(&p, size, cudaHostAllocMapped | cudaHostAllocPortable));
    (void)d;
    return p;
  }
  static void release(void* p) noexcept { cudaFreeHost(p); }
};
using PinnedAllocator = CachingAllocator<PinnedMemory>;

/// \brief One CUDA device and its stream. Operations are asynchronous on the stream;
/// download() and synchronize() wait for them.
class Cuda {
 public:
  static constexpr DeviceKind kind = DeviceKind::kCuda;

  explicit Cuda(int index = 0)
      : alloc_(std::make_unique<CudaAllocator>(DeviceId{DeviceKind::kCuda, index})),
        pinned_(std::make_unique<PinnedAllocator>(DeviceId{DeviceKind::kHost, index})) {
    int n = cuda_device_count();
    EPL_CHECK(index >= 0 && index < n, "CUDA device ", index, " requested, ", n, " visible; check CUDA_VISIBLE_DEVICES");
    EPL_CUDA_CHECK(cudaSetDevice(index));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    EPL_CUBLAS_CHECK(cublasCreate(&blas_));
    EPL_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  }
  ~Cuda() {
    if (blas_) cublasDestroy(blas_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;

  [[nodiscard]] DeviceId id() const noexcept { return alloc_->device(); }
  [[nodiscard]] Allocator& allocator() const noexcept { return *alloc_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  void synchronize() const { EPL_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // ---- memory ------------------------------------------------------------------------
  [[nodiscard]] Tensor empty(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    return Tensor(*alloc_, s, t, c);
  }
  [[nodiscard]] Tensor zeros(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    Tensor x = empty(s, t, c);
    EPL_CUDA_CHECK(cudaMemsetAsync(x.raw(), 0, x.bytes(), stream_));
    return x;
  }
  /// \brief A tensor in pinned host memory (the pool offload.level keeps weights in); the
  /// kernels of this device reach it through unified addressing.
  [[nodiscard]] Tensor host_empty(Shape s, DType t, MemoryCategory c) const { return Tensor(*pinned_, s, t, c); }
  [[nodiscard]] Tensor host_zeros(Shape s, DType t, MemoryCategory c) const {
    Tensor x = host_empty(s, t, c);
    synchronize();  // a cached block may still be read by work in flight
    std::memset(x.raw(), 0, x.bytes());
    return x;
  }
  /// dst = src, on the stream; either may be device memory or pinned host memory.
  void copy(const Tensor& src, const Tensor& dst) const {
    same(src, dst, "copy");
    EPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDefault, stream_));
  }
  /// \brief A copy started by copy_ahead(); await() orders the stream's later work after it.
  class CopyTicket {
   public:
    CopyTicket() = default;

   private:
    friend class Cuda;
    struct Destroy {
      void operator()(CUevent_st* e) const noexcept { cudaEventDestroy(e); }
    };
    std::shared_ptr<CUevent_st> done_;
  };
  /// \brief dst = src on the device's copy stream (offload's prefetch: a layer's weights come
  /// from the host pool while the stream computes). It starts after the work already queued on
  /// the stream, which may have used dst's memory before it was freed, and runs beside the work
  /// queued after it. Neither tensor may be used before await(ticket).
  [[nodiscard]] CopyTicket copy_ahead(const Tensor& src, const Tensor& dst) const {
    same(src, dst, "copy_ahead");
    CopyTicket t;
    const auto queued = event(), done = event();
    EPL_CUDA_CHECK(cudaEventRecord(queued.get(), stream_));
    EPL_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, queued.get(), 0));
    EPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDefault, copy_stream_));
    EPL_CUDA_CHECK(cudaEventRecord(done.get(), copy_stream_));
    t.done_ = done;
    return t;
  }
  /// \brief The stream's work queued from now on waits for the copy (the host does not).
  void await(const CopyTicket& t) const {
    if (t.done_) EPL_CUDA_CHECK(cudaStreamWaitEvent(stream_, t.done_.get(), 0));
  }
  /// Host -> device; the host buffer may be reused as soon as this returns.
  void upload(const void* host, const Tensor& dst) const {
    EPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), host, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  void download(const Tensor& src, void* host) const {
    EPL_CUDA_CHECK(cudaMemcpyAsync(host, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void fill(const Tensor& x, double v) const {
    visit_floating(x.dtype(), [&]<class T>() { launch(epl::detail::cuda::fill<N<T>>, x.numel(), ptr<T>(x), x.numel(), v); });
  }
  void cast(const Tensor& src, const Tensor& dst) const {
    EPL_CHECK(src.numel() == dst.numel(), "cast of ", src.shape(), " into ", dst.shape());
    visit_floating(src.dtype(), [&]<class From>() {
      visit_floating(dst.dtype(), [&]<class To>() {
        launch(epl::detail::cuda::cast<N<From>, N<To>>, src.numel(), ptr<From>(src), ptr<To>(dst), src.numel());
      });
    });
  }

  // ---- BLAS (cuBLAS is column-major: row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T) ----
  /// \param inputs a half type (bf16, f16: AMP) lets cuBLAS round f32 operands to it and multiply
  /// on the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF / _16F), accumulating in f32.
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
            DType inputs = DType::kF32) const {
    const auto g = detail::gemm_dims(a, ta, b, tb, c);
    gemm_strided(1, ta, tb, g.m, g.n, g.k, alpha, a, 0, b, 0, beta, c, 0, inputs);
  }
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
                    DType inputs = DType::kF32) const {
    const auto g = detail::gemm_batched_dims(a, ta, b, tb, c);
    gemm_strided(a.dim(0), ta, tb, g.m, g.n, g.k, alpha, a, g.m * g.k, b, g.k * g.n, beta, c, g.m * g.n, inputs);
  }

  // ---- element-wise ------------------------------------------------------------------
  void add(const Tensor& a, const Tensor& b, const Tensor& out) const { binary(detail_add(), a, b, out, "add"); }
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) const { binary(detail_mul(), a, b, out, "mul"); }
  void axpy(double alpha, const Tensor& x, const Tensor& y) const {
    same(x, y, "axpy");
    visit_compute(x.dtype(), [&]<class T>() { launch(epl::detail::cuda::axpy<T>, x.numel(), T(alpha), ptr<T>(x), ptr<T>(y), x.numel()); });
  }
  void scale(const Tensor& x, double alpha) const {
    visit_compute(x.dtype(), [&]<class T>() { launch(epl::detail::cuda::scale<T>, x.numel(), ptr<T>(x), x.numel(), T(alpha)); });
  }
  void add_row_vector(const Tensor& y, const Tensor& v) const {
    EPL_CHECK(v.numel() == y.shape().back(), "add_row_vector: vector ", v.shape(), " for rows of ", y.shape());
    visit_compute(y.dtype(), [&]<class T>() {
      launch(epl::detail::cuda::add_row_vector<T>, y.numel(), ptr<T>(y), ptr<T>(v), y.numel(), y.shape().back());
    });
  }
  void gelu(const Tensor& x, const Tensor& y) const {
    same(x, y, "gelu");
    visit_compute(x.dtype(), [&]<class T>() { launch(epl::detail::cuda::gelu<T>, x.numel(), ptr<T>(x), ptr<T>(y), x.numel()); });
  }
  void relu(const Tensor& x, const Tensor& y) const {
    same(x, y, "relu");
    visit_compute(x.dtype(), [&]<class T>() { launch(epl::detail::cuda::relu<T>, x.numel(), ptr<T>(x), ptr<T>(y), x.numel()); });
  }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
    same(x, dy, "gelu_backward");
    same(x, dx, "gelu_backward");
    visit_compute(x.dtype(), [&]<class T>() {
      launch(epl::detail::cuda::gelu_backward<T>, x.numel(), ptr<T>(x), ptr<T>(dy), ptr<T>(dx), x.numel());
    });
  }
  /// out[i] = fn(in[i]...) for every element, as one kernel: element-wise math of any kind
  /// (device/functors.hpp); fn's operator() must be EPL_HOST_DEVICE.
  template <class Fn, std::same_as<Tensor>... In>
  void map(const Tensor& out, Fn fn, const In&... in) const {
    static_assert(sizeof...(In) >= 1 && sizeof...(In) <= 4, "epl: map takes one to four input tensors");
    (same(in, out, "map"), ...);
    visit_compute(out.dtype(), [&]<class T>() {
      launch(epl::detail::cuda::map<Fn, T, std::conditional_t<true, T, In>...>, out.numel(), fn, out.data<T>(), out.numel(),
             static_cast<const T*>(in.template data<T>())...);
    });
  }
  void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const {
    same(x, dy, "relu_backward");
    same(x, dx, "relu_backward");
    visit_compute(x.dtype(), [&]<class T>() {
      launch(epl::detail::cuda::relu_backward<T>, x.numel(), ptr<T>(x), ptr<T>(dy), ptr<T>(dx), x.numel());
    });
  }

 private:
  template <class T> using N = epl::detail::cuda::native_t<T>;
  template <class T> static N<T>* ptr(const Tensor& t) { return reinterpret_cast<N<T>*>(t.data<T>()); }
  struct detail_add {};
  struct detail_mul {};

  template <class... KArgs, class... Args>
  void launch(void (*kernel)(KArgs...), std::int64_t n, Args... args) const {
    if (n == 0) return;
    kernel<<<epl::detail::cuda::blocks_for(n), 256, 0, stream_>>>(args...);
    EPL_CUDA_CHECK(cudaGetLastError());
  }
  template <class Op>
  void binary(Op, const Tensor& a, const Tensor& b, const Tensor& out, const char* op) const {
    same(a, b, op);
    same(a, out, op);
    visit_floating(a.dtype(), [&]<class T>() {
      if constexpr (std::is_same_v<Op, detail_add>) launch(epl::detail::cuda::add<N<T>>, a.numel(), ptr<T>(a), ptr<T>(b), ptr<T>(out), a.numel());
      else launch(epl::detail::cuda::mul<N<T>>, a.numel(), ptr<T>(a), ptr<T>(b), ptr<T>(out), a.numel());
    });
  }
  void gemm_strided(std::int64_t batch, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                    const Tensor& a, std::int64_t sa, const Tensor& b, std::int64_t sb, double beta, const Tensor& c,
                    std::int64_t sc, DType inputs) const {
    EPL_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "gemm: dtypes ", name_of(a.dtype()), ", ", name_of(b.dtype()),
              ", ", name_of(c.dtype()), " differ");
    const bool low = inputs == DType::kBF16 || inputs == DType::kF16;
    EPL_CHECK(!low || a.dtype() == DType::kF32, "gemm: rounding ", name_of(a.dtype()), " operands to ", name_of(inputs),
              " (AMP) is done for f32 only on CUDA; train in f32 (TrainerOptions::dtype) or turn AMP off (amp.level = \"\")");
    const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
    const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    visit_compute(a.dtype(), [&]<class T>() {
      const T al = T(alpha), be = T(beta);
      constexpr auto type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
      const auto compute = !std::is_same_v<T, float>  ? CUBLAS_COMPUTE_64F
                           : inputs == DType::kBF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                           : inputs == DType::kF16  ? CUBLAS_COMPUTE_32F_FAST_16F
                                                    : CUBLAS_COMPUTE_32F;
      EPL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                                  &al, b.raw(), type, static_cast<int>(ldb), sb, a.raw(), type,
                                                  static_cast<int>(lda), sa, &be, c.raw(), type, static_cast<int>(n), sc,
                                                  static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT));
    });
  }
  static void same(const Tensor& a, const Tensor& b, const char* op) { detail::same(a, b, op); }
  // An event for ordering only (no timing); destroyed when its last holder lets go, which CUDA
  // allows while work on it is still pending.
  static std::shared_ptr<CUevent_st> event() {
    cudaEvent_t e = nullptr;
    EPL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return {e, CopyTicket::Destroy{}};
  }

  std::unique_ptr<CudaAllocator> alloc_;
  std::unique_ptr<PinnedAllocator> pinned_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // copy_ahead's
  cublasHandle_t blas_ = nullptr;
};

}  // namespace device
}  // namespace v0
}  // namespace epl
