#pragma once
/// \file
/// \brief device::Cuda — one CUDA device: memory from a caching allocator, work enqueued on
/// the device's own stream, GEMM through cuBLAS, and kernels of our own for the rest.
///
/// Models device_for_layers: a Trainer trains every built-in layer on it. The layer kernels are
/// launches of the bodies in device/bodies.hpp, which the CPU test suite runs on the host too.
/// Bad ids and targets cannot be checked on the host before a kernel (they live on the GPU): the
/// kernel reports the first one into mapped host memory, and the next synchronize() or
/// download() throws the epl::Error naming it.
#include <cublasLt.h>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "epl/core/tensor.hpp"
#include "epl/device/blas_args.hpp"
#include "epl/device/bodies.hpp"
#include "epl/device/checks.hpp"
#include "epl/device/cuda/check.cuh"
#include "epl/device/functors.hpp"
#include "epl/device/cuda/kernels.cuh"
#include "epl/device/lane.hpp"
#if EPL_CUDNN_FRONTEND
#include "epl/device/cuda/attention.cuh"
#endif

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

namespace detail {
/// A mark after the work queued on `stream` so far (an event, destroyed with its last holder;
/// CUDA allows that while work on it is pending).
inline std::shared_ptr<void> mark_of(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  EPL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::shared_ptr<void> mark(e, [](void* x) { cudaEventDestroy(static_cast<cudaEvent_t>(x)); });
  EPL_CUDA_CHECK(cudaEventRecord(e, stream));
  return mark;
}
/// `stream`'s later work waits for a mark of mark_of (none: no wait).
inline void wait_for_mark(cudaStream_t stream, const std::shared_ptr<void>& mark) {
  if (mark) EPL_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(mark.get()), 0));
}

/// The lane of a CUDA device: a stream of its own for communication, ordered after the compute
/// stream by events; copies by cudaMemcpyAsync (device to device, on one GPU or between two that
/// reach each other), reductions by one kernel over the sources; message buffers from the device's
/// caching allocator (kept alive by the buffers themselves).
class CudaLane final : public Lane {
 public:
  CudaLane(DeviceId id, cudaStream_t compute, CudaAllocator* alloc) : id_(id), compute_(compute), alloc_(alloc) {
    EPL_CUDA_CHECK(cudaSetDevice(id.index));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaLane() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaLane(const CudaLane&) = delete;
  CudaLane& operator=(const CudaLane&) = delete;

  [[nodiscard]] DeviceId device() const override { return id_; }
  [[nodiscard]] std::shared_ptr<void> ready() const override {
    set_device();
    return mark_of(compute_);
  }
  void after(const std::shared_ptr<void>& mark) const override { wait_for_mark(stream_, mark); }
  void copy(void* dst, const void* src, std::size_t n) const override {
    set_device();
    if (n) EPL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream_));
  }
  void reduce(void* dst, std::span<const void* const> srcs, std::int64_t count, DType t, Reduction r, int divisor) const override {
    if (count == 0 || srcs.empty()) return;
    set_device();
    visit_any(t, [&]<class T>() {
      using N = epl::detail::cuda::native_t<T>;
      constexpr int kMax = epl::detail::cuda::kLaneSources;
      auto run = [&](N* out, std::span<const void* const> from, int div) {
        epl::detail::cuda::Sources<N> s{};
        for (std::size_t k = 0; k < from.size(); ++k) s.p[k] = static_cast<const N*>(from[k]);
        epl::detail::cuda::reduce_sources<N><<<epl::detail::cuda::blocks_for(count), 256, 0, stream_>>>(
            out, s, static_cast<int>(from.size()), count, static_cast<int>(r), div);
        EPL_CUDA_CHECK(cudaGetLastError());
      };
      if (srcs.size() <= static_cast<std::size_t>(kMax)) return run(static_cast<N*>(dst), srcs, divisor);
      // more sources than one launch takes: accumulate in a buffer of our own (dst may be a later source)
      const auto acc = allocate(static_cast<std::size_t>(count) * sizeof(N));
      run(static_cast<N*>(acc.get()), srcs.first(kMax), 1);
      for (std::size_t k = kMax; k < srcs.size(); k += kMax - 1) {
        std::vector<const void*> next{acc.get()};
        for (std::size_t j = k; j < std::min(srcs.size(), k + kMax - 1); ++j) next.push_back(srcs[j]);
        run(static_cast<N*>(acc.get()), next, 1);
      }
      const void* last[] = {acc.get()};
      run(static_cast<N*>(dst), last, divisor);
      complete();  // acc goes back to the cache when this returns
    });
  }
  [[nodiscard]] std::shared_ptr<void> allocate(std::size_t n) const override {
    void* p = alloc_->allocate(n);
    memory_account(id_).charge(MemoryCategory::kCommunication, static_cast<std::int64_t>(n));
    return {p, [alloc = alloc_, n, id = id_](void* q) {  // the pool outlives every device object
      memory_account(id).charge(MemoryCategory::kCommunication, -static_cast<std::int64_t>(n));
      alloc->deallocate(q, n);
    }};
  }
  void complete() const override {
    set_device();
    EPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  void set_device() const { EPL_CUDA_CHECK(cudaSetDevice(id_.index)); }  // the worker threads of a communicator too
  DeviceId id_;
  cudaStream_t compute_;
  CudaAllocator* alloc_;
  cudaStream_t stream_ = nullptr;
};

