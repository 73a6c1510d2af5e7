#pragma once
/// \file
/// \brief comm::ThreadCommunicator — N ranks as N threads of one process sharing memory (the
/// embedded default). comm/threads/run_threads.hpp starts such ranks.
///
/// Collectives are parallel shared-memory algorithms: ranks publish their buffers, then each
/// rank reduces (or copies) its own share of the data from every peer, then gathers the other
/// shares — so an all_reduce moves 2(n-1)/n of the buffer per rank, like a ring, with every
/// rank working at once. Bytes read from other ranks count as received, bytes of this rank
/// read by others as sent.
///
/// Device buffers (thread ranks sharing one GPU, or device::Isolated in CI) move the same way,
/// through each rank's device::Lane (attach): its copies and reductions run on the lane's stream
/// after the marks of every rank's producing work, and the lane completes before the barrier that
/// frees the buffers, so data never passes through host memory.
#include <cstdlib>
#include <cstring>
#include <thread>

#include "epl/comm/any_communicator.hpp"
#include "epl/comm/async_queue.hpp"
#include "epl/comm/reduce.hpp"
#include "epl/comm/threads/group.hpp"
#include "epl/device/cpu/parallel.hpp"
#include "epl/device/lane.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief One thread rank's handle on a group of thread ranks. Not to be moved while
/// asynchronous operations it issued are pending.
class ThreadCommunicator {
 public:
  /// Each collective checks its buffers' memory spaces (and the lane) with its other arguments,
  /// so a rank's wrong buffer fails every rank of the group in step.
  static constexpr bool kChecksSpacesInStep = true;

  ThreadCommunicator(std::shared_ptr<detail::ThreadGroup> g, int rank) : group_(std::move(g)), rank_(rank) {}
  ThreadCommunicator(ThreadCommunicator&&) noexcept = default;
  ThreadCommunicator& operator=(ThreadCommunicator&&) noexcept = default;
  /// A handle destroyed with asynchronous work outstanding (its rank is unwinding from an
  /// exception, typically) cancels it rather than wait for peers on buffers that are going away.
  ~ThreadCommunicator() {
    if (st_ && st_->queue.busy()) cancel("its communicator was destroyed");
  }

  /// \brief Ends this handle's use: asynchronous operations not yet started fail without running,
  /// one waiting at its entry barrier stops within 20 ms, and later operations fail at once. Owners
  /// of asynchronous work call it when they are destroyed with work outstanding.
  void cancel(const std::string& reason) noexcept {
    st_->cancelled.store(true);
    st_->queue.cancel_pending(reason);
  }
  /// \brief A world of one rank: the communicator of a single-device run (every collective is
  /// a copy at most), so one device runs the same code as many.
  static ThreadCommunicator solo(CommOptions opt = {}) {
    return ThreadCommunicator(std::make_shared<detail::ThreadGroup>(std::vector<int>{0}, std::make_shared<detail::AbortFlag>(), "solo", opt), 0);
  }

