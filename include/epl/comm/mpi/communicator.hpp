#pragma once
/// \file
/// \brief comm::MpiCommunicator — ranks as MPI processes (OpenMPI), on one machine or many
/// (part of epl::mpi).
///
/// Every collective first exchanges a small header with each peer (operation, sequence
/// number, count, dtype, root, reduction, and whether the rank's own arguments are wrong) by
/// point-to-point messages on a private duplicate of the communicator. That detects ranks that
/// disagree, keeps a rank with bad arguments in step with its peers (all of them fail), and
/// when the exchange times out, the peers whose header never came are exactly the ranks that
/// did not arrive. A small all_reduce is that exchange alone: each rank sends its data to every
/// peer, the header in the tags and lengths of its messages, and every rank reduces the n
/// contributions in rank order. The check then costs no message of its own, and every rank gets
/// the same bits. The data travels in pieces of kPieceBytes, within the eager size of MPI's
/// transports (vader's 4 KiB includes its own header), so that no message waits for a
/// rendezvous. Medium all_reduces are MPI_Allreduce after the header exchange; large ones run
/// a ring (reduce-scatter then all-gather) through one persistent staging buffer: OpenMPI's own
/// all_reduce maps and page-faults fresh temporary memory on every call.
///
/// Failure: a timeout marks the whole process failed (detail::MpiFailure), and a cancelled
/// handle (cancel(), or destroyed with work outstanding) is failed too; either way every later
/// or queued operation fails at once, and one waiting for peers stops within a poll, instead of
/// each waiting one more timeout. The job then ends through epl::launch (MPI_Abort).
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "epl/comm/any_communicator.hpp"
#include "epl/comm/async_queue.hpp"
#include "epl/comm/mpi/types.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief One process's handle on an MPI communicator (the world, or a split of it).
class MpiCommunicator {
 public:
  /// \brief A handle on a duplicate of comm (MPI_COMM_WORLD by default).
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, CommOptions opt = {}, std::string name = "world")
      : st_(std::make_unique<State>()) {
    st_->opt = opt;
    st_->name = std::move(name);
    EPL_MPI_CHECK(MPI_Comm_dup(comm, &st_->data));
    EPL_MPI_CHECK(MPI_Comm_dup(comm, &st_->control));
    // errors come back as codes, so EPL_MPI_CHECK turns them into epl::Errors naming the call
    MPI_Comm_set_errhandler(st_->data, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(st_->control, MPI_ERRORS_RETURN);
    MPI_Comm_rank(st_->data, &st_->rank);
    MPI_Comm_size(st_->data, &st_->size);
    // each member's rank in MPI_COMM_WORLD, for messages: a sub-group's numbers are its own
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(st_->data, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> members(static_cast<std::size_t>(st_->size));
    for (int r = 0; r < st_->size; ++r) members[static_cast<std::size_t>(r)] = r;
    st_->world_ranks.assign(members.size(), MPI_UNDEFINED);
    MPI_Group_translate_ranks(mine, st_->size, members.data(), world, st_->world_ranks.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(st_->control, MPI_TAG_UB, &tag_ub, &found);
    st_->fuses = found && *tag_ub >= kLargestTag;
  }
  MpiCommunicator(MpiCommunicator&&) noexcept = default;
  MpiCommunicator& operator=(MpiCommunicator&&) noexcept = default;
  /// A handle destroyed with asynchronous work outstanding (its rank is unwinding from an
  /// exception, typically) cancels it rather than wait for peers on buffers that are going away.
  ~MpiCommunicator() {
    if (st_ && st_->queue.busy()) cancel("its communicator was destroyed");
  }

  /// \brief Ends this handle's use: asynchronous operations not yet started fail without running,
  /// one waiting for peers stops at its next poll, and later operations fail at once.
  void cancel(const std::string& reason) noexcept {
    st_->cancelled.store(true);
    st_->queue.cancel_pending(reason);
  }

  [[nodiscard]] int rank() const noexcept { return st_->rank; }
  [[nodiscard]] int size() const noexcept { return st_->size; }
  [[nodiscard]] const std::string& name() const noexcept { return st_->name; }
  [[nodiscard]] CommStats stats() const noexcept { return {st_->sent.load(), st_->received.load(), st_->ops.load()}; }
  [[nodiscard]] MPI_Comm native() const noexcept { return st_->data; }

  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    st_->queue.drain();
    usable("all_reduce");
    const std::string invalid = detail::invalid_arguments([&] {
      EPL_CHECK(in.count == out.count && in.dtype == out.dtype, "input ", in.count, " ", name_of(in.dtype), " and output ",
                out.count, " ", name_of(out.dtype), " differ");
    });
    const int n = size();
    if (n > 1 && invalid.empty() && in.count > 0 && in.bytes() <= fused_capacity()) {
      // the header exchange carries the data: one message to each peer, the sum in rank order
      handshake(Op::kAllReduce, in.count, in.dtype, 0, op, true, in.data);
      const char* self = static_cast<const char*>(in.data);
      if (in.data == out.data && rank() >= 2) {  // out is written before this rank's term is added
        std::memcpy(st_->outbox.data(), in.data, in.bytes());
        self = st_->outbox.data();
      }
      auto term = [&](int q) { return q == rank() ? self : slot(q); };
      detail::combine(out.data, term(0), term(1), out.count, out.dtype, op);
      for (int q = 2; q < n; ++q) detail::reduce_into(out.data, term(q), out.count, out.dtype, op);
      if (op == ReduceOp::kMean) detail::divide(out.data, out.count, out.dtype, n);
      account((n - 1) * static_cast<std::int64_t>(in.bytes()), (n - 1) * static_cast<std::int64_t>(in.bytes()));
      return;
    }
    handshake(Op::kAllReduce, in.count, in.dtype, 0, op, true, nullptr, invalid);
    if (n > 1 && in.bytes() >= kRingBytes) {
      ring_all_reduce(in, out, op);
    } else {
      void* src = in.data == out.data ? MPI_IN_PLACE : in.data;
      if (n > 1) {
        // Every rank arrived and agrees (the handshake): MPI's blocking all-reduce, its fastest
        // (the non-blocking one is up to 2x slower on small buffers), under the watchdog.
        MpiWatchdog::Guard watched("all_reduce", st_->opt.timeout);
        EPL_MPI_CHECK(MPI_Allreduce(src, out.data, static_cast<int>(out.count), detail::mpi_type(out.dtype),
                                    detail::mpi_op(out.dtype, op), st_->data));
      } else if (in.data != out.data) {
        std::memcpy(out.data, in.data, in.bytes());
      }
    }
    if (op == ReduceOp::kMean && n > 1) detail::divide(out.data, out.count, out.dtype, n);
    account(2 * (n - 1) * static_cast<std::int64_t>(in.bytes()) / n, 2 * (n - 1) * static_cast<std::int64_t>(in.bytes()) / n);
  }
  void all_reduce(const Buffer& inout, ReduceOp op) { all_reduce(inout, inout, op); }

  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
    st_->queue.drain();
    usable("reduce_scatter");
    handshake(Op::kReduceScatter, in.count, in.dtype, 0, op, true);
    std::vector<int> counts = gather_counts({out.count});
    std::int64_t total = 0;
    for (int c : counts) total += c;
    EPL_CHECK(total == in.count, "reduce_scatter on group '", name(), "': the outputs hold ", total,
              " elements in all but the input holds ", in.count);
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Ireduce_scatter(in.data, out.data, counts.data(), detail::mpi_type(in.dtype), detail::mpi_op(in.dtype, op), st_->data, &req));
    complete("reduce_scatter", req);
    if (op == ReduceOp::kMean) detail::divide(out.data, out.count, out.dtype, size());
    account(static_cast<std::int64_t>(in.bytes() - out.bytes()), (size() - 1) * static_cast<std::int64_t>(out.bytes()));
  }

  void all_gather(const Buffer& in, const Buffer& out) {
    st_->queue.drain();
    usable("all_gather");
    handshake(Op::kAllGather, 0, in.dtype, 0, ReduceOp::kSum, false);
    // every rank's input and output sizes, so that every rank judges every output alike
    const std::vector<int> sizes = gather_counts({in.count, out.count});
    std::vector<int> counts(static_cast<std::size_t>(size())), displs(counts.size());
    std::int64_t total = 0;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      counts[q] = sizes[2 * q];
      displs[q] = static_cast<int>(total);
      total += counts[q];
    }
    for (int q = 0; q < size(); ++q)
      EPL_CHECK(total == sizes[2 * static_cast<std::size_t>(q) + 1], "all_gather on group '", name(), "': the inputs hold ", total,
                " elements, rank ", q, "'s output ", sizes[2 * static_cast<std::size_t>(q) + 1]);
    MPI_Request req;
    // in place (a ZeRO unit: this rank's slice inside the whole), which MPI spells MPI_IN_PLACE
    const bool in_place = in.data == out.byte_ptr(displs[static_cast<std::size_t>(rank())]);
    EPL_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : in.data, static_cast<int>(in.count), detail::mpi_type(in.dtype), out.data, counts.data(),
                                  displs.data(), detail::mpi_type(out.dtype), st_->data, &req));
    complete("all_gather", req);
    account((size() - 1) * static_cast<std::int64_t>(in.bytes()), static_cast<std::int64_t>(out.bytes() - in.bytes()));
  }

  void broadcast(const Buffer& buf, int root) {
    st_->queue.drain();
    usable("broadcast");
    handshake(Op::kBroadcast, buf.count, buf.dtype, root, ReduceOp::kSum, true, nullptr,
              detail::invalid_arguments([&] { check_rank(root, "broadcast root"); }));
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Ibcast(buf.data, static_cast<int>(buf.count), detail::mpi_type(buf.dtype), root, st_->data, &req));
    complete("broadcast", req);
    if (rank() == root) account((size() - 1) * static_cast<std::int64_t>(buf.bytes()), 0);
    else account(0, static_cast<std::int64_t>(buf.bytes()));
  }

  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) {
    st_->queue.drain();
    usable("reduce");
    handshake(Op::kReduce, in.count, in.dtype, root, op, true, nullptr, detail::invalid_arguments([&] { check_rank(root, "reduce root"); }));
    const bool at_root = rank() == root;
    void* src = at_root && in.data == out.data ? MPI_IN_PLACE : in.data;
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Ireduce(src, at_root ? out.data : nullptr, static_cast<int>(in.count), detail::mpi_type(in.dtype),
                              detail::mpi_op(in.dtype, op), root, st_->data, &req));
    complete("reduce", req);
    if (at_root && op == ReduceOp::kMean) detail::divide(out.data, out.count, out.dtype, size());
    account(static_cast<std::int64_t>(in.bytes()), at_root ? (size() - 1) * static_cast<std::int64_t>(in.bytes()) : 0);
  }

  void all_to_all(const Buffer& in, const Buffer& out) {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(size()), 0);
    const std::string invalid = detail::invalid_arguments([&] { counts = detail::equal_blocks(in, out, size(), name()); });
    all_to_all_checked(in, counts, out, counts, invalid);
  }
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                    const std::vector<std::int64_t>& recv_counts) {
    all_to_all_checked(in, send_counts, out, recv_counts, detail::invalid_arguments([&] {
      detail::check_all_to_all_counts(in, send_counts, out, recv_counts, size(), name());
    }));
  }

  void send(const Buffer& buf, int dst, int tag) {
    st_->queue.drain();
    usable("send");
    check_rank(dst, "send destination");
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Isend(buf.data, static_cast<int>(buf.bytes()), MPI_BYTE, dst, tag, st_->data, &req));
    complete("send", req, dst);
    account(static_cast<std::int64_t>(buf.bytes()), 0);
  }
  void recv(const Buffer& buf, int src, int tag) {
    st_->queue.drain();
    usable("recv");
    check_rank(src, "recv source");
    MPI_Message msg;
    MPI_Status status;
    int found = 0;
    const auto deadline = std::chrono::steady_clock::now() + st_->opt.timeout;
    while (!found) {
      EPL_MPI_CHECK(MPI_Improbe(src, tag, st_->data, &found, &msg, &status));
      if (found) break;
      if (auto why = stopped(); !why.empty()) EPL_FAIL("recv on group '", name(), "' at rank ", rank(), " stopped: ", why);
      if (std::chrono::steady_clock::now() >= deadline)
        fail_timeout(epl::detail::concat("recv on group '", name(), "' at rank ", member(rank()), " timed out after ",
                                         st_->opt.timeout.count(), " ms: rank ", member(src), " did not send a message with tag ", tag));
      std::this_thread::yield();
    }
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    if (bytes != static_cast<int>(buf.bytes())) {
      std::vector<char> discard(static_cast<std::size_t>(bytes));
      MPI_Mrecv(discard.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      EPL_FAIL("recv on group '", name(), "' at rank ", rank(), " from rank ", src, " tag ", tag, ": expected ", buf.bytes(),
               " bytes (", buf.count, " ", name_of(buf.dtype), "), got ", bytes);
    }
    EPL_MPI_CHECK(MPI_Mrecv(buf.data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE));
    account(0, bytes);
  }

  /// \brief Starts a send and returns. The Work completes when MPI is done with buf, which must
  /// stay valid until then: test() checks without waiting, wait() waits with the timeout.
  Work isend(const Buffer& buf, int dst, int tag) {
    st_->queue.drain();
    usable("send");
    check_rank(dst, "send destination");
    auto req = std::make_shared<MPI_Request>();
    EPL_MPI_CHECK(MPI_Isend(buf.data, static_cast<int>(buf.bytes()), MPI_BYTE, dst, tag, st_->data, req.get()));
    account(static_cast<std::int64_t>(buf.bytes()), 0);
    return Work::deferred([this, req, dst] { complete("send", *req, dst); }, [this, req, dst] {
      return poll("send", *req, dst, MPI_STATUS_IGNORE);
    });
  }
  /// \brief Starts a receive into buf and returns. The Work completes, with the size checked,
  /// when the message has arrived: test() checks without waiting, wait() waits with the timeout.
  Work irecv(const Buffer& buf, int src, int tag) {
    st_->queue.drain();
    usable("recv");
    check_rank(src, "recv source");
    auto req = std::make_shared<MPI_Request>();
    auto status = std::make_shared<MPI_Status>();
    EPL_MPI_CHECK(MPI_Irecv(buf.data, static_cast<int>(buf.bytes()), MPI_BYTE, src, tag, st_->data, req.get()));
    auto received = [this, status, buf, src, tag] {
      int bytes = 0;
      MPI_Get_count(status.get(), MPI_BYTE, &bytes);
      EPL_CHECK(bytes == static_cast<int>(buf.bytes()), "recv on group '", name(), "' at rank ", rank(), " from rank ", src, " tag ",
                tag, ": expected ", buf.bytes(), " bytes (", buf.count, " ", name_of(buf.dtype), "), got ", bytes);
      account(0, bytes);
    };
    return Work::deferred([this, req, status, src, received] {
      complete("recv", *req, src, status.get());
      received();
    }, [this, req, status, src, received] {
      if (!poll("recv", *req, src, status.get())) return false;
      received();
      return true;
    });
  }

  void barrier() {
    st_->queue.drain();
    usable("barrier");
    handshake(Op::kBarrier, 0, DType::kF32, 0, ReduceOp::kSum, false);
    ++st_->ops;
  }

  /// \brief The agreement that every rank finished (epl::launch calls it when the training function
  /// returns, before MPI_Finalize): a barrier that names what it is, so that a peer still in a
  /// collective learns that this rank returned early instead of waiting, and that this rank fails
  /// within the timeout instead of finalizing while a peer still needs it (mpirun then hangs or
  /// crashes in its teardown).
  void finish() {
    st_->queue.drain();
    usable("finish");
    handshake(Op::kFinish, 0, DType::kF32, 0, ReduceOp::kSum, false);
    ++st_->ops;
  }

  /// \brief The sub-communicator of the ranks passing the same color, ordered by (key, rank).
  MpiCommunicator split(int color, int key) {
    st_->queue.drain();
    usable("split");
    handshake(Op::kSplit, 0, DType::kF32, 0, ReduceOp::kSum, false, nullptr,
              detail::invalid_arguments([&] { EPL_CHECK(color >= 0, "color ", color, " must be non-negative"); }));
    MPI_Comm sub;
    EPL_MPI_CHECK(MPI_Comm_split(st_->data, color, key, &sub));
    MpiCommunicator c(sub, st_->opt, name() + "/" + std::to_string(color));
    MPI_Comm_free(&sub);
    ++st_->ops;
    return c;
  }

  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return st_->queue.enqueue([this, in, out, op] { all_reduce(in, out, op); });
  }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return st_->queue.enqueue([this, in, out, op] { reduce_scatter(in, out, op); });
  }
  Work all_gather_async(const Buffer& in, const Buffer& out) {
    return st_->queue.enqueue([this, in, out] { all_gather(in, out); });
  }

 private:
  enum class Op : std::int64_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kBarrier, kSplit, kFinish };
  static const char* op_name(std::int64_t op) {
    constexpr const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier", "split",
                                     "finish"};
    return op >= 0 && op < 9 ? names[op] : "?";
  }
  static constexpr std::size_t kRingBytes = 1 << 20;
  // What one rank sends in a fused all_reduce, to all its peers together: a buffer of up to
  // kFusedBytes / (n - 1) bytes rides the header exchange (24 KiB on 2 ranks, 8 KiB on 4).
  // Beyond that MPI_Allreduce's halving algorithms, which move and add less than n whole
  // copies, win (on 2 ranks: 32 KiB fused is 0.92x of MPI_Allreduce, 24 KiB 1.03-1.4x).
  static constexpr std::size_t kFusedBytes = 24 << 10;
  // operation, sequence number, count, dtype, root, reduction, and whether this rank's own
  // arguments are wrong (its peers then fail too, in step, naming it)
  using Header = std::array<std::int64_t, 7>;
  static constexpr std::size_t kHeaderBytes = sizeof(Header);
  static constexpr std::size_t kPieceBytes = 3968;
  // A fused piece's tag: a marker bit, a last-piece bit, the sequence number's low 20 bits, the
  // dtype and the reduction; the pieces' lengths add up to the count. Headers keep kHeaderTag.
  // (The largest tag is 2^28 - 1: MPI promises only 32767, OpenMPI gives 2^31 - 1, MPICH 2^28 - 1 or more.)
  static constexpr int kFusedTag = 1 << 27, kLastPiece = 1 << 26, kSeqBits = 20;
  static constexpr int kLargestTag = kFusedTag | kLastPiece | ((1 << (kSeqBits + 6)) - 1);
  static int fused_tag(const Header& h) {
    return kFusedTag | static_cast<int>((h[1] & ((1 << kSeqBits) - 1)) << 6 | h[3] << 2 | h[5]);
  }
  static constexpr std::int64_t kChunkBytes = 1 << 20;
  static constexpr int kHeaderTag = 7301, kRingTag = 7302;

  struct State {
    MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
    int rank = 0, size = 1;
    std::vector<int> world_ranks;  // each member's rank in MPI_COMM_WORLD
    std::string name;
    CommOptions opt;
    std::int64_t seq = 0;
    std::vector<char> staging;
    // The handshake's messages, kept between calls (no allocation per collective): each peer's
    // header or fused data lands in its slot of the inbox; the outbox holds this rank's header.
    std::vector<char> inbox, outbox;
    bool fuses = false;  // MPI's tags are wide enough to carry a header
    std::vector<MPI_Request> receives, sends;  // a receive per peer, reposted for each piece
    std::vector<int> tags, lengths, completed;     // per peer: its first message's tag, bytes so far
    std::vector<MPI_Status> statuses;
    std::atomic<std::int64_t> sent{0}, received{0}, ops{0};
    std::atomic<bool> cancelled{false};
    detail::AsyncQueue queue;
    ~State() {
      queue.stop();
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) {
        if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
        if (control != MPI_COMM_NULL) MPI_Comm_free(&control);
      }
    }
  };

  // A member as messages name it: its world rank beside its rank in this group, when they differ.
  [[nodiscard]] std::string member(int r) const {
    const auto& w = st_->world_ranks;
    return detail::member_text(r, r >= 0 && r < static_cast<int>(w.size()) && w[static_cast<std::size_t>(r)] != MPI_UNDEFINED
                                      ? w[static_cast<std::size_t>(r)] : r);
  }

  // The bytes of data a fused all_reduce carries per message: the same on every rank of the
  // group (it depends on the size alone), so every receive slot fits every peer's message.
  [[nodiscard]] std::size_t fused_capacity() const {
    return st_->fuses && size() > 1 ? kFusedBytes / static_cast<std::size_t>(size() - 1) / 64 * 64 : 0;
  }
  [[nodiscard]] std::size_t slot_bytes() const { return std::max(kHeaderBytes, fused_capacity()); }
  // The handshake's per-peer state is indexed by peer i = 0 .. n - 2, every rank but this one.
  [[nodiscard]] int peer_of(std::size_t i) const { return static_cast<int>(i) < rank() ? static_cast<int>(i) : static_cast<int>(i) + 1; }
  // Where rank q's message lands (q is not this rank).
  [[nodiscard]] char* slot(int q) const {
    return st_->inbox.data() + static_cast<std::size_t>(q < rank() ? q : q - 1) * slot_bytes();
  }

  // Header exchange with every peer; names the ranks that disagree or never arrive. With
  // payload (a fused all_reduce of count elements) the data is the message, in pieces, and the
  // header their tags; a peer's fused data is then in slot(peer). A peer's pieces are received
  // one after another until its last, whatever this rank sent, so that a disagreement leaves no
  // message behind to be mistaken for the next collective's.
  // invalid: what this rank's own arguments get wrong (detail::invalid_arguments); the exchange
  // still runs, so that every rank fails in step, and then this rank throws it.
  void handshake(Op op, std::int64_t count, DType t, int root, ReduceOp reduce, bool same_count, const void* payload = nullptr,
                 const std::string& invalid = {}) {
    const int n = size();
    const Header mine{static_cast<std::int64_t>(op), st_->seq++, count, static_cast<std::int64_t>(t), root,
                      static_cast<std::int64_t>(reduce), invalid.empty() ? 0 : 1};
    const char* what = op_name(mine[0]);
    if (n == 1) {
      EPL_CHECK(invalid.empty(), what, " on group '", name(), "': ", invalid);
      return;
    }
    const auto peers = static_cast<std::size_t>(n - 1);
    auto& recvs = st_->receives;
    auto& sends = st_->sends;
    if (st_->inbox.size() != slot_bytes() * peers) {  // once: no allocation per collective
      st_->inbox.resize(slot_bytes() * peers);
      st_->outbox.resize(slot_bytes());
      recvs.resize(peers);
      st_->tags.resize(peers);
      st_->lengths.resize(peers);
      st_->completed.resize(peers);
      st_->statuses.resize(peers);
    }
    for (std::size_t i = 0; i < peers; ++i) {
      st_->tags[i] = -1;
      st_->lengths[i] = 0;
      MPI_Irecv(slot(peer_of(i)), static_cast<int>(slot_bytes()), MPI_BYTE, peer_of(i), MPI_ANY_TAG, st_->control, &recvs[i]);
    }
    sends.clear();
    if (payload) {
      const std::size_t bytes = static_cast<std::size_t>(count) * size_of(t);
      for (std::size_t i = 0; i < peers; ++i)
        for (std::size_t at = 0; at < bytes; at += kPieceBytes) {
          const std::size_t piece = std::min(kPieceBytes, bytes - at);
          sends.emplace_back();
          MPI_Isend(static_cast<const char*>(payload) + at, static_cast<int>(piece), MPI_BYTE, peer_of(i),
                    fused_tag(mine) | (at + piece == bytes ? kLastPiece : 0), st_->control, &sends.back());
        }
    } else {
      std::memcpy(st_->outbox.data(), mine.data(), kHeaderBytes);
      for (std::size_t i = 0; i < peers; ++i) {
        sends.emplace_back();
        MPI_Isend(st_->outbox.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer_of(i), kHeaderTag, st_->control, &sends.back());
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + st_->opt.timeout;
    std::size_t arriving = peers;
    int sent = 0, polls = 0;
    auto abandon = [&] {  // leave no request behind for MPI_Finalize to wait on
      for (auto* reqs : {&recvs, &sends})
        for (auto& req : *reqs)
          if (req != MPI_REQUEST_NULL) {
            MPI_Cancel(&req);
            MPI_Request_free(&req);
          }
    };
    while (arriving > 0 || !sent) {
      int outcount = 0;
      if (arriving > 0) {
        EPL_MPI_CHECK(MPI_Testsome(static_cast<int>(peers), recvs.data(), &outcount, st_->completed.data(), st_->statuses.data()));
        for (int k = 0; k < outcount; ++k) {
          const auto i = static_cast<std::size_t>(st_->completed[static_cast<std::size_t>(k)]);
          const MPI_Status& status = st_->statuses[static_cast<std::size_t>(k)];
          int length = 0;
          MPI_Get_count(&status, MPI_BYTE, &length);
          if (st_->tags[i] < 0) st_->tags[i] = status.MPI_TAG;
          st_->lengths[i] += length;
          const bool more = (status.MPI_TAG & kFusedTag) && !(status.MPI_TAG & kLastPiece);  // kHeaderTag has neither bit
          if (!more) {
            --arriving;
          } else {
            EPL_CHECK(st_->lengths[i] < static_cast<int>(slot_bytes()), what, " on group '", name(), "' at rank ", rank(), ": rank ",
                      peer_of(i), " sent more pieces than a fused all_reduce holds (ranks running different builds of epl?)");
            MPI_Irecv(slot(peer_of(i)) + st_->lengths[i], static_cast<int>(slot_bytes()) - st_->lengths[i], MPI_BYTE, peer_of(i), MPI_ANY_TAG,
                      st_->control, &recvs[i]);
          }
        }
      }
      if (arriving == 0) EPL_MPI_CHECK(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &sent, MPI_STATUSES_IGNORE));
      if (arriving == 0 && sent) break;
      if (auto why = stopped(); !why.empty()) {
        abandon();
        EPL_FAIL(what, " on group '", name(), "' at rank ", rank(), " stopped: ", why);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        for (std::size_t i = 0; i < peers; ++i)
          if (recvs[i] != MPI_REQUEST_NULL) missing += (missing.empty() ? "" : ", ") + member(peer_of(i));
        abandon();
        fail_timeout(epl::detail::concat(what, " on group '", name(), "' (size ", n, ") timed out after ", st_->opt.timeout.count(),
                                    " ms at rank ", member(rank()), ": ranks ", missing,
                                    " did not arrive (a rank died, hangs, or called a different collective; the timeout is the key "
                                    "communication.timeout)"));
      }
      if (outcount == 0 && ++polls > 200) std::this_thread::yield();  // peers on their own cores answer within microseconds
    }
    EPL_CHECK(invalid.empty(), what, " on group '", name(), "': ", invalid);
    for (std::size_t i = 0; i < peers; ++i) {
      const int q = peer_of(i);
      const auto h = header_of(i, mine[1]);
      EPL_CHECK(h[6] == 0 || h[0] != mine[0] || h[1] != mine[1], what, " on group '", name(), "' at rank ", rank(), ": rank ", q,
                "'s arguments are wrong (its own error says how)");
      const auto finished = static_cast<std::int64_t>(Op::kFinish);
      EPL_CHECK(h[0] != finished || mine[0] == finished, what, " (operation #", mine[1], ") on group '", name(), "' at rank ", rank(),
                ": rank ", q, " has returned from its training function (after ", h[1], " operations); a rank skipped a step or returned "
                "early: every rank must run the same steps");
      EPL_CHECK(h[0] == mine[0] || mine[0] != finished, "rank ", rank(), " returned from its training function (after ", mine[1],
                " operations) while rank ", q, " called ", op_name(h[0]), " (operation #", h[1], "): a rank skipped a step or returned "
                "early; every rank must run the same steps");
      EPL_CHECK(h[0] == mine[0] && h[1] == mine[1], what, " on group '", name(), "' at rank ", rank(), ": rank ", q, " called ",
                op_name(h[0]), " (operation #", h[1], ") while this rank called ", what, " (operation #", mine[1],
                "); every rank must issue the same collectives in the same order");
      EPL_CHECK(h[3] == mine[3] && h[4] == mine[4] && h[5] == mine[5], what, " on group '", name(), "': rank ", q, " passes ",
                name_of(static_cast<DType>(h[3])), " root ", h[4], " op ", name_of(static_cast<ReduceOp>(h[5])), ", rank ", rank(),
                " passes ", name_of(t), " root ", root, " op ", name_of(reduce));
      EPL_CHECK(!same_count || h[2] == mine[2], what, " on group '", name(), "': rank ", q, " passes ", h[2], " elements, rank ",
                rank(), " passes ", count, "; sizes must match");
      // agreeing on the operation, count and dtype, the peer fused exactly when this rank did
      EPL_CHECK((h[7] != 0) == (payload != nullptr), what, " on group '", name(), "' at rank ", rank(), ": rank ", q,
                (payload ? " sent a header where this rank sent its data" : " sent its data where this rank sent a header"),
                " (ranks running different builds of epl?)");
    }
  }
  // The header peer i sent (element 7: whether it was fused data), read from its messages: a
  // header message's body, or fused pieces' tag and total length. near is this rank's sequence
  // number, to which a fused tag's low sequence bits are completed.
  [[nodiscard]] std::array<std::int64_t, 8> header_of(std::size_t i, std::int64_t near) const {
    const int q = peer_of(i);
    const int tag = st_->tags[i], length = st_->lengths[i];
    std::array<std::int64_t, 8> h{};
    if (tag == kHeaderTag) {
      EPL_CHECK(length == static_cast<int>(kHeaderBytes), "the header from rank ", q, " on group '", name(), "' has ", length,
                " bytes, not ", kHeaderBytes, " (ranks running different builds of epl?)");
      std::memcpy(h.data(), slot(q), kHeaderBytes);
      return h;
    }
    EPL_CHECK(tag & kFusedTag, "rank ", q, " on group '", name(), "' sent an unknown tag ", tag, " on epl's private communicator");
    const int code = (tag >> 2) & 15;
    EPL_CHECK(code <= static_cast<int>(DType::kI64), "rank ", q, " on group '", name(), "' sent an unknown dtype code ", code,
              " (ranks running different builds of epl?)");
    const auto dtype = static_cast<DType>(code);
    const std::int64_t mask = (std::int64_t{1} << kSeqBits) - 1, low = (tag >> 6) & mask;
    const std::int64_t delta = ((low - (near & mask) + (mask + 1) + (mask + 1) / 2) & mask) - (mask + 1) / 2;
    h = {static_cast<std::int64_t>(Op::kAllReduce), near + delta, length / static_cast<std::int64_t>(size_of(dtype)),
         static_cast<std::int64_t>(dtype), 0, tag & 3, 0, 1};
    return h;
  }
  // Every rank's values (the same number on each), rank after rank.
  std::vector<int> gather_counts(const std::vector<std::int64_t>& mine) {
    std::vector<int> counts(static_cast<std::size_t>(size()) * mine.size());
    std::vector<int> c(mine.begin(), mine.end());
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Iallgather(c.data(), static_cast<int>(c.size()), MPI_INT, counts.data(), static_cast<int>(c.size()), MPI_INT,
                                 st_->control, &req));
    complete("count exchange", req);
    return counts;
  }
  // all_to_all_v after its local checks (invalid: what they found wrong, thrown in step with
  // the peers by the handshake).
  void all_to_all_checked(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                          const std::vector<std::int64_t>& recv_counts, const std::string& invalid) {
    st_->queue.drain();
    usable("all_to_all");
    handshake(Op::kAllToAll, 0, in.dtype, 0, ReduceOp::kSum, false, nullptr, invalid);
    const int n = size();
    // every rank's send and receive counts, so that every rank judges every pair alike
    std::vector<std::int64_t> mine(send_counts);
    mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
    const std::vector<int> all = gather_counts(mine);
    auto sends = [&](int p, int q) { return all[static_cast<std::size_t>(2 * n * p + q)]; };
    auto expects = [&](int q, int p) { return all[static_cast<std::size_t>(2 * n * q + n + p)]; };
    for (int p = 0; p < n; ++p)
      for (int q = 0; q < n; ++q)
        EPL_CHECK(sends(p, q) == expects(q, p), "all_to_all_v on group '", name(), "': rank ", p, " sends ", sends(p, q),
                  " elements to rank ", q, ", which expects ", expects(q, p));
    std::vector<int> sc(send_counts.begin(), send_counts.end()), rc(recv_counts.begin(), recv_counts.end());
    std::vector<int> sd(sc.size()), rd(rc.size());
    for (std::size_t q = 1; q < sc.size(); ++q) {
      sd[q] = sd[q - 1] + sc[q - 1];
      rd[q] = rd[q - 1] + rc[q - 1];
    }
    MPI_Request req;
    EPL_MPI_CHECK(MPI_Ialltoallv(in.data, sc.data(), sd.data(), detail::mpi_type(in.dtype), out.data, rc.data(), rd.data(),
                                 detail::mpi_type(out.dtype), st_->data, &req));
    complete("all_to_all", req);
    std::int64_t s = 0, r = 0;
    for (int q = 0; q < n; ++q)
      if (q != rank()) {
        s += sc[q];
        r += rc[q];
      }
    account(s * static_cast<std::int64_t>(size_of(in.dtype)), r * static_cast<std::int64_t>(size_of(out.dtype)));
  }
  // One test of req: true when it completed; a message larger than its buffer is named.
  bool poll(const char* what, MPI_Request& req, int peer, MPI_Status* status) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, status);
    int error_class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      EPL_FAIL(what, " on group '", name(), "' at rank ", rank(), " from rank ", peer, ": the message is larger than the buffer");
    EPL_MPI_CHECK(rc);
    return done != 0;
  }
  // Waits for req until the timeout (the handshake already proved every rank arrived).
  void complete(const char* what, MPI_Request& req, int peer = -1, MPI_Status* status = MPI_STATUS_IGNORE) {
    const auto deadline = std::chrono::steady_clock::now() + st_->opt.timeout;
    for (int polls = 0;; ++polls) {
      if (poll(what, req, peer, status)) return;
      if (auto why = stopped(); !why.empty()) EPL_FAIL(what, " on group '", name(), "' at rank ", rank(), " stopped: ", why);
      if (std::chrono::steady_clock::now() >= deadline)
        fail_timeout(epl::detail::concat(what, " on group '", name(), "' at rank ", member(rank()), " timed out after ",
                                         st_->opt.timeout.count(), " ms",
                                         peer >= 0 ? " waiting for rank " + member(peer) : std::string(" in the data transfer")));
      if (polls > 200) std::this_thread::yield();  // oversubscribed ranks must let their peers run
    }
  }
  // Ring all_reduce: n-1 reduce-scatter steps, then n-1 all-gather steps, each moving one share
  // between ring neighbours. A share travels in chunks of kChunkBytes so that the reduction of
  // chunk c overlaps the arrival of chunk c+1 (two staging halves, allocated once).
  void ring_all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    const int n = size(), r = rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    const auto es = static_cast<std::int64_t>(size_of(in.dtype));
    if (in.data != out.data) std::memcpy(out.data, in.data, in.bytes());
    const std::int64_t chunk = std::max<std::int64_t>(1, kChunkBytes / es);
    if (static_cast<std::int64_t>(st_->staging.size()) < 2 * chunk * es) st_->staging.resize(static_cast<std::size_t>(2 * chunk * es));
    auto share = [&](int s) {
      s = ((s % n) + n) % n;
      return std::pair{detail::share_offset(out.count, n, s), detail::share_offset(out.count, n, s + 1)};
    };
    // Sends share `send_share` to next; receives share `recv_share` from prev, reducing it into
    // out (reduce) or copying it into place (gather).
    auto step = [&](int send_share, int recv_share, bool reduce) {
      // plain variables, not structured bindings: lambdas below capture them (clang < 16 cannot)
      const std::int64_t s0 = share(send_share).first, s1 = share(send_share).second;
      const std::int64_t r0 = share(recv_share).first, r1 = share(recv_share).second;
      std::vector<MPI_Request> sends;
      for (std::int64_t c = s0; c < s1; c += chunk) {
        sends.emplace_back();
        EPL_MPI_CHECK(MPI_Isend(out.byte_ptr(c), static_cast<int>(std::min(chunk, s1 - c) * es), MPI_BYTE, next, kRingTag, st_->data, &sends.back()));
      }
      const std::int64_t chunks = (r1 - r0 + chunk - 1) / chunk;
      auto target = [&](std::int64_t c) { return reduce ? st_->staging.data() + (c % 2) * chunk * es : out.byte_ptr(r0 + c * chunk); };
      auto length = [&](std::int64_t c) { return static_cast<int>(std::min(chunk, r1 - r0 - c * chunk) * es); };
      MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      if (chunks > 0) EPL_MPI_CHECK(MPI_Irecv(target(0), length(0), MPI_BYTE, prev, kRingTag, st_->data, &pending[0]));
      for (std::int64_t c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) EPL_MPI_CHECK(MPI_Irecv(target(c + 1), length(c + 1), MPI_BYTE, prev, kRingTag, st_->data, &pending[(c + 1) % 2]));
        complete("all_reduce", pending[c % 2], prev);
        if (reduce) detail::reduce_into(out.byte_ptr(r0 + c * chunk), target(c), length(c) / es, out.dtype, op);
      }
      for (auto& req : sends) complete("all_reduce", req, next);
    };
    for (int k = 0; k < n - 1; ++k) step(r - k, r - k - 1, true);       // then share r+1 is complete here
    for (int k = 0; k < n - 1; ++k) step(r + 1 - k, r - k, false);      // circulate the complete shares
  }
  // Why this handle can no longer communicate (empty while it can): the process failed, or
  // the handle was cancelled.
  [[nodiscard]] std::string stopped() const {
    if (detail::MpiFailure::get().raised()) return detail::MpiFailure::get().reason();
    if (st_->cancelled.load()) return "this rank's communicator '" + name() + "' was cancelled";
    return {};
  }
  void usable(const char* op) const {
    if (auto why = stopped(); !why.empty()) EPL_FAIL(op, " on group '", name(), "' at rank ", rank(), " not started: ", why);
  }
  [[noreturn]] static void fail_timeout(std::string what) {
    detail::MpiFailure::get().raise(what);
    throw Error(std::move(what), __FILE__, __LINE__);
  }
  void account(std::int64_t sent, std::int64_t received) {
    st_->sent += sent;
    st_->received += received;
    ++st_->ops;
  }
  void check_rank(int r, const char* what) const {
    EPL_CHECK(r >= 0 && r < size(), what, " ", r, " is not a rank of group '", name(), "' (size ", size(), ")");
  }

  std::unique_ptr<State> st_;
};

static_assert(communicator<MpiCommunicator>);

// Compiled once in epl::precompiled when it was built with MPI (it defines EPL_PRECOMPILED_MPI).
#if defined(EPL_PRECOMPILED_MPI) && !defined(EPL_PRECOMPILED_SOURCE)
extern template class detail::CommunicatorModel<MpiCommunicator, true>;
extern template class detail::CommunicatorModel<MpiCommunicator, false>;
#endif

}  // namespace comm
}  // namespace v0
}  // namespace epl