/// The key of a cuBLASLt plan: the column-major call's transposes, extents and leading dimensions.
struct LtKey {
  bool trans_first, trans_second;
  std::int64_t rows, cols, inner, ld_first, ld_second, ldc;
  cudaDataType half;
  auto operator<=>(const LtKey&) const = default;
};
/// A cuBLASLt matmul with the bias epilogue for one key: descriptors and the heuristic's algorithm.
struct LtPlan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
/// One device's cuBLASLt handle, plans and workspace.
class LtPlans {
 public:
  static constexpr std::size_t kWorkspace = std::size_t{32} << 20;
  LtPlans() { EPL_CUBLAS_CHECK(cublasLtCreate(&handle)); }
  ~LtPlans() {
    for (auto& [k, p] : plans_) {
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
      for (auto* l : {p.first, p.second, p.d})
        if (l) cublasLtMatrixLayoutDestroy(l);
    }
    if (handle) cublasLtDestroy(handle);
  }
  LtPlans(const LtPlans&) = delete;
  LtPlans& operator=(const LtPlans&) = delete;

  LtPlan& plan(const LtKey& k) {
    std::lock_guard lock(mutex_);
    auto [it, fresh] = plans_.try_emplace(k);
    if (!fresh) return it->second;
    LtPlan& p = it->second;
    const cublasOperation_t ta = k.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    EPL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    EPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    EPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    EPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    // the operands as stored (column-major): op(first) is rows x inner, op(second) inner x cols
    EPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.first, k.half, static_cast<std::uint64_t>(k.trans_first ? k.inner : k.rows),
                                                static_cast<std::uint64_t>(k.trans_first ? k.rows : k.inner), k.ld_first));
    EPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.second, k.half, static_cast<std::uint64_t>(k.trans_second ? k.cols : k.inner),
                                                static_cast<std::uint64_t>(k.trans_second ? k.inner : k.cols), k.ld_second));
    EPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, static_cast<std::uint64_t>(k.rows), static_cast<std::uint64_t>(k.cols), k.ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    EPL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t ws = kWorkspace;
    EPL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.first, p.second, p.d, p.d, pref, 1, &best, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p.ok) p.algo = best.algo;
    return p;
  }
  /// The workspace, from the device's pool at first use (kept: every plan may use all of it).
  void* workspace(Allocator& alloc) {
    std::call_once(ws_once_, [&] { workspace_ = Tensor(alloc, Shape{kWorkspace / 4}, DType::kF32, MemoryCategory::kWorkspace); });
    return workspace_.raw();
  }
  cublasLtHandle_t handle = nullptr;

 private:
  std::mutex mutex_;
  std::map<LtKey, LtPlan> plans_;
  std::once_flag ws_once_;
  Tensor workspace_;
};
}  // namespace detail

/// \brief One CUDA device and its stream. Operations are asynchronous on the stream;
/// download() and synchronize() wait for them.
class Cuda {
 public:
  static constexpr DeviceKind kind = DeviceKind::kCuda;

