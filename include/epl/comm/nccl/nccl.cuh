#pragma once
/// \file
/// \brief comm::NcclCommunicator — GPU ranks over NCCL, one rank per GPU. Ranks find each
/// other through a Store that carries NCCL's unique id. Buffers are device memory; operations
/// are enqueued on the rank's device stream, and blocking calls wait for the stream with a
/// timeout (past it the communicator is aborted and an epl::Error names the operation).
#include <nccl.h>

#include <chrono>
#include <thread>

#include "epl/comm/communicator.hpp"
#include "epl/comm/store.hpp"
#include "epl/device/cuda/cuda.cuh"

#define EPL_NCCL_CHECK(call)                                                                  \
  do {                                                                                        \
    ncclResult_t epl_nccl_ = (call);                                                          \
    if (epl_nccl_ != ncclSuccess) EPL_FAIL(#call, " failed: ", ncclGetErrorString(epl_nccl_)); \
  } while (false)

namespace epl {
inline namespace v0 {
namespace comm {

namespace detail {
inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return ncclFloat32;
}
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMean: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}
}  // namespace detail

/// \brief One GPU rank's handle on an NCCL communicator.
class NcclCommunicator {
 public:
  /// \brief Joins the group `name` of `size` ranks as `rank`, on device `gpu`: rank 0 creates
  /// the unique id and publishes it in the store under "nccl/<name>/id"; the others read it.
  template <store S>
  NcclCommunicator(S& s, int rank, int size, const device::Cuda& gpu, CommOptions opt = {}, std::string name = "world")
      : gpu_(&gpu), rank_(rank), size_(size), opt_(opt), name_(std::move(name)) {
    EPL_CHECK(size >= 1 && rank >= 0 && rank < size, "NcclCommunicator: rank ", rank, " of size ", size, " is not valid");
    ncclUniqueId id;
    const std::string key = "nccl/" + name_ + "/id";
    if (rank == 0) {
      EPL_NCCL_CHECK(ncclGetUniqueId(&id));
      s.set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      auto bytes = s.get(key);
      EPL_CHECK(bytes.size() == sizeof(id.internal), "NcclCommunicator: store value for ", key, " has ", bytes.size(),
                " bytes, not an NCCL unique id; another program uses that key");
      std::copy(bytes.begin(), bytes.end(), id.internal);
    }
    EPL_CUDA_CHECK(cudaSetDevice(gpu.id().index));
    EPL_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
  }
  NcclCommunicator(NcclCommunicator&& o) noexcept
      : gpu_(o.gpu_), rank_(o.rank_), size_(o.size_), opt_(o.opt_), name_(std::move(o.name_)), comm_(o.comm_), stats_(o.stats_) {
    o.comm_ = nullptr;
  }
  NcclCommunicator& operator=(NcclCommunicator&&) = delete;
  ~NcclCommunicator() {
    if (comm_) ncclCommDestroy(comm_);
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] CommStats stats() const noexcept { return stats_; }

  /// \brief Device memory, and host memory through device copies: the few host values a trainer
  /// agrees on over its world (losses, norms, the run's facts) go through the GPU, as NCCL moves
  /// nothing else. The blocking collectives stage host buffers; the asynchronous ones and
  /// point-to-point transfers take device memory only.
  [[nodiscard]] bool reaches(MemorySpace) const noexcept { return true; }

  /// \brief Aborts the NCCL communicator: work on the stream ends, later operations fail.
  void cancel(const std::string& reason) noexcept {
    cancelled_ = reason;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    staged(in, out, [&](const Buffer& i, const Buffer& o) { enqueue_all_reduce(i, o, op); }, "all_reduce");
  }
  void all_reduce(const Buffer& inout, ReduceOp op) { all_reduce(inout, inout, op); }
  /// Equal shares only (NCCL's reduce_scatter): out.count * size == in.count.
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
    staged(in, out, [&](const Buffer& i, const Buffer& o) { enqueue_reduce_scatter(i, o, op); }, "reduce_scatter");
  }
  /// Equal sizes only (NCCL's all_gather): in.count * size == out.count.
  void all_gather(const Buffer& in, const Buffer& out) {
    staged(in, out, [&](const Buffer& i, const Buffer& o) { enqueue_all_gather(i, o); }, "all_gather");
  }
  void broadcast(const Buffer& buffer, int root) {
    usable("broadcast");
    check_rank(root, "broadcast root");
    staged(buffer, buffer, [&](const Buffer& buf, const Buffer&) {
      EPL_NCCL_CHECK(ncclBroadcast(buf.data, buf.data, static_cast<std::size_t>(buf.count), detail::nccl_type(buf.dtype), root, comm_,
                                   gpu_->stream()));
      account(rank_ == root ? (size_ - 1) * static_cast<std::int64_t>(buf.bytes()) : 0, rank_ == root ? 0 : static_cast<std::int64_t>(buf.bytes()));
    }, "broadcast");
  }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) {
    usable("reduce");
    check_rank(root, "reduce root");
    staged(in, out, [&](const Buffer& i, const Buffer& o) {
      EPL_NCCL_CHECK(ncclReduce(i.data, o.data, static_cast<std::size_t>(i.count), detail::nccl_type(i.dtype), detail::nccl_op(op),
                                root, comm_, gpu_->stream()));
      account(static_cast<std::int64_t>(i.bytes()), 0);
    }, "reduce");
  }
  /// Tags are not NCCL's: messages between two ranks arrive in the order sent; tag must be 0.
  void send(const Buffer& buf, int dst, int tag) {
    device_only(buf, buf, "send");
    usable("send");
    check_rank(dst, "send destination");
    EPL_CHECK(tag == 0, "send over NCCL: tag ", tag, " given; NCCL orders messages per peer and has no tags, use 0");
    EPL_NCCL_CHECK(ncclSend(buf.data, static_cast<std::size_t>(buf.count), detail::nccl_type(buf.dtype), dst, comm_, gpu_->stream()));
    account(static_cast<std::int64_t>(buf.bytes()), 0);
    wait("send");
  }
  void recv(const Buffer& buf, int src, int tag) {
    device_only(buf, buf, "recv");
    usable("recv");
    check_rank(src, "recv source");
    EPL_CHECK(tag == 0, "recv over NCCL: tag ", tag, " given; NCCL orders messages per peer and has no tags, use 0");
    EPL_NCCL_CHECK(ncclRecv(buf.data, static_cast<std::size_t>(buf.count), detail::nccl_type(buf.dtype), src, comm_, gpu_->stream()));
    account(0, static_cast<std::int64_t>(buf.bytes()));
    wait("recv");
  }
  /// \brief send and recv enqueued on the device stream; the Work completes when the stream
  /// reaches them. NCCL pairs a send with the peer's receive in issue order (tag 0 only).
  Work isend(const Buffer& buf, int dst, int tag) {
    device_only(buf, buf, "isend");
    usable("send");
    check_rank(dst, "send destination");
    EPL_CHECK(tag == 0, "send over NCCL: tag ", tag, " given; NCCL orders messages per peer and has no tags, use 0");
    EPL_NCCL_CHECK(ncclSend(buf.data, static_cast<std::size_t>(buf.count), detail::nccl_type(buf.dtype), dst, comm_, gpu_->stream()));
    account(static_cast<std::int64_t>(buf.bytes()), 0);
    return completion();
  }
  Work irecv(const Buffer& buf, int src, int tag) {
    device_only(buf, buf, "irecv");
    usable("recv");
    check_rank(src, "recv source");
    EPL_CHECK(tag == 0, "recv over NCCL: tag ", tag, " given; NCCL orders messages per peer and has no tags, use 0");
    EPL_NCCL_CHECK(ncclRecv(buf.data, static_cast<std::size_t>(buf.count), detail::nccl_type(buf.dtype), src, comm_, gpu_->stream()));
    account(0, static_cast<std::int64_t>(buf.bytes()));
    return completion();
  }
  /// Per-destination send and per-source receive counts, as grouped point-to-point transfers
  /// (NCCL cannot exchange the counts, so each side's must agree; the thread and MPI backends
  /// check that, NCCL fails or hangs until the timeout on a mismatch).
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                    const std::vector<std::int64_t>& recv_counts) {
    device_only(in, out, "all_to_all_v");
    usable("all_to_all");
    detail::check_all_to_all_counts(in, send_counts, out, recv_counts, size_, name_);
    std::int64_t so = 0, ro = 0, sent = 0, received = 0;
    EPL_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (send_counts[q] > 0)
        EPL_NCCL_CHECK(ncclSend(in.byte_ptr(so), static_cast<std::size_t>(send_counts[q]), detail::nccl_type(in.dtype), q, comm_, gpu_->stream()));
      if (recv_counts[q] > 0)
        EPL_NCCL_CHECK(ncclRecv(out.byte_ptr(ro), static_cast<std::size_t>(recv_counts[q]), detail::nccl_type(out.dtype), q, comm_, gpu_->stream()));
      so += send_counts[q];
      ro += recv_counts[q];
      if (q != rank_) {
        sent += send_counts[q];
        received += recv_counts[q];
      }
    }
    EPL_NCCL_CHECK(ncclGroupEnd());
    account(sent * static_cast<std::int64_t>(size_of(in.dtype)), received * static_cast<std::int64_t>(size_of(out.dtype)));
    wait("all_to_all");
  }
  /// Equal blocks of count / size elements.
  void all_to_all(const Buffer& in, const Buffer& out) {
    auto counts = detail::equal_blocks(in, out, size_, name_);
    all_to_all_v(in, counts, out, counts);
  }
  void barrier() {
    if (!one_.defined()) one_ = gpu_->zeros({1}, DType::kF32, MemoryCategory::kCommunication);
    all_reduce(one_, ReduceOp::kSum);
  }
  /// \brief The sub-communicator of the ranks with the same color (ncclCommSplit).
  NcclCommunicator split(int color, int key) {
    usable("split");
    EPL_CHECK(color >= 0, "split: color ", color, " must be non-negative");
    ncclComm_t sub = nullptr;
    EPL_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    int r = 0, n = 0;
    EPL_NCCL_CHECK(ncclCommUserRank(sub, &r));
    EPL_NCCL_CHECK(ncclCommCount(sub, &n));
    return NcclCommunicator(gpu_, r, n, opt_, name_ + "/" + std::to_string(color), sub);
  }
  /// \brief Enqueues the all_reduce on the device stream and returns at once; the Work
  /// completes when the stream reaches it.
  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    device_only(in, out, "all_reduce_async");
    enqueue_all_reduce(in, out, op);
    return completion();
  }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    device_only(in, out, "reduce_scatter_async");
    enqueue_reduce_scatter(in, out, op);
    return completion();
  }
  Work all_gather_async(const Buffer& in, const Buffer& out) {
    device_only(in, out, "all_gather_async");
    enqueue_all_gather(in, out);
    return completion();
  }

 private:
  // Runs `enqueue` on device buffers and waits: host buffers are copied to device memory first
  // (in, then out unless it is in), and out is copied back.
  template <class Enqueue>
  void staged(const Buffer& in, const Buffer& out, Enqueue&& enqueue, const char* op) {
    if (in.space == MemorySpace::kDevice && out.space == MemorySpace::kDevice) {
      enqueue(in, out);
      wait(op);
      return;
    }
    auto on_device = [&](const Buffer& b) {
      Tensor t = gpu_->empty({std::max<std::int64_t>(b.count, 1)}, b.dtype, MemoryCategory::kCommunication);
      if (b.count > 0) gpu_->copy_bytes(t.raw(), b.data, b.bytes());
      return t;
    };
    const Tensor di = in.space == MemorySpace::kHost ? on_device(in) : Tensor{};
    const Tensor dout = out.data == in.data ? di : out.space == MemorySpace::kHost ? on_device(out) : Tensor{};
    const Buffer i = di.defined() ? Buffer(di.raw(), in.count, in.dtype, MemorySpace::kDevice) : in;
    const Buffer o = dout.defined() ? Buffer(dout.raw(), out.count, out.dtype, MemorySpace::kDevice) : out;
    enqueue(i, o);
    wait(op);
    if (out.space == MemorySpace::kHost && out.count > 0) {
      gpu_->copy_bytes(out.data, o.data, out.bytes());
      gpu_->synchronize();
    }
  }
  void device_only(const Buffer& a, const Buffer& b, const char* op) const {
    EPL_CHECK((a.count == 0 || a.space == MemorySpace::kDevice) && (b.count == 0 || b.space == MemorySpace::kDevice), op,
              " over NCCL on group '", name_, "': a buffer in host memory; this operation moves device memory only (copy it to the "
              "GPU first, or use the blocking collective, which stages host buffers)");
  }
  // A Work that completes when the device stream reaches this point.
  Work completion() {
    auto state = std::make_shared<Work::State>();
    auto* keep = new std::shared_ptr<Work::State>(state);
    EPL_CUDA_CHECK(cudaLaunchHostFunc(gpu_->stream(), [](void* p) {
      auto* s = static_cast<std::shared_ptr<Work::State>*>(p);
      (*s)->finish(nullptr);
      delete s;
    }, keep));
    return Work(state);
  }
  void usable(const char* op) const {
    EPL_CHECK(comm_ != nullptr, op, " over NCCL on group '", name_, "' at rank ", rank_, " not started: the communicator was ",
              cancelled_.empty() ? "aborted after a failure" : "cancelled: " + cancelled_);
  }
  void enqueue_reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
    usable("reduce_scatter");
    EPL_CHECK(out.count * size_ == in.count, "reduce_scatter over NCCL needs equal shares: ", in.count, " elements for ", size_,
              " ranks of ", out.count);
    EPL_NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<std::size_t>(out.count), detail::nccl_type(in.dtype),
                                     detail::nccl_op(op), comm_, gpu_->stream()));
    account(static_cast<std::int64_t>(in.bytes() - out.bytes()), (size_ - 1) * static_cast<std::int64_t>(out.bytes()));
  }
  void enqueue_all_gather(const Buffer& in, const Buffer& out) {
    usable("all_gather");
    EPL_CHECK(in.count * size_ == out.count, "all_gather over NCCL needs equal sizes: ", out.count, " elements for ", size_,
              " ranks of ", in.count);
    EPL_NCCL_CHECK(ncclAllGather(in.data, out.data, static_cast<std::size_t>(in.count), detail::nccl_type(in.dtype), comm_, gpu_->stream()));
    account((size_ - 1) * static_cast<std::int64_t>(in.bytes()), static_cast<std::int64_t>(out.bytes() - in.bytes()));
  }
  NcclCommunicator(const device::Cuda* gpu, int rank, int size, CommOptions opt, std::string name, ncclComm_t comm)
      : gpu_(gpu), rank_(rank), size_(size), opt_(opt), name_(std::move(name)), comm_(comm) {}

  void enqueue_all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    usable("all_reduce");
    EPL_CHECK(in.count == out.count && in.dtype == out.dtype, "all_reduce: input ", in.count, " ", name_of(in.dtype),
              " and output ", out.count, " ", name_of(out.dtype), " differ");
    EPL_NCCL_CHECK(ncclAllReduce(in.data, out.data, static_cast<std::size_t>(in.count), detail::nccl_type(in.dtype),
                                 detail::nccl_op(op), comm_, gpu_->stream()));
    auto v = 2 * (size_ - 1) * static_cast<std::int64_t>(in.bytes()) / size_;
    account(v, v);
  }
  // Waits for the stream; past the timeout, or on an asynchronous NCCL error, aborts the
  // communicator (so no rank hangs in it) and fails.
  void wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    while (true) {
      cudaError_t q = cudaStreamQuery(gpu_->stream());
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) EPL_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      EPL_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess || std::chrono::steady_clock::now() >= deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        EPL_FAIL(what, " over NCCL on group '", name_, "' at rank ", rank_,
                 async != ncclSuccess ? std::string(" failed: ") + ncclGetErrorString(async)
                                      : " timed out after " + std::to_string(opt_.timeout.count()) +
                                            " ms (a rank died, hangs, or called a different collective); the communicator was aborted");
      }
      std::this_thread::yield();
    }
  }
  void account(std::int64_t sent, std::int64_t received) {
    stats_.bytes_sent += sent;
    stats_.bytes_received += received;
    ++stats_.operations;
  }
  void check_rank(int r, const char* what) const {
    EPL_CHECK(r >= 0 && r < size_, what, " ", r, " is not a rank of group '", name_, "' (size ", size_, ")");
  }

  const device::Cuda* gpu_;
  int rank_, size_;
  CommOptions opt_;
  std::string name_;
  ncclComm_t comm_ = nullptr;
  CommStats stats_;
  Tensor one_;
  std::string cancelled_;
};

/// NCCL moves device memory.
template <> struct space_of<NcclCommunicator> : std::integral_constant<MemorySpace, MemorySpace::kDevice> {};
static_assert(communicator<NcclCommunicator>);

}  // namespace comm
}  // namespace v0
}  // namespace epl
