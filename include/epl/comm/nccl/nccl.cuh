#pragma once
/// \file
/// \brief comm::NcclCommunicator — GPU ranks over NCCL, one rank per GPU. Ranks find each
/// other through a Store that carries NCCL's unique id (and each rank's GPU, so that two ranks
/// on one GPU are refused by name before NCCL's "Duplicate GPU"). Buffers are device memory.
///
/// Operations run on a communication stream of the communicator's own, each ordered after the
/// work the device's compute stream had queued when it was issued (an event), so an asynchronous
/// all_reduce of one bucket runs beside the backward of the next; blocking calls wait for the
/// communication stream with a timeout (past it the communicator is aborted and an epl::Error
/// names the operation).
///
/// Point-to-point: NCCL has no tags, and a send blocks its stream until the peer posts the
/// receive. A pipeline therefore uses no tags (tag 0 on a channel of its own per direction of
/// travel, activations and gradients, each a communicator of its own; every receive checks the
/// header of what arrived), and a send is not issued alone: isend queues it, and the queued sends
/// go to NCCL in one group with this rank's next receive (or when waited for, or before the
/// next collective), so a pipeline step's sends and receive progress together, as NCCL advises.
#include <nccl.h>

#include <algorithm>
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
    refuse_shared_gpu(s);
    EPL_CUDA_CHECK(cudaSetDevice(gpu.id().index));
    EPL_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
    make_stream();
  }
  NcclCommunicator(NcclCommunicator&& o) noexcept
      : gpu_(o.gpu_), rank_(o.rank_), size_(o.size_), opt_(o.opt_), name_(std::move(o.name_)), comm_(o.comm_), stats_(o.stats_),
        stream_(o.stream_), pending_(std::move(o.pending_)) {
    o.comm_ = nullptr;
    o.stream_ = nullptr;
  }
  NcclCommunicator& operator=(NcclCommunicator&&) = delete;
  ~NcclCommunicator() {
    if (comm_ && !pending_.empty()) cancel("destroyed with sends never received");
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  /// \brief The stream this communicator's operations run on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

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
    for (auto& p : pending_) p.state->finish(std::make_exception_ptr(Error("send over NCCL on group '" + name_ + "' cancelled: " + reason)));
    pending_.clear();
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
                                   stream_));
      account(rank_ == root ? (size_ - 1) * static_cast<std::int64_t>(buf.bytes()) : 0, rank_ == root ? 0 : static_cast<std::int64_t>(buf.bytes()));
    }, "broadcast");
  }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) {
    usable("reduce");
    check_rank(root, "reduce root");
    staged(in, out, [&](const Buffer& i, const Buffer& o) {
      EPL_NCCL_CHECK(ncclReduce(i.data, o.data, static_cast<std::size_t>(i.count), detail::nccl_type(i.dtype), detail::nccl_op(op),
                                root, comm_, stream_));
      account(static_cast<std::int64_t>(i.bytes()), 0);
    }, "reduce");
  }
  /// Tags are not NCCL's: messages between two ranks arrive in the order sent; tag must be 0
  /// (a pipeline's channels are communicators of their own). Returns once the peer received it.
  void send(const Buffer& buf, int dst, int tag) { isend(buf, dst, tag).wait(); }
  void recv(const Buffer& buf, int src, int tag) {
    irecv(buf, src, tag);
    wait("recv");
  }
  /// \brief Queues the send: it goes to NCCL with this rank's next receive, in one group (or when
  /// the Work is waited for or tested, or before the next collective). buf belongs to the send
  /// until its Work completes.
  Work isend(const Buffer& buf, int dst, int tag) {
    device_only(buf, buf, "isend");
    usable("send");
    check_rank(dst, "send destination");
    check_tag(tag, "send");
    auto state = std::make_shared<Work::State>();
    state->start();
    pending_.push_back({buf, dst, state, ready()});
    account(static_cast<std::int64_t>(buf.bytes()), 0);
    return Work::deferred([this, state] {
      flush(nullptr);
      EPL_CHECK(!queued(state), "send over NCCL on group '", name_, "' at rank ", rank_, " to itself waited for before its receive: NCCL "
                "moves a rank's message to itself together with the receive; post the receive (irecv) before waiting for the send");
      wait_for(state, "send");
    }, [this, state] {
      flush(nullptr);
      std::lock_guard lock(state->mutex);
      return state->done;
    });
  }
  /// \brief The receive, with the sends queued before it in one NCCL group, on the communication
  /// stream; the Work completes when the stream reaches it (buf may be read after wait()).
  Work irecv(const Buffer& buf, int src, int tag) {
    device_only(buf, buf, "irecv");
    usable("recv");
    check_rank(src, "recv source");
    check_tag(tag, "recv");
    flush(&buf, src);
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
    start();
    EPL_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (send_counts[q] > 0)
        EPL_NCCL_CHECK(ncclSend(in.byte_ptr(so), static_cast<std::size_t>(send_counts[q]), detail::nccl_type(in.dtype), q, comm_, stream_));
      if (recv_counts[q] > 0)
        EPL_NCCL_CHECK(ncclRecv(out.byte_ptr(ro), static_cast<std::size_t>(recv_counts[q]), detail::nccl_type(out.dtype), q, comm_, stream_));
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
    flush(nullptr);
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
    start();
    enqueue_all_reduce(in, out, op);
    return completion();
  }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    device_only(in, out, "reduce_scatter_async");
    start();
    enqueue_reduce_scatter(in, out, op);
    return completion();
  }
  Work all_gather_async(const Buffer& in, const Buffer& out) {
    device_only(in, out, "all_gather_async");
    start();
    enqueue_all_gather(in, out);
    return completion();
  }

 private:
  // Runs `enqueue` on device buffers and waits: host buffers are copied to device memory first
  // (in, then out unless it is in), and out is copied back.
  template <class Enqueue>
  void staged(const Buffer& in, const Buffer& out, Enqueue&& enqueue, const char* op) {
    if (in.space == MemorySpace::kDevice && out.space == MemorySpace::kDevice) {
      start();
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
    start();  // after the staging copies (on the compute stream)
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
  // A Work that completes when the communication stream reaches this point.
  Work completion() {
    auto state = std::make_shared<Work::State>();
    state->start();
    signal(state);
    return Work::deferred([this, state] { wait_for(state, "the operation"); }, [state] {
      std::lock_guard lock(state->mutex);
      return state->done;
    });
  }
  // Completes `state` when the communication stream reaches this point.
  void signal(const std::shared_ptr<Work::State>& state) {
    auto* keep = new std::shared_ptr<Work::State>(state);
    EPL_CUDA_CHECK(cudaLaunchHostFunc(stream_, [](void* p) {
      auto* s = static_cast<std::shared_ptr<Work::State>*>(p);
      (*s)->finish(nullptr);
      delete s;
    }, keep));
  }
  // Waits for a Work's state with the communicator's timeout (aborting it past that), then
  // rethrows the state's error.
  void wait_for(const std::shared_ptr<Work::State>& state, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    while (true) {
      {
        std::lock_guard lock(state->mutex);
        if (state->done) {
          if (state->error) std::rethrow_exception(state->error);
          return;
        }
      }
      check_progress(what, deadline);
      std::this_thread::yield();
    }
  }
  // The communication stream waits for the work queued on the compute stream so far.
  void after_compute() { device::detail::wait_for_mark(stream_, ready()); }
  [[nodiscard]] std::shared_ptr<void> ready() const { return device::detail::mark_of(gpu_->stream()); }
  // Before a collective: the queued sends go first, and the stream waits for the compute stream.
  void start() {
    flush(nullptr);
    after_compute();
  }
  // The queued sends (and a receive, when given) in one NCCL group on the communication stream.
  // NCCL pairs a send to this rank itself with its receive inside one group: such a send waits
  // for the receive from this rank (the oldest for the oldest), the others go now.
  void flush(const Buffer* recv_into, int src = 0) {
    std::vector<PendingSend> go, wait;
    bool self_matched = false;
    for (auto& p : pending_) {
      const bool self = p.dst == rank_;
      if (!self || (recv_into && src == rank_ && !self_matched)) {
        self_matched |= self;
        go.push_back(std::move(p));
      } else {
        wait.push_back(std::move(p));
      }
    }
    pending_ = std::move(wait);
    if (go.empty() && !recv_into) return;
    usable(recv_into ? "recv" : "send");
    if (recv_into) after_compute();  // the receive's buffer is free of the compute stream's earlier work
    for (const auto& p : go) device::detail::wait_for_mark(stream_, p.ready);
    EPL_NCCL_CHECK(ncclGroupStart());
    for (const auto& p : go)
      EPL_NCCL_CHECK(ncclSend(p.buf.data, static_cast<std::size_t>(p.buf.count), detail::nccl_type(p.buf.dtype), p.dst, comm_, stream_));
    if (recv_into)
      EPL_NCCL_CHECK(ncclRecv(recv_into->data, static_cast<std::size_t>(recv_into->count), detail::nccl_type(recv_into->dtype), src, comm_,
                              stream_));
    EPL_NCCL_CHECK(ncclGroupEnd());
    for (const auto& p : go) signal(p.state);
  }
  // Whether the send of `state` still waits in the queue (a send to itself before its receive).
  [[nodiscard]] bool queued(const std::shared_ptr<Work::State>& state) const {
    return std::any_of(pending_.begin(), pending_.end(), [&](const PendingSend& p) { return p.state == state; });
  }
  void check_tag(int tag, const char* op) const {
    EPL_CHECK(tag == 0, op, " over NCCL on group '", name_, "': tag ", tag, " given; NCCL has no tags and orders the messages "
              "between two ranks as sent: use tag 0, and a communicator of its own (split) for each ordered channel");
  }
  // Collects each rank's GPU through the store: two ranks on one GPU are refused by name (NCCL
  // would fail with "Duplicate GPU detected" deep in its initialisation).
  template <store S>
  void refuse_shared_gpu(S& s) {
    char bus[32] = {};
    EPL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, gpu_->id().index));
    const std::string mine(bus), prefix = "nccl/" + name_ + "/gpu/";
    s.set(prefix + std::to_string(rank_), std::vector<char>(mine.begin(), mine.end()));
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const auto theirs = s.get(prefix + std::to_string(q));
      EPL_CHECK(std::string(theirs.begin(), theirs.end()) != mine, "NcclCommunicator '", name_, "': ranks ", std::min(q, rank_), " and ",
                std::max(q, rank_), " are both on the GPU at PCI ", mine, " (", gpu_->id().str(), "); NCCL needs one GPU per rank. "
                "Ranks that share a GPU train as thread ranks (comm::run_threads), each with its own device::Cuda(index, slot)");
    }
  }
  void make_stream() {
    EPL_CUDA_CHECK(cudaSetDevice(gpu_->id().index));
    EPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
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
                                     detail::nccl_op(op), comm_, stream_));
    account(static_cast<std::int64_t>(in.bytes() - out.bytes()), (size_ - 1) * static_cast<std::int64_t>(out.bytes()));
  }
  void enqueue_all_gather(const Buffer& in, const Buffer& out) {
    usable("all_gather");
    EPL_CHECK(in.count * size_ == out.count, "all_gather over NCCL needs equal sizes: ", out.count, " elements for ", size_,
              " ranks of ", in.count);
    EPL_NCCL_CHECK(ncclAllGather(in.data, out.data, static_cast<std::size_t>(in.count), detail::nccl_type(in.dtype), comm_, stream_));
    account((size_ - 1) * static_cast<std::int64_t>(in.bytes()), static_cast<std::int64_t>(out.bytes() - in.bytes()));
  }
  NcclCommunicator(const device::Cuda* gpu, int rank, int size, CommOptions opt, std::string name, ncclComm_t comm)
      : gpu_(gpu), rank_(rank), size_(size), opt_(opt), name_(std::move(name)), comm_(comm) {
    make_stream();
  }

  void enqueue_all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    usable("all_reduce");
    EPL_CHECK(in.count == out.count && in.dtype == out.dtype, "all_reduce: input ", in.count, " ", name_of(in.dtype),
              " and output ", out.count, " ", name_of(out.dtype), " differ");
    EPL_NCCL_CHECK(ncclAllReduce(in.data, out.data, static_cast<std::size_t>(in.count), detail::nccl_type(in.dtype),
                                 detail::nccl_op(op), comm_, stream_));
    auto v = 2 * (size_ - 1) * static_cast<std::int64_t>(in.bytes()) / size_;
    account(v, v);
  }
  // Waits for the stream; past the timeout, or on an asynchronous NCCL error, aborts the
  // communicator (so no rank hangs in it) and fails.
  void wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    while (true) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) EPL_CUDA_CHECK(q);
      check_progress(what, deadline);
      std::this_thread::yield();
    }
  }
  // Fails (aborting the communicator) on an asynchronous NCCL error or past the deadline.
  void check_progress(const char* what, std::chrono::steady_clock::time_point deadline) {
    usable(what);
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
  cudaStream_t stream_ = nullptr;  // the communication stream
  struct PendingSend {
    Buffer buf;
    int dst;
    std::shared_ptr<Work::State> state;
    std::shared_ptr<void> ready;  // the compute stream's work before the send was issued
  };
  std::vector<PendingSend> pending_;  // sends not yet given to NCCL (flush)
};

/// NCCL moves device memory.
template <> struct space_of<NcclCommunicator> : std::integral_constant<MemorySpace, MemorySpace::kDevice> {};
static_assert(communicator<NcclCommunicator>);

}  // namespace comm
}  // namespace v0
}  // namespace epl