  /// \param index the GPU; \param slot which of the thread ranks that share it this one is: each
  /// gets its own stream and its own memory account (cuda:index/slot), as CPU thread ranks do.
  explicit Cuda(int index = 0, int slot = 0)
      : alloc_(&device_pool<CudaMemory>(DeviceId{DeviceKind::kCuda, index, slot})),
        pinned_(&device_pool<PinnedMemory>(DeviceId{DeviceKind::kHost, index, slot})) {
    EPL_CHECK(slot >= 0, "CUDA device ", index, ": slot ", slot, " must be non-negative (one per thread rank sharing the GPU)");
    int n = cuda_device_count();
    if (n == 0) {  // why: no driver, a driver too old for this CUDA, or no GPU
      int count = 0;
      const cudaError_t e = cudaGetDeviceCount(&count);
      EPL_FAIL("CUDA device ", index, " requested, but no CUDA device is visible",
               e != cudaSuccess ? std::string(" (") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")" : std::string(),
               "; run on a machine with an NVIDIA GPU and a driver for this CUDA, or check CUDA_VISIBLE_DEVICES");
    }
    EPL_CHECK(index >= 0 && index < n, "CUDA device ", index, " requested, ", n, " visible; check CUDA_VISIBLE_DEVICES");
    EPL_CUDA_CHECK(cudaSetDevice(index));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    EPL_CUBLAS_CHECK(cublasCreate(&blas_));
    EPL_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    EPL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&report_), sizeof(kernels::Report), cudaHostAllocMapped));
    *report_ = {};
    EPL_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&report_on_device_), report_, 0));
  }
  ~Cuda() {
    // its blocks go back to the process's pool of this id, where the next device object of the id
    // takes them: the work that uses them finishes first
    if (stream_) cudaStreamSynchronize(stream_);
    lane_.reset();
    lt_.reset();
#if EPL_CUDNN_FRONTEND
    attention_.reset();
#endif
    if (report_) cudaFreeHost(report_);
    if (blas_) cublasDestroy(blas_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;

  [[nodiscard]] DeviceId id() const noexcept { return alloc_->device(); }
  [[nodiscard]] Allocator& allocator() const noexcept { return *alloc_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// \brief The lane thread ranks sharing this GPU move its buffers with: a communication stream
  /// of its own, ordered against this device's stream by events (made at the first call).
  [[nodiscard]] std::shared_ptr<Lane> lane() const {
    std::call_once(lane_once_, [&] { lane_ = std::make_shared<detail::CudaLane>(id(), stream_, alloc_); });
    return lane_;
  }
  /// Waits for the stream's work; throws the first bad input a kernel reported since the last time.
  void synchronize() const {
    EPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    check_reports();
  }

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
  /// n bytes from src to dst on the stream, wherever either lives (device, pinned or pageable host
  /// memory): the copy a world of one rank moves buffers with (comm::Communicator::solo).
  void copy_bytes(void* dst, const void* src, std::size_t n) const {
    EPL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream_));
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
  /// \param inputs a half type (bf16, f16: AMP) rounds f32 operands to it (workspace copies) and
  /// multiplies them on the tensor cores, accumulating in f32.
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
            DType inputs = DType::kF32) const {
    const auto g = detail::gemm_dims(a, ta, b, tb, c);
    gemm_strided(1, ta, tb, g.m, g.n, g.k, alpha, a, 0, b, 0, beta, c, 0, inputs);
  }
  /// \brief c = op(a) op(b) + bias (added to every row of c), under AMP (`inputs` bf16 or f16):
  /// the bias is added by the GEMM's epilogue (cuBLASLt), so c is written once instead of written,
  /// read and written again by add_row_vector. Any other `inputs`, or a product cuBLASLt has no
  /// epilogue kernel for, is gemm then add_row_vector: the same sum.
  void gemm_bias(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, const Tensor& bias, DType inputs) const {
    const auto g = detail::gemm_dims(a, ta, b, tb, c);
    EPL_CHECK(bias.numel() == g.n && bias.dtype() == c.dtype(), "gemm_bias: bias ", bias.shape(), " ", name_of(bias.dtype()),
              " for rows of ", c.shape(), " ", name_of(c.dtype()));
    if (inputs != DType::kBF16 && inputs != DType::kF16) {
      gemm(a, ta, b, tb, c, 1, 0, inputs);
      add_row_vector(c, bias);
      return;
    }
    gemm_strided(1, ta, tb, g.m, g.n, g.k, 1, a, 0, b, 0, 0, c, 0, inputs, &bias);
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

  // ---- reductions --------------------------------------------------------------------
  /// out = beta out + the column sums of x's 2-D view.
  void sum_rows(const Tensor& x, const Tensor& out, double beta = 0) const {
    EPL_CHECK(out.numel() == x.shape().back(), "sum_rows: output ", out.shape(), " for rows of ", x.shape());
    detail::same_dtype(x, out, "sum_rows");
    if (beta == 0) fill(out, 0.0);
    else if (beta != 1) scale(out, beta);
    visit_compute(x.dtype(), [&]<class T>() {
      columns(kernels::ColumnSums<T>{x.data<T>(), out.data<T>(), x.shape().back()}, x.shape().rows(), x.shape().back());
    });
  }
  /// The sum of x's squares, accumulated in double and read back (it waits for the stream).
  [[nodiscard]] double sum_squares(const Tensor& x) const { return sum(x, true); }

  // ---- layer kernels -----------------------------------------------------------------
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, const Tensor& mean,
                  const Tensor& rstd, double eps) const {
    const auto rows = x.shape().rows(), cols = x.shape().back();
    EPL_CHECK(gamma.numel() == cols && beta.numel() == cols && mean.numel() == rows && rstd.numel() == rows,
              "layer_norm: x ", x.shape(), " gamma ", gamma.shape(), " beta ", beta.shape());
    same(x, y, "layer_norm");
    visit_compute(x.dtype(), [&]<class T>() {
      this->rows(kernels::LayerNormRows<T>{x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.data<T>(), rstd.data<T>(),
                                           cols, T(eps)}, rows);
    });
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                           const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) const {
    same(x, dy, "layer_norm_backward");
    same(x, dx, "layer_norm_backward");
    const auto rows = x.shape().rows(), cols = x.shape().back();
    EPL_CHECK(gamma.numel() == cols && dgamma.numel() == cols && dbeta.numel() == cols && mean.numel() == rows && rstd.numel() == rows,
              "layer_norm_backward: x ", x.shape(), " gamma ", gamma.shape(), " dgamma ", dgamma.shape(), " dbeta ", dbeta.shape());
    visit_compute(x.dtype(), [&]<class T>() {
      this->rows(kernels::LayerNormBackwardRows<T>{x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(),
                                                   dx.data<T>(), cols}, rows);
      columns(kernels::LayerNormParamGrads<T>{x.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(), dgamma.data<T>(),
                                              dbeta.data<T>(), cols}, rows, cols);
    });
  }
  /// p = causal softmax(scale s) over [batch, t, t].
  void softmax_causal(const Tensor& s, const Tensor& p, double scale) const {
    EPL_CHECK(s.rank() == 3 && s.dim(1) == s.dim(2), "softmax_causal needs [batch, t, t], got ", s.shape());
    same(s, p, "softmax_causal");
    visit_compute(s.dtype(), [&]<class T>() {
      rows(kernels::SoftmaxCausalRows<T>{s.data<T>(), p.data<T>(), s.dim(1), T(scale)}, s.dim(0) * s.dim(1));
    });
  }
  void softmax_causal_backward(const Tensor& p, const Tensor& dp, const Tensor& ds, double scale) const {
    EPL_CHECK(p.rank() == 3 && p.dim(1) == p.dim(2), "softmax_causal_backward needs [batch, t, t], got ", p.shape());
    same(p, dp, "softmax_causal_backward");
    same(p, ds, "softmax_causal_backward");
    visit_compute(p.dtype(), [&]<class T>() {
      rows(kernels::SoftmaxCausalBackwardRows<T>{p.data<T>(), dp.data<T>(), ds.data<T>(), p.dim(1), T(scale)}, p.dim(0) * p.dim(1));
    });
  }
  void softmax_rows(const Tensor& x, const Tensor& y) const {
    same(x, y, "softmax_rows");
    visit_compute(x.dtype(), [&]<class T>() { rows(kernels::SoftmaxRows<T>{x.data<T>(), y.data<T>(), x.shape().back()}, x.shape().rows()); });
  }
  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const {
    same(y, dy, "softmax_rows_backward");
    same(y, dx, "softmax_rows_backward");
    visit_compute(y.dtype(), [&]<class T>() {
      rows(kernels::SoftmaxRowsBackward<T>{y.data<T>(), dy.data<T>(), dx.data<T>(), y.shape().back()}, y.shape().rows());
    });
  }
  /// out[i, :] = table[ids[i] - first, :] (device::Cpu::embedding); an id outside the vocabulary
  /// is thrown at the next synchronisation.
  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, std::int64_t first = 0, std::int64_t vocab = 0) const {
    EPL_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: output ", out.shape(), " for ", ids.shape(), " ids");
    detail::same_dtype(table, out, "embedding");
    visit_index(ids.dtype(), [&]<class I>() {
      visit_compute(table.dtype(), [&]<class T>() {
        rows(kernels::EmbeddingRows<T, I>{ids.data<I>(), table.data<T>(), out.data<T>(), table.dim(1), first, table.dim(0),
                                          vocab > 0 ? vocab : table.dim(0), report_on_device_}, ids.numel());
      });
    });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, std::int64_t first = 0,
                          std::int64_t vocab = 0) const {
    EPL_CHECK(dout.numel() == ids.numel() * dtable.dim(1), "embedding_backward: gradient ", dout.shape(), " for ", ids.shape(), " ids");
    detail::same_dtype(dtable, dout, "embedding_backward");
    visit_index(ids.dtype(), [&]<class I>() {
      visit_compute(dtable.dtype(), [&]<class T>() {
        rows(kernels::EmbeddingBackwardRows<T, I>{ids.data<I>(), dout.data<T>(), dtable.data<T>(), dtable.dim(1), first, dtable.dim(0),
                                                  vocab > 0 ? vocab : dtable.dim(0), report_on_device_}, ids.numel());
      });
    });
  }
  /// dst[i, :] = src[index[i], :]; index an i64 tensor of row numbers of src.
  void gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const {
    detail::rows_by_index(src, index, dst, "gather_rows");  // bad index values: reported by the kernel
    visit_compute(src.dtype(), [&]<class T>() {
      rows(kernels::IndexedRows<T>{src.data<T>(), index.data<std::int64_t>(), nullptr, dst.data<T>(), src.shape().back(),
                                   src.shape().rows(), false, report_on_device_}, index.numel());
    });
  }
  /// dst[index[i], :] += weight[i] src[i, :] (weight undefined: 1).
  void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& weight, const Tensor& dst) const {
    detail::rows_by_index(dst, index, src, "scatter_add_rows");
    EPL_CHECK(!weight.defined() || weight.numel() == index.numel(), "scatter_add_rows: ", weight.numel(), " weights for ",
              index.numel(), " rows");
    visit_compute(src.dtype(), [&]<class T>() {
      rows(kernels::IndexedRows<T>{src.data<T>(), index.data<std::int64_t>(), weight.defined() ? weight.data<T>() : nullptr,
                                   dst.data<T>(), src.shape().back(), dst.shape().rows(), true, report_on_device_}, index.numel());
    });
  }
  void row_dot(const Tensor& a, const Tensor& b, const Tensor& out) const {
    same(a, b, "row_dot");
    EPL_CHECK(out.numel() == a.shape().rows(), "row_dot: ", out.numel(), " outputs for ", a.shape().rows(), " rows");
    visit_compute(a.dtype(), [&]<class T>() {
      rows(kernels::RowDot<T>{a.data<T>(), b.data<T>(), out.data<T>(), a.shape().back()}, a.shape().rows());
    });
  }
  void row_max(const Tensor& x, const Tensor& out) const {
    EPL_CHECK(out.numel() == x.shape().rows(), "row_max: ", out.numel(), " outputs for ", x.shape().rows(), " rows of ", x.shape());
    detail::same_dtype(x, out, "row_max");
    visit_compute(x.dtype(), [&]<class T>() { rows(kernels::RowMax<T>{x.data<T>(), out.data<T>(), x.shape().back()}, x.shape().rows()); });
  }
  /// A part of a vocabulary-parallel cross-entropy (device::Cpu::cross_entropy_stats).
  void cross_entropy_stats(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
                           const Tensor& target_logit, std::int64_t first, std::int64_t vocab) const {
    const auto rows_ = logits.shape().rows();
    EPL_CHECK(targets.numel() == rows_ && max.numel() == rows_ && sum_exp.numel() == rows_ && target_logit.numel() == rows_,
              "cross_entropy_stats: ", targets.numel(), " targets and ", max.numel(), ", ", sum_exp.numel(), ", ", target_logit.numel(),
              " row statistics for ", rows_, " rows of logits ", logits.shape());
    visit_index(targets.dtype(), [&]<class I>() {
      visit_compute(logits.dtype(), [&]<class T>() {
        rows(kernels::CrossEntropyStatsRows<T, I>{logits.data<T>(), targets.data<I>(), max.data<T>(), sum_exp.data<T>(),
                                                  target_logit.data<T>(), logits.shape().back(), first, vocab, report_on_device_}, rows_);
      });
    });
  }
  void cross_entropy_part_backward(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sum_exp,
                                   const Tensor& dlogits, std::int64_t first, double scale) const {
    same(logits, dlogits, "cross_entropy_part_backward");
    visit_index(targets.dtype(), [&]<class I>() {
      visit_compute(logits.dtype(), [&]<class T>() {
        rows(kernels::CrossEntropyPartBackwardRows<T, I>{logits.data<T>(), targets.data<I>(), max.data<T>(), sum_exp.data<T>(),
                                                         dlogits.data<T>(), logits.shape().back(), first, T(scale)},
             logits.shape().rows());
      });
    });
  }
  /// Sum over rows of the cross-entropy of logits [rows, classes] against class ids (read back:
  /// it waits for the stream, and throws for a target outside the classes).
  [[nodiscard]] double cross_entropy(const Tensor& logits, const Tensor& targets) const {
    EPL_CHECK(targets.numel() == logits.shape().rows(), "cross_entropy: ", targets.numel(), " targets for ", logits.shape().rows(),
              " rows of logits ", logits.shape());
    Tensor loss = empty({logits.shape().rows()}, logits.dtype(), MemoryCategory::kWorkspace);
    cross_entropy_rows(logits, targets, loss, Tensor{}, 1.0);
    return sum(loss, false);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, double scale) const {
    same(logits, dlogits, "cross_entropy_backward");
    EPL_CHECK(targets.numel() == logits.shape().rows(), "cross_entropy_backward: ", targets.numel(), " targets for ",
              logits.shape().rows(), " rows of logits ", logits.shape());
    cross_entropy_rows(logits, targets, Tensor{}, dlogits, scale);
  }
  /// y = x keep / (1 - p), keep_i = uniform(key, offset + i) >= p: device::Cpu's mask, bit for bit.
  void dropout(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset = 0) const {
    same(x, y, "dropout");
    visit_compute(x.dtype(), [&]<class T>() { elements(kernels::Dropout<T>{x.data<T>(), y.data<T>(), p, key, offset, 1, 0, 0}, x.numel()); });
  }
  void dropout_columns(const Tensor& x, const Tensor& y, double p, std::uint64_t key, std::int64_t offset, std::int64_t whole_cols,
                       std::int64_t col0) const {
    same(x, y, "dropout_columns");
    EPL_CHECK(col0 >= 0 && col0 + x.shape().back() <= whole_cols, "dropout_columns: columns [", col0, ", ", col0 + x.shape().back(),
              ") outside rows of ", whole_cols);
    visit_compute(x.dtype(), [&]<class T>() {
      elements(kernels::Dropout<T>{x.data<T>(), y.data<T>(), p, key, offset, x.shape().back(), whole_cols, col0}, x.numel());
    });
  }
  /// Between tokens [b, t, row] (heads at column offset + h d) and heads [b, h, t, d].
  void permute_heads(const Tensor& tokens, const Tensor& heads, std::int64_t offset, bool to_heads) const {
    EPL_CHECK(tokens.rank() == 3 && heads.rank() == 4 && tokens.dim(0) == heads.dim(0) && tokens.dim(1) == heads.dim(2) &&
                  offset + heads.dim(1) * heads.dim(3) <= tokens.dim(2),
              "permute_heads: tokens ", tokens.shape(), ", heads ", heads.shape(), ", offset ", offset);
    detail::same_dtype(tokens, heads, "permute_heads");
    visit_compute(tokens.dtype(), [&]<class T>() {
      const bool narrow = tokens.numel() < (std::int64_t{1} << 31) && heads.numel() < (std::int64_t{1} << 31);
      elements(kernels::PermuteHeads<T>{tokens.data<T>(), heads.data<T>(), heads.dim(2), heads.dim(1), heads.dim(3), tokens.dim(2),
                                        offset, to_heads, narrow}, heads.numel());
    });
  }