  /// \brief This rank moves device buffers (of lane's device) through `lane` from now on, and so
  /// do the groups split from it afterwards. Every rank of a group must attach a lane before it
  /// passes device buffers.
  void attach(std::shared_ptr<device::Lane> lane) { st_->lane = std::move(lane); }
  /// \brief Host memory always; device memory once a lane is attached.
  [[nodiscard]] bool reaches(MemorySpace s) const noexcept { return s == MemorySpace::kHost || st_->lane != nullptr; }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return group_->size(); }
  [[nodiscard]] const std::string& name() const noexcept { return group_->name(); }
  [[nodiscard]] CommStats stats() const noexcept { return {st_->sent.load(), st_->received.load(), st_->ops.load()}; }

  /// \brief out = op over ranks of in (in == out: in place). Same count and dtype on every rank.
  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    drain();
    prepare_staging(in.dtype);
    begin(detail::Op::kAllReduce, in, out, [&](detail::Slot& s) {
      s.reduce = op;
      s.invalid = detail::invalid_arguments([&] {
        EPL_CHECK(in.count == out.count && in.dtype == out.dtype, "input ", in.count, " ", name_of(in.dtype), " and output ",
                  out.count, " ", name_of(out.dtype), " differ");
      });
    }, [&] { return same_count(); });
    const int n = size();
    const std::int64_t o0 = detail::share_offset(in.count, n, rank_), o1 = detail::share_offset(in.count, n, rank_ + 1);
    reduce_share(o0, o1, [&](int q) { return group_->slot(q).in; }, out, o0, op);
    st_->received += static_cast<std::int64_t>((n - 1) * (o1 - o0) * size_of(in.dtype));
    st_->sent += static_cast<std::int64_t>((in.count - (o1 - o0)) * size_of(in.dtype));
    land(in);  // the reduced shares are written before anyone reads them
    group_->sync();
    for (int q = 0; q < n; ++q) {  // gather the other shares from their owners' outputs
      if (q == rank_) continue;
      std::int64_t q0 = detail::share_offset(in.count, n, q), q1 = detail::share_offset(in.count, n, q + 1);
      move(out.byte_ptr(q0), group_->slot(q).out.byte_ptr(q0), static_cast<std::size_t>(q1 - q0) * size_of(in.dtype), out);
      st_->received += static_cast<std::int64_t>((q1 - q0) * size_of(in.dtype));
    }
    st_->sent += static_cast<std::int64_t>((n - 1) * (o1 - o0) * size_of(in.dtype));
    finish();
  }
  void all_reduce(const Buffer& inout, ReduceOp op) { all_reduce(inout, inout, op); }

  /// \brief This rank's out = op over ranks of its block of in. Blocks follow rank order, each
  /// rank's block as long as its out (sizes may differ); in is the same length everywhere.
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
    drain();
    prepare_staging(in.dtype);
    begin(detail::Op::kReduceScatter, in, out, [&](detail::Slot& s) { s.reduce = op; }, [&]() -> std::string {
      std::int64_t total = 0;
      for (int q = 0; q < size(); ++q) {
        total += group_->slot(q).out.count;
        if (group_->slot(q).in.count != group_->slot(0).in.count)
          return epl::detail::concat("rank ", q, " passes ", group_->slot(q).in.count, " input elements, rank 0 passes ",
                                group_->slot(0).in.count);
      }
      if (total != group_->slot(0).in.count)
        return epl::detail::concat("the outputs hold ", total, " elements in all but the input holds ", group_->slot(0).in.count);
      return {};
    });
    std::int64_t offset = 0;
    for (int q = 0; q < rank_; ++q) offset += group_->slot(q).out.count;
    reduce_share(offset, offset + out.count, [&](int q) { return group_->slot(q).in; }, out, 0, op);
    st_->received += static_cast<std::int64_t>((size() - 1) * out.bytes());
    st_->sent += static_cast<std::int64_t>((in.count - out.count) * size_of(in.dtype));
    finish();
  }

  /// \brief out = the concatenation of every rank's in, in rank order (sizes may differ).
  void all_gather(const Buffer& in, const Buffer& out) {
    drain();
    begin(detail::Op::kAllGather, in, out, [](detail::Slot&) {}, [&]() -> std::string {
      std::int64_t total = 0;
      for (int q = 0; q < size(); ++q) total += group_->slot(q).in.count;
      for (int q = 0; q < size(); ++q)
        if (group_->slot(q).out.count != total)
          return epl::detail::concat("the inputs hold ", total, " elements, rank ", q, "'s output ", group_->slot(q).out.count);
      return {};
    });
    std::int64_t offset = 0;
    for (int q = 0; q < size(); ++q) {
      const Buffer& src = group_->slot(q).in;
      if (src.data != out.byte_ptr(offset)) move(out.byte_ptr(offset), src.data, src.bytes(), out);
      if (q != rank_) st_->received += static_cast<std::int64_t>(src.bytes());
      offset += src.count;
    }
    st_->sent += static_cast<std::int64_t>((size() - 1) * in.bytes());
    finish();
  }

  /// \brief Every rank's buf = root's buf.
  void broadcast(const Buffer& buf, int root) {
    drain();
    begin(detail::Op::kBroadcast, buf, buf, [&](detail::Slot& s) {
      s.root = root;
      s.invalid = detail::invalid_arguments([&] { check_rank(root, "broadcast root"); });
    }, [&] { return same_count(); });
    if (rank_ != root) {
      move(buf.data, group_->slot(root).in.data, buf.bytes(), buf);
      st_->received += static_cast<std::int64_t>(buf.bytes());
    } else {
      st_->sent += static_cast<std::int64_t>((size() - 1) * buf.bytes());
    }
    finish();
  }

  /// \brief root's out = op over ranks of in; each rank reduces its share into root's out.
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) {
    drain();
    prepare_staging(in.dtype);
    begin(detail::Op::kReduce, in, out, [&](detail::Slot& s) {
      s.root = root;
      s.reduce = op;
      s.invalid = detail::invalid_arguments([&] { check_rank(root, "reduce root"); });
    }, [&]() -> std::string {
      if (auto e = same_count(); !e.empty()) return e;
      const Buffer& dst = group_->slot(root).out;
      if (dst.count != in.count || dst.dtype != in.dtype)
        return epl::detail::concat("root ", root, "'s output holds ", dst.count, " ", name_of(dst.dtype), " for inputs of ", in.count, " ",
                              name_of(in.dtype));
      return {};
    });
    const Buffer& dst = group_->slot(root).out;
    const int n = size();
    const std::int64_t o0 = detail::share_offset(in.count, n, rank_), o1 = detail::share_offset(in.count, n, rank_ + 1);
    reduce_share(o0, o1, [&](int q) { return group_->slot(q).in; }, dst, o0, op);
    st_->received += static_cast<std::int64_t>((n - 1) * (o1 - o0) * size_of(in.dtype));
    st_->sent += static_cast<std::int64_t>((in.count - (o1 - o0)) * size_of(in.dtype));
    finish();
  }

  /// \brief Block q of this rank's out = block (this rank) of rank q's in; equal blocks of
  /// count / size elements.
  void all_to_all(const Buffer& in, const Buffer& out) {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(size()), 0);
    const std::string invalid = detail::invalid_arguments([&] { counts = detail::equal_blocks(in, out, size(), name()); });
    all_to_all_v(in, counts, out, counts, invalid);
  }
  /// \brief all_to_all with per-destination send counts and per-source receive counts.
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                    const std::vector<std::int64_t>& recv_counts) {
    all_to_all_v(in, send_counts, out, recv_counts, {});
  }

 private:
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                    const std::vector<std::int64_t>& recv_counts, const std::string& invalid) {
    drain();
    // counts of the wrong length are replaced, so that the peers' check reads n of each
    const auto n = static_cast<std::size_t>(size());
    const bool sized = send_counts.size() == n && recv_counts.size() == n;
    const std::vector<std::int64_t> zeros(n, 0);
    begin(detail::Op::kAllToAll, in, out, [&](detail::Slot& s) {
      s.send_counts = sized ? send_counts.data() : zeros.data();
      s.recv_counts = sized ? recv_counts.data() : zeros.data();
      s.invalid = invalid.empty() ? detail::invalid_arguments([&] {
        detail::check_all_to_all_counts(in, send_counts, out, recv_counts, size(), name());
      }) : invalid;
    }, [&]() -> std::string {
      for (int q = 0; q < size(); ++q)
        for (int r = 0; r < size(); ++r)
          if (group_->slot(q).send_counts[r] != group_->slot(r).recv_counts[q])
            return epl::detail::concat("rank ", q, " sends ", group_->slot(q).send_counts[r], " elements to rank ", r, ", which expects ",
                                  group_->slot(r).recv_counts[q]);
      return {};
    });
    std::int64_t recv_offset = 0;
    for (int q = 0; q < size(); ++q) {
      const auto& peer = group_->slot(q);
      std::int64_t send_offset = 0;
      for (int r = 0; r < rank_; ++r) send_offset += peer.send_counts[r];
      move(out.byte_ptr(recv_offset), peer.in.byte_ptr(send_offset), static_cast<std::size_t>(recv_counts[q]) * size_of(out.dtype), out);
      if (q != rank_) {
        st_->received += recv_counts[q] * static_cast<std::int64_t>(size_of(out.dtype));
        st_->sent += send_counts[q] * static_cast<std::int64_t>(size_of(in.dtype));
      }
      recv_offset += recv_counts[q];
    }
    finish();
  }

 public:
  /// \brief Sends buf to rank dst with a tag; returns once the data is copied (buffered).
  void send(const Buffer& buf, int dst, int tag) {
    drain();
    check_rank(dst, "send destination");
    if (buf.space == MemorySpace::kDevice) {  // a copy in this rank's device memory travels
      EPL_CHECK(st_->lane, "send on group '", name(), "' at rank ", rank_, ": a buffer in device memory and no device lane; ",
                kAttach);
      auto copy = st_->lane->allocate(buf.bytes());
      st_->lane->copy_now(copy.get(), buf.data, buf.bytes());
      group_->post(rank_, dst, tag, {{}, buf.count, buf.dtype, std::move(copy)});
    } else {
      const auto* p = static_cast<const char*>(buf.data);
      group_->post(rank_, dst, tag, {std::vector<char>(p, p + buf.bytes()), buf.count, buf.dtype, nullptr});
    }
    st_->sent += static_cast<std::int64_t>(buf.bytes());
    ++st_->ops;
  }
  /// \brief Receives into buf the next message from rank src with this tag.
  void recv(const Buffer& buf, int src, int tag) {
    drain();
    check_rank(src, "recv source");
    deliver(group_->take(src, rank_, tag), buf, src, tag);
  }

  /// \brief send, which never waits for the receiver here (the message is copied): done at once.
  Work isend(const Buffer& buf, int dst, int tag) {
    send(buf, dst, tag);
    return Work::done();
  }
  /// \brief A receive that completes when its message is taken: by test() once it has arrived,
  /// or by wait() (with the timeout and the size check of recv); buf must stay valid until then.
  Work irecv(const Buffer& buf, int src, int tag) {
    check_rank(src, "recv source");
    return Work::deferred([this, buf, src, tag] { recv(buf, src, tag); }, [this, buf, src, tag] {
      auto m = group_->try_take(src, rank_, tag);
      if (!m && group_->returned(src)) {  // it sends before it returns: look once more, then give up
        m = group_->try_take(src, rank_, tag);
        EPL_CHECK(m, "recv on group '", name(), "' at rank ", rank_, ": rank ", src,
                  " returned from its function without sending a message with tag ", tag);
      }
      if (m) deliver(*m, buf, src, tag);
      return m.has_value();
    });
  }

  void barrier() {
    drain();
    begin(detail::Op::kBarrier, {}, {}, [](detail::Slot&) {}, [] { return std::string(); });
    finish();
  }

  /// \brief The sub-group of the ranks that pass the same color, ordered by (key, rank).
  ThreadCommunicator split(int color, int key) {
    drain();
    begin(detail::Op::kSplit, {}, {}, [&](detail::Slot& s) {
      s.color = color;
      s.key = key;
      s.invalid = detail::invalid_arguments([&] { EPL_CHECK(color >= 0, "color ", color, " must be non-negative"); });
    }, [] { return std::string(); });
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (int q = 0; q < size(); ++q)
      if (group_->slot(q).color == color) members.emplace_back(group_->slot(q).key, q);
    std::sort(members.begin(), members.end());
    const int leader = members.front().second;
    int my_index = 0;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) my_index = static_cast<int>(i);
    if (rank_ == leader) {
      std::vector<int> world;
      for (const auto& member : members) world.push_back(group_->world_rank(member.second));
      group_->slot(rank_).handoff = std::make_shared<detail::ThreadGroup>(
          world, group_->abort_flag(), group_->name() + "/" + std::to_string(color), group_->options());
    }
    group_->sync();
    auto sub = std::static_pointer_cast<detail::ThreadGroup>(group_->slot(leader).handoff);
    group_->sync();
    if (rank_ == leader) group_->slot(rank_).handoff.reset();
    finish();
    ThreadCommunicator handle(std::move(sub), my_index);
    handle.st_->lane = st_->lane;
    return handle;
  }

  // ---- asynchronous operations: run in issue order on this rank's worker thread ------------
  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return enqueue([this, in, out, op] { all_reduce(in, out, op); });
  }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return enqueue([this, in, out, op] { reduce_scatter(in, out, op); });
  }
  Work all_gather_async(const Buffer& in, const Buffer& out) {
    return enqueue([this, in, out] { all_gather(in, out); });
  }

 private:
  // The first two steps of every collective (see thread_group.hpp): publish this rank's slot
  // and pass the entry barrier (which may throw), then validate. `check` returns what is wrong
  // (empty when nothing is) from the slots of all ranks, judged the same way on every rank, so
  // on a mismatch every rank throws the same error after one more sync, before any rank reads a
  // peer's buffer.
  template <class Fill, class Check>
  void begin(detail::Op op, const Buffer& in, const Buffer& out, Fill&& fill, Check&& check) {
    auto& me = group_->slot(rank_);
    me = detail::Slot{};
    me.op = op;
    me.seq = st_->seq++;
    me.in = in;
    me.out = out;
    fill(me);
    if (me.invalid.empty())
      me.invalid = detail::invalid_arguments([&] {
        EPL_CHECK(in.count == 0 || out.count == 0 || in.space == out.space, "input in ", name_of(in.space), " memory and output in ",
                  name_of(out.space), " memory; a collective moves one memory space");
        EPL_CHECK(!on_device(in) || st_->lane, "a buffer in device memory and no device lane; ", kAttach);
      });
    if (on_device(in) && st_->lane) me.ready = st_->lane->ready();
    group_->enter(rank_, detail::name_of(op), st_->cancelled);
    std::string wrong = invalid();
    if (wrong.empty()) wrong = agreement();
    if (wrong.empty()) wrong = check();
    if (!wrong.empty()) {
      group_->sync();
      EPL_FAIL(detail::name_of(op), " on group '", name(), "' (size ", size(), "): ", wrong);
    }
    if (on_device(in))  // the lane's work follows every rank's producing work
      for (int q = 0; q < size(); ++q) st_->lane->after(group_->slot(q).ready);
  }
  // A rank's own arguments are wrong: every rank reports it (that rank's words, and its rank).
  std::string invalid() {
    for (int q = 0; q < size(); ++q)
      if (!group_->slot(q).invalid.empty())
        return q == rank_ ? group_->slot(q).invalid : epl::detail::concat("rank ", q, "'s arguments are wrong: ", group_->slot(q).invalid);
    return {};
  }
  // Every rank called the same operation (sequence number, dtype, root, reduction) as rank 0.
  std::string agreement() {
    const auto& first = group_->slot(0);
    for (int q = 1; q < size(); ++q) {
      const auto& s = group_->slot(q);
      if (s.op != first.op || s.seq != first.seq)
        return epl::detail::concat("rank ", q, " called ", detail::name_of(s.op), " (operation #", s.seq, ") while rank 0 called ",
                              detail::name_of(first.op), " (operation #", first.seq,
                              "); every rank must issue the same collectives in the same order");
      if (on_device(s.in) != on_device(first.in))
        return epl::detail::concat("rank ", q, " passes ", name_of(s.in.space), " memory, rank 0 ", name_of(first.in.space),
                                   " memory; the ranks of a group move buffers of one memory space (one kind of device per group)");
      if (s.in.dtype != first.in.dtype || s.root != first.root || s.reduce != first.reduce)
        return epl::detail::concat("rank ", q, " passes ", name_of(s.in.dtype), " root ", s.root, " op ", comm::name_of(s.reduce),
                              ", rank 0 passes ", name_of(first.in.dtype), " root ", first.root, " op ", comm::name_of(first.reduce));
    }
    return {};
  }
  std::string same_count() {
    for (int q = 1; q < size(); ++q)
      if (group_->slot(q).in.count != group_->slot(0).in.count)
        return epl::detail::concat("rank ", q, " passes ", group_->slot(q).in.count, " elements, rank 0 passes ",
                              group_->slot(0).in.count, "; sizes must match");
    return {};
  }
  void finish() {
    land(group_->slot(rank_).in.count ? group_->slot(rank_).in : group_->slot(rank_).out);
    group_->sync();  // nobody leaves while a peer may still read its buffers
    ++st_->ops;
  }
  // Whether a collective's buffers are device memory (moved by the lane). An empty buffer says
  // nothing: its space is the other's.
  static bool on_device(const Buffer& b) noexcept { return b.space == MemorySpace::kDevice; }
  // The lane's queued work done (device buffers): a barrier may follow.
  void land(const Buffer& b) const {
    if (on_device(b)) st_->lane->complete();
  }
  // n bytes into dst from a peer's src, in the space of `like`: memcpy, or the lane's copy.
  void move(void* dst, const void* src, std::size_t n, const Buffer& like) const {
    if (on_device(like)) st_->lane->copy(dst, src, n);
    else std::memcpy(dst, src, n);
  }
  // A received message into buf, its size checked.
  void deliver(const detail::ThreadGroup::Message& m, const Buffer& buf, int src, int tag) {
    EPL_CHECK(m.count == buf.count && m.dtype == buf.dtype, "recv on group '", name(), "' at rank ", rank_, " from rank ", src,
              " tag ", tag, ": expected ", buf.count, " ", name_of(buf.dtype), ", got ", m.count, " ", name_of(m.dtype));
    const bool device = m.device != nullptr;
    EPL_CHECK(!device || st_->lane, "recv on group '", name(), "' at rank ", rank_, ": device memory from rank ", src, " and no device lane; ",
              kAttach);
    EPL_CHECK(device == (buf.space == MemorySpace::kDevice), "recv on group '", name(), "' at rank ", rank_, " from rank ", src,
              " tag ", tag, ": rank ", src, " sent ", device ? "device" : "host", " memory into a buffer in ",
              name_of(buf.space), " memory; both ends of a transfer use one memory space");
    if (device) st_->lane->copy_now(buf.data, m.device.get(), buf.bytes());
    else std::memcpy(buf.data, m.bytes.data(), m.bytes.size());
    st_->received += static_cast<std::int64_t>(buf.bytes());
    ++st_->ops;
  }
  void check_rank(int r, const char* what) const {
    EPL_CHECK(r >= 0 && r < size(), what, " ", r, " is not a rank of group '", name(), "' (size ", size(), ")");
  }
  // Sized before the entry barrier: nothing in the data phase may fail, an allocation included.
  void prepare_staging(DType t) {
    const auto bytes = static_cast<std::size_t>(kStagingBytes / size_of(t) * size_of(t));
    if (st_->staging.size() < bytes) st_->staging.resize(bytes);
    st_->sources.resize(static_cast<std::size_t>(size()));
  }

  // dst[dst_offset + i] = op over q of src(q)[o0 + i], for i < o1 - o0, accumulated in rank
  // order through a cache-sized staging block (so the result does not depend on which rank
  // owns the share, and in-place buffers are read before they are written).
  template <class Source>
  void reduce_share(std::int64_t o0, std::int64_t o1, Source&& src, const Buffer& dst, std::int64_t dst_offset, ReduceOp op) {
    auto& sources = st_->sources;  // sized before the entry barrier (prepare_staging)
    for (int q = 0; q < size(); ++q) sources[static_cast<std::size_t>(q)] = src(q).byte_ptr(o0);
    const int divisor = op == ReduceOp::kMean ? size() : 1;
    if (on_device(dst))  // the lane reduces in rank order, through its own staging
      st_->lane->reduce(dst.byte_ptr(dst_offset), sources, o1 - o0, dst.dtype, detail::reduction_of(op), divisor);
    else
      device::detail::reduce_in_order(dst.byte_ptr(dst_offset), sources, o1 - o0, dst.dtype, detail::reduction_of(op), divisor,
                                      st_->staging);
  }

  Work enqueue(std::function<void()> task) { return st_->queue.enqueue(std::move(task)); }
  void drain() { st_->queue.drain(); }

  static constexpr std::int64_t kStagingBytes = 256 << 10;
  static constexpr const char* kAttach = "attach the device's lane to every rank's communicator first (comm.attach(device.lane()); "
                                         "a Trainer built on the device does it), before splitting groups from it: a group split "
                                         "earlier has no lane";

  // What one rank's handle owns; behind a pointer so the handle moves (atomics do not).
  struct RankState {
    std::uint64_t seq = 0;
    std::vector<char> staging;
    std::vector<const void*> sources;  // a reduction's operands, one per rank
    std::atomic<std::int64_t> sent{0}, received{0}, ops{0};
    std::atomic<bool> cancelled{false};
    std::shared_ptr<device::Lane> lane;  // moves device buffers (attach)
    detail::AsyncQueue queue;  // destroyed first: cancels what has not started, joins the worker
  };

  std::shared_ptr<detail::ThreadGroup> group_;
  int rank_;
  std::unique_ptr<RankState> st_ = std::make_unique<RankState>();
};

static_assert(communicator<ThreadCommunicator>);

#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)  // compiled once in epl::precompiled
extern template class detail::CommunicatorModel<ThreadCommunicator, true>;
extern template class detail::CommunicatorModel<ThreadCommunicator, false>;
#endif

}  // namespace comm
}  // namespace v0
}  // namespace epl