#if EPL_CUDNN_FRONTEND
  /// \brief Fused causal attention (cuDNN's SDPA, flash attention): per head,
  /// o = softmax_causal(scale q k^T) v, with q | k | v read from qkv [b, t, 3 width] (heads
  /// inside each; width = heads × head_dim) and o [b, t, width], both bf16 or f16 (AMP's matmul
  /// type); stats [b, heads, t] (f32) gets each row's log-sum-exp, for the backward. Nothing of
  /// size t × t is stored. Returns false, having done nothing, where cuDNN declines the shape
  /// (the reason is on stderr, once): the caller computes attention unfused then.
  [[nodiscard]] bool attention_causal(const Tensor& qkv, const Tensor& o, const Tensor& stats, std::int64_t heads, double scale) const {
    const auto s = attention_shape(qkv, o, stats, heads, scale, "attention_causal");
    const std::int64_t ws = attention().workspace(s, false, stream_);
    if (ws < 0) return false;
    const Tensor work = workspace_bytes(ws);
    attention().forward(s, stream_, qkv.raw(), o.raw(), stats.data<float>(), work.defined() ? work.raw() : nullptr);
    return true;
  }
  /// \brief The backward of attention_causal: dqkv [b, t, 3 width] (dq | dk | dv) from the
  /// forward's qkv, o and stats and the output's gradient dout [b, t, width] (all in the forward's
  /// half type). Returns false, having done nothing, where the forward would have.
  [[nodiscard]] bool attention_causal_backward(const Tensor& qkv, const Tensor& o, const Tensor& stats, const Tensor& dout,
                                               const Tensor& dqkv, std::int64_t heads, double scale) const {
    const auto s = attention_shape(qkv, o, stats, heads, scale, "attention_causal_backward");
    EPL_CHECK(dout.shape() == o.shape() && dout.dtype() == o.dtype() && dqkv.shape() == qkv.shape() && dqkv.dtype() == qkv.dtype(),
              "attention_causal_backward: dout ", dout.shape(), " ", name_of(dout.dtype()), " and dqkv ", dqkv.shape(), " ",
              name_of(dqkv.dtype()), " must match o ", o.shape(), " and qkv ", qkv.shape(), " in ", name_of(qkv.dtype()));
    const std::int64_t ws = attention().workspace(s, true, stream_);
    if (ws < 0) return false;
    const Tensor work = workspace_bytes(ws);
    attention().backward(s, stream_, qkv.raw(), o.raw(), stats.data<float>(), dout.raw(), dqkv.raw(),
                         work.defined() ? work.raw() : nullptr);
    return true;
  }
#endif

  // ---- optimizer updates (over any range of the parameter arena) ---------------------
  // Each reads the gradient as grad_scale g (AMP's unscale times the clip coefficient).
  void sgd_update(const Tensor& p, const Tensor& g, double lr, double wd, double grad_scale = 1) const {
    same(p, g, "sgd_update");
    device::detail::update("sgd_update", lr, wd, grad_scale);
    visit_compute(p.dtype(), [&]<class T>() {
      elements(kernels::SgdStep<T>{p.data<T>(), g.data<T>(), T(lr), T(wd), T(grad_scale)}, p.numel());
    });
  }
  void momentum_update(const Tensor& p, const Tensor& g, const Tensor& v, double lr, double mu, double wd, bool nesterov,
                       double grad_scale = 1) const {
    same(p, g, "momentum_update");
    device::detail::update("momentum_update", lr, wd, grad_scale);
    device::detail::momentum(mu);
    same(p, v, "momentum_update");
    visit_compute(p.dtype(), [&]<class T>() {
      elements(kernels::MomentumStep<T>{p.data<T>(), g.data<T>(), v.data<T>(), T(lr), T(mu), T(wd), nesterov, T(grad_scale)},
               p.numel());
    });
  }
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double beta1, double beta2,
                    double eps, double wd, std::int64_t step, double grad_scale = 1) const {
    same(p, g, "adamw_update");
    same(p, m, "adamw_update");
    same(p, v, "adamw_update");
    device::detail::update("adamw_update", lr, wd, grad_scale);
    device::detail::adamw(beta1, beta2, eps, step);
    visit_compute(p.dtype(), [&]<class T>() {
      elements(kernels::adamw_step<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), T(lr), T(beta1), T(beta2), T(eps), T(wd), step,
                                         T(grad_scale)),
               p.numel());
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
                    std::int64_t sc, DType inputs, const Tensor* bias = nullptr) const {
    EPL_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "gemm: dtypes ", name_of(a.dtype()), ", ", name_of(b.dtype()),
              ", ", name_of(c.dtype()), " differ");
    detail::gemm_inputs(inputs, "gemm");
    const bool low = inputs == DType::kBF16 || inputs == DType::kF16;
    EPL_CHECK(!low || a.dtype() == DType::kF32, "gemm: rounding ", name_of(a.dtype()), " operands to ", name_of(inputs),
              " (AMP) is done for f32 only on CUDA; train in f32 (TrainerOptions::dtype) or turn AMP off (amp.level = \"\")");
    const auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
    // B first: see device/blas_args.hpp
    auto call = [&](const ColumnMajorGemm& cm, const void* al, const void* first, std::int64_t ld_first, const void* second,
                    std::int64_t ld_second, cudaDataType in, const void* be, void* out_c, std::int64_t ldc, cudaDataType out,
                    cublasComputeType_t compute) {
      EPL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_, op(cm.trans_first), op(cm.trans_second), static_cast<int>(cm.rows),
                                                  static_cast<int>(cm.cols), static_cast<int>(cm.inner), al, first, in,
                                                  static_cast<int>(ld_first), sb, second, in, static_cast<int>(ld_second), sa, be, out_c,
                                                  out, static_cast<int>(ldc), sc, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT));
    };
    if (low) {
      // AMP: the operands rounded to the half type (nearest even, as device::Cpu rounds them) into
      // workspace copies, multiplied on the tensor cores with f32 accumulation into f32 c. Not
      // CUBLAS_COMPUTE_32F_FAST_16BF on the f32 operands: with it cuBLAS ran TF32 kernels (measured
      // on an H100 with Nsight Compute), at half the tensor cores' bf16 rate.
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      const cudaDataType half = inputs == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
      if (batch == 1) {
        // k and n padded to multiples of 8 with zeros (padded_gemm): an odd k or n put cuBLAS on
        // its align1 kernels, 5x slower on GPT-2's LM head (vocabulary 50257)
        const PaddedGemm pg = padded_gemm(ta, tb, m, n, k);
        const Tensor ha = half_padded(a, pg.a_rows, pg.a_cols, inputs), hb = half_padded(b, pg.b_rows, pg.b_cols, inputs);
        // the bias padded to n_pad with zeros, for an epilogue that adds it to the padded rows
        const Tensor pbias = bias && pg.n != n ? zeros({pg.n}, DType::kF32, MemoryCategory::kWorkspace) : Tensor{};
        if (pbias.defined()) EPL_CUDA_CHECK(cudaMemcpyAsync(pbias.raw(), bias->raw(), static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, stream_));
        const float* bias_on = bias ? (pbias.defined() ? pbias.data<float>() : bias->data<float>()) : nullptr;
        // rows_m rows of the product (and the bias) into out, rows of ldc
        auto product = [&](std::int64_t rows_m, const void* a0, void* out, std::int64_t ldc) {
          const ColumnMajorGemm cm = column_major_gemm(ta, tb, rows_m, pg.n, pg.k);
          if (bias_on && lt_gemm(cm, al, hb.raw(), pg.b_cols, a0, pg.a_cols, half, be, out, ldc, bias_on)) return;
          call(cm, &al, hb.raw(), pg.b_cols, a0, pg.a_cols, half, &be, out, ldc, CUDA_R_32F, CUBLAS_COMPUTE_32F);
          if (bias_on)  // cuBLASLt had no epilogue kernel for it
            launch(epl::detail::cuda::add_row_vector<float>, rows_m * ldc, static_cast<float*>(out), bias_on, rows_m * ldc, ldc);
        };
        if (pg.n == n) {
          product(m, ha.raw(), c.raw(), n);
          return;  // the copies go back to the stream-ordered cache while the GEMM runs: later work on the stream follows it
        }
        // rows of n_pad: computed a block of rows at a time into a buffer of at most 256 MiB, and
        // copied into c's rows of n (the LM head's f32 logits need no second copy at full size)
        const std::int64_t per = std::max<std::int64_t>(8, (std::int64_t{256} << 20) / (pg.n * 4) / 8 * 8);
        const Tensor out = empty({std::min(m, per), pg.n}, DType::kF32, MemoryCategory::kWorkspace);
        const auto rows_copy = [&](void* to, std::int64_t to_ld, const void* from, std::int64_t from_ld, std::int64_t rows_) {
          EPL_CUDA_CHECK(cudaMemcpy2DAsync(to, static_cast<std::size_t>(to_ld) * 4, from, static_cast<std::size_t>(from_ld) * 4,
                                           static_cast<std::size_t>(n) * 4, static_cast<std::size_t>(rows_), cudaMemcpyDeviceToDevice, stream_));
        };
        for (std::int64_t r0 = 0; r0 < m; r0 += per) {
          const std::int64_t mc = std::min(per, m - r0);
          float* c0 = c.data<float>() + r0 * n;
          // op(A)'s rows r0..: rows of the copy, or its columns when ta (r0 is a multiple of 8: aligned)
          const char* a0 = static_cast<const char*>(ha.raw()) + (ta ? r0 : r0 * pg.a_cols) * 2;
          if (beta != 0) rows_copy(out.raw(), pg.n, c0, n, mc);
          product(mc, a0, out.raw(), pg.n);
          rows_copy(c0, n, out.raw(), pg.n, mc);
        }
        return;  // the copies go back to the stream-ordered cache while the GEMM runs: later work on the stream follows it
      }
      EPL_CHECK(bias == nullptr, "gemm: a bias for a batched product");
      const ColumnMajorGemm cm = column_major_gemm(ta, tb, m, n, k);
      const Tensor ha = half_padded(a, a.numel() / a.shape().back(), a.shape().back(), inputs),
                   hb = half_padded(b, b.numel() / b.shape().back(), b.shape().back(), inputs);
      call(cm, &al, hb.raw(), cm.ld_first, ha.raw(), cm.ld_second, half, &be, c.raw(), cm.ldc, CUDA_R_32F, CUBLAS_COMPUTE_32F);
      return;
    }
    const ColumnMajorGemm cm = column_major_gemm(ta, tb, m, n, k);
    visit_compute(a.dtype(), [&]<class T>() {
      const T al = T(alpha), be = T(beta);
      constexpr auto type = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
      call(cm, &al, b.raw(), cm.ld_first, a.raw(), cm.ld_second, type, &be, c.raw(), cm.ldc, type,
           std::is_same_v<T, float> ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F);
    });
  }
  // D = alpha op(first) op(second) + beta D + bias (along D's column-major rows), half operands and
  // f32 D, through cuBLASLt with the bias epilogue; false (nothing done) where it has no kernel for
  // the shape. Its descriptors and the heuristic's choice are cached per shape.
  bool lt_gemm(const ColumnMajorGemm& cm, float alpha, const void* first, std::int64_t ld_first, const void* second,
               std::int64_t ld_second, cudaDataType half, float beta, void* d, std::int64_t ldc, const float* bias) const {
    detail::LtPlan& plan = lt().plan({cm.trans_first, cm.trans_second, cm.rows, cm.cols, cm.inner, ld_first, ld_second, ldc, half});
    if (!plan.ok) return false;
    EPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    EPL_CUBLAS_CHECK(cublasLtMatmul(lt().handle, plan.desc, &alpha, first, plan.first, second, plan.second, &beta, d, plan.d, d, plan.d,
                                    &plan.algo, lt().workspace(*alloc_), detail::LtPlans::kWorkspace, stream_));
    return true;
  }
  detail::LtPlans& lt() const {
    std::call_once(lt_once_, [&] { lt_ = std::make_unique<detail::LtPlans>(); });
    return *lt_;
  }
  // x (f32, its 2-D view rows x cols) rounded to `half` into a workspace copy [rows_out, cols_out],
  // padded with zeros (none: the copy runs 16 bytes at a time).
  Tensor half_padded(const Tensor& x, std::int64_t rows_out, std::int64_t cols_out, DType half) const {
    const std::int64_t cols = x.shape().back(), rows_ = cols > 0 ? x.numel() / cols : 0;
    Tensor h = empty({rows_out, cols_out}, half, MemoryCategory::kWorkspace);
    const bool whole = rows_out == rows_ && cols_out == cols;
    if (whole && reinterpret_cast<std::uintptr_t>(x.raw()) % 16 == 0 && x.numel() % 4 == 0) {
      if (half == DType::kBF16)
        launch(epl::detail::cuda::cast4<__nv_bfloat162>, x.numel() / 4, reinterpret_cast<const float4*>(x.raw()),
               reinterpret_cast<__nv_bfloat162*>(h.raw()), x.numel() / 4);
      else
        launch(epl::detail::cuda::cast4<__half2>, x.numel() / 4, reinterpret_cast<const float4*>(x.raw()), reinterpret_cast<__half2*>(h.raw()),
               x.numel() / 4);
    } else if (whole && cols % 2 != 0) {
      cast(x, h);
    } else if (rows_out > 0 && cols_out > 0) {
      const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((cols_out / 2 + 255) / 256, 64)),
                      static_cast<unsigned>(std::min<std::int64_t>(rows_out, 65535)));
      if (half == DType::kBF16)
        epl::detail::cuda::cast_padded<<<grid, 256, 0, stream_>>>(ptr<float>(x), reinterpret_cast<__nv_bfloat162*>(h.raw()), rows_, cols,
                                                                  rows_out, cols_out);
      else
        epl::detail::cuda::cast_padded<<<grid, 256, 0, stream_>>>(ptr<float>(x), reinterpret_cast<__half2*>(h.raw()), rows_, cols, rows_out,
                                                                  cols_out);
      EPL_CUDA_CHECK(cudaGetLastError());
    }
    return h;
  }
#if EPL_CUDNN_FRONTEND
  detail::CudnnAttention& attention() const {
    std::call_once(attention_once_, [&] { attention_ = std::make_unique<detail::CudnnAttention>(); });
    return *attention_;
  }
  // The checked shape of a fused attention (whether cuDNN runs it is CudnnAttention::workspace's answer).
  static detail::AttentionShape attention_shape(const Tensor& qkv, const Tensor& o, const Tensor& stats,
                                                               std::int64_t heads, double scale, const char* op) {
    EPL_CHECK(qkv.rank() == 3 && o.rank() == 3 && qkv.dim(0) == o.dim(0) && qkv.dim(1) == o.dim(1) && qkv.dim(2) == 3 * o.dim(2) &&
                  heads > 0 && o.dim(2) % heads == 0,
              op, ": qkv ", qkv.shape(), " must be [b, t, 3 width] for o ", o.shape(), " [b, t, width] of ", heads, " heads");
    EPL_CHECK(qkv.dtype() == o.dtype() && (o.dtype() == DType::kBF16 || o.dtype() == DType::kF16), op, ": qkv ", name_of(qkv.dtype()),
              " and o ", name_of(o.dtype()), " must both be bf16 or f16 (AMP's matmul type)");
    EPL_CHECK(stats.dtype() == DType::kF32 && stats.numel() == o.dim(0) * heads * o.dim(1), op, ": stats ", stats.shape(), " ",
              name_of(stats.dtype()), " must be f32 [b, heads, t] = [", o.dim(0), ", ", heads, ", ", o.dim(1), "]");
    return detail::AttentionShape{o.dim(0), o.dim(1), heads, o.dim(2) / heads, o.dtype(), static_cast<float>(scale)};
  }
  Tensor workspace_bytes(std::int64_t n) const {
    return n > 0 ? empty({(n + 3) / 4}, DType::kF32, MemoryCategory::kWorkspace) : Tensor{};
  }
#endif
  // Launches of the bodies of device/bodies.hpp.
  template <class K>
  void rows(const K& k, std::int64_t n) const {
    if (n <= 0) return;
    const auto g = kernels::rows_launch(n);
    epl::detail::cuda::rows<<<static_cast<unsigned>(g.blocks), static_cast<unsigned>(g.threads), 0, stream_>>>(k, n);
    EPL_CUDA_CHECK(cudaGetLastError());
  }
  template <class Fn>
  void elements(const Fn& fn, std::int64_t n) const {
    if (n <= 0) return;
    const auto g = kernels::elements_launch(n);
    epl::detail::cuda::elements<<<static_cast<unsigned>(g.blocks), static_cast<unsigned>(g.threads), 0, stream_>>>(fn, n);
    EPL_CUDA_CHECK(cudaGetLastError());
  }
  template <class Fn>
  void columns(const Fn& fn, std::int64_t rows_, std::int64_t cols) const {
    if (rows_ <= 0 || cols <= 0) return;
    const auto g = kernels::columns_launch(rows_, cols);
    epl::detail::cuda::columns<<<dim3(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y)), static_cast<unsigned>(g.threads), 0,
                                 stream_>>>(fn, rows_, cols, g.chunk);
    EPL_CUDA_CHECK(cudaGetLastError());
  }
  // The sum (of squares) of x in double, read back.
  double sum(const Tensor& x, bool squares) const {
    Tensor out = zeros({1}, DType::kF64, MemoryCategory::kWorkspace);
    if (x.numel() > 0)
      visit_compute(x.dtype(), [&]<class T>() {
        const auto g = kernels::elements_launch(x.numel());
        epl::detail::cuda::sum_into<<<static_cast<unsigned>(g.blocks), static_cast<unsigned>(g.threads), 0, stream_>>>(
            x.data<T>(), x.numel(), squares, out.data<double>());
        EPL_CUDA_CHECK(cudaGetLastError());
      });
    double host = 0;
    download(out, &host);
    return host;
  }
  void cross_entropy_rows(const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& dlogits, double scale) const {
    visit_index(targets.dtype(), [&]<class I>() {
      visit_compute(logits.dtype(), [&]<class T>() {
        rows(kernels::CrossEntropyRows<T, I>{logits.data<T>(), targets.data<I>(), loss.defined() ? loss.data<T>() : nullptr,
                                             dlogits.defined() ? dlogits.data<T>() : nullptr, logits.shape().back(), T(scale),
                                             report_on_device_}, logits.shape().rows());
      });
    });
  }
  // The first bad input a kernel reported, as an error (after the stream has finished).
  void check_reports() const {
    if (report_->what == kernels::Report::kNone) return;
    const kernels::Report r = *report_;
    *report_ = {};
    EPL_FAIL(kernels::report_op(r), ": ", r.what == kernels::Report::kRowIndex ? "row " : "id ", r.value, " outside [0, ", r.limit,
             r.what == kernels::Report::kRowIndex ? ")" : "); check the vocabulary size (found on the GPU, reported at the next synchronisation)");
  }
  static void same(const Tensor& a, const Tensor& b, const char* op) { detail::same(a, b, op); }
  // An event for ordering only (no timing); destroyed when its last holder lets go, which CUDA
  // allows while work on it is still pending.
  static std::shared_ptr<CUevent_st> event() {
    cudaEvent_t e = nullptr;
    EPL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return {e, CopyTicket::Destroy{}};
  }

  // The process's pools of this id (core/memory.hpp: device_pool): a tensor, or a lane's message
  // buffer, may outlive this object.
  CudaAllocator* alloc_;
  PinnedAllocator* pinned_;
#if EPL_CUDNN_FRONTEND
  mutable std::once_flag attention_once_;
  mutable std::unique_ptr<detail::CudnnAttention> attention_;  // cuDNN's handle and graphs, made at the first fused attention
#endif
  mutable std::once_flag lt_once_;
  mutable std::unique_ptr<detail::LtPlans> lt_;  // cuBLASLt's handle and plans, made at the first GEMM with a bias
  mutable std::once_flag lane_once_;
  mutable std::shared_ptr<detail::CudaLane> lane_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // copy_ahead's
  cublasHandle_t blas_ = nullptr;
  kernels::Report* report_ = nullptr;            // mapped host memory the kernels report bad input into
  kernels::Report* report_on_device_ = nullptr;  // its address on the device
};

}  // namespace device
}  // namespace v0
}  // namespace epl
