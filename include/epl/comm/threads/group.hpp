#pragma once
/// \file
/// \brief The shared state of a group of thread ranks: the two barriers of an operation, the
/// per-rank slots through which ranks publish their buffers, a mailbox for point-to-point
/// messages, and the world-wide abort flag.
///
/// Every collective is one protocol, which is what keeps a failing rank from leaving a peer
/// reading freed memory:
///   1. enter(): the entry barrier. It is the only wait that gives up: on the timeout or once
///      the world is aborted, the rank withdraws its arrival and throws, so no rank can pass an
///      entry barrier that a failed rank was counted in, and no rank passes one after an abort.
///   2. validation: every rank checks the same facts about all slots (operation, sizes, dtypes,
///      roots), so all ranks reach the same verdict and, on a mismatch, all throw together,
///      before any rank has read another rank's buffer.
///   3. the data phase: ranks read and write each other's buffers between sync() barriers that
///      never throw and never time out. Nothing in the data phase can fail, so every rank that
///      passed the entry barrier reaches the last sync(), and no rank leaves (and frees its
///      buffers) while a peer may still read them.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "epl/comm/communicator.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
namespace detail {

/// Set once, by the first rank that fails; every waiting rank of every group then fails too.
class AbortFlag {
 public:
  /// Records the first failure; returns true for that one (the root cause), false afterwards.
  bool raise(int world_rank, std::string reason) {
    std::lock_guard lock(mutex_);
    if (raised_.load()) return false;
    rank_ = world_rank;
    reason_ = std::move(reason);
    when_ = std::chrono::steady_clock::now();
    raised_.store(true);
    return true;
  }
  [[nodiscard]] bool raised() const noexcept { return raised_.load(); }
  [[nodiscard]] std::string reason() const {
    std::lock_guard lock(mutex_);
    return "rank " + std::to_string(rank_) + " failed: " + reason_;
  }
  [[nodiscard]] int rank() const {
    std::lock_guard lock(mutex_);
    return rank_;
  }
  [[nodiscard]] std::chrono::steady_clock::time_point when() const {
    std::lock_guard lock(mutex_);
    return when_;
  }
  /// Records that a rank's function returned: it will never arrive at another collective.
  void mark_returned(int world_rank) {
    std::lock_guard lock(mutex_);
    returned_.insert(world_rank);
    any_returned_.store(true);
  }
  [[nodiscard]] bool returned(int world_rank) const {
    if (!any_returned_.load()) return false;
    std::lock_guard lock(mutex_);
    return returned_.count(world_rank) != 0;
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false}, any_returned_{false};
  std::set<int> returned_;
  int rank_ = -1;
  std::string reason_;
  std::chrono::steady_clock::time_point when_{};
};

enum class Op : std::uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kBarrier, kSplit };
inline const char* name_of(Op op) {
  constexpr const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                   "reduce", "all_to_all", "barrier", "split"};
  return names[static_cast<int>(op)];
}

/// What a rank publishes for the current operation.
struct Slot {
  Op op = Op::kBarrier;
  std::uint64_t seq = 0;
  Buffer in, out;
  int root = 0;
  ReduceOp reduce = ReduceOp::kSum;
  const std::int64_t* send_counts = nullptr;  // all_to_all with variable sizes
  const std::int64_t* recv_counts = nullptr;
  int color = 0, key = 0;  // split
  std::string invalid;     // what this rank's own arguments get wrong (empty: nothing)
  std::shared_ptr<void> handoff;
  std::shared_ptr<void> ready;  // device buffers: the mark after the work that produced them (device::Lane::ready)
};

class ThreadGroup {
 public:
  ThreadGroup(std::vector<int> world_ranks, std::shared_ptr<AbortFlag> abort, std::string name, CommOptions opt)
      : world_ranks_(std::move(world_ranks)), abort_(std::move(abort)), name_(std::move(name)), opt_(opt),
        slots_(world_ranks_.size()), arrived_(world_ranks_.size()) {}

  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks_.size()); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return opt_; }
  [[nodiscard]] const std::shared_ptr<AbortFlag>& abort_flag() const noexcept { return abort_; }
  [[nodiscard]] int world_rank(int r) const { return world_ranks_[r]; }
  Slot& slot(int r) { return slots_[r]; }
  /// Whether rank r's function has returned (run_threads): it will send and arrive no more.
  [[nodiscard]] bool returned(int r) const { return abort_->returned(world_ranks_[static_cast<std::size_t>(r)]); }

  /// The entry barrier of an operation: waits until every rank of the group arrives. Throws,
  /// naming the operation, the group, this rank and the missing ranks, when the timeout passes;
  /// throws when the world was aborted, before arriving or while waiting. A rank that throws has
  /// withdrawn its arrival, so the others can never pass this barrier with it counted.
  /// `cancelled` is the calling handle's flag (ThreadCommunicator::cancel): it stops this wait too.
  void enter(int rank, const char* op, const std::atomic<bool>& cancelled) {
    if (abort_->raised()) EPL_FAIL(op, " on group '", name_, "' at rank ", rank, " not started: ", abort_->reason());
    EPL_CHECK(!cancelled.load(), op, " on group '", name_, "' at rank ", rank, " not started: this rank's communicator was cancelled");
    const std::uint64_t my = arrive(rank);
    if (generation_of(state_.load()) != my) return;  // the last to arrive released it
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    // Why not to wait: the barrier passed (""), or the reason to stop.
    auto check = [&]() -> std::string {
      if (generation_of(state_.load()) != my) return {};
      if (abort_->raised()) return epl::detail::concat(op, " on group '", name_, "' at rank ", rank, " stopped: ", abort_->reason());
      if (cancelled.load()) return epl::detail::concat(op, " on group '", name_, "' at rank ", rank, " stopped: this rank's communicator was cancelled");
      if (std::chrono::steady_clock::now() >= deadline) return timeout_message(op, rank, my);
      if (auto gone = returned_message(op, rank, my); !gone.empty()) return gone;
      return "wait";
    };
    while (true) {
      std::string why = wait_for_release(my, check);
      if (why.empty()) return;
      if (why == "wait") continue;
      if (!withdraw(my)) return;  // released meanwhile: the operation goes on
      if (why.find(" timed out after ") != std::string::npos || why.find(" returned from ") != std::string::npos)
        abort_->raise(world_ranks_[rank], why);
      EPL_FAIL(why);
    }
  }
  /// A barrier inside the data phase: every rank that entered will arrive (nothing between
  /// enter() and the last sync() can fail), so it neither times out nor aborts.
  void sync() noexcept {
    const std::uint64_t my = arrive(-1);
    while (generation_of(state_.load()) == my)
      (void)wait_for_release(my, [&]() -> std::string { return generation_of(state_.load()) == my ? "wait" : ""; });
  }

  // ---- point-to-point mailbox (buffered sends) ------------------------------------------
  struct Message {
    std::vector<char> bytes;        // host memory: a copy
    std::int64_t count;
    DType dtype;
    std::shared_ptr<void> device;   // device memory: a copy in the sender's device memory (bytes empty)
  };
  void post(int src, int dst, int tag, Message m) {
    {
      std::lock_guard lock(mail_mutex_);
      mail_[{src, dst, tag}].push_back(std::move(m));
    }
    mail_cv_.notify_all();
  }
  /// The next message from src with this tag, if one has arrived; never waits.
  std::optional<Message> try_take(int src, int dst, int tag) {
    std::lock_guard lock(mail_mutex_);
    auto it = mail_.find(std::tuple{src, dst, tag});
    if (it == mail_.end() || it->second.empty()) return std::nullopt;
    Message m = std::move(it->second.front());
    it->second.pop_front();
    return m;
  }
  Message take(int src, int dst, int tag) {
    std::unique_lock lock(mail_mutex_);
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    auto key = std::tuple{src, dst, tag};
    while (true) {
      auto it = mail_.find(key);
      if (it != mail_.end() && !it->second.empty()) {
        Message m = std::move(it->second.front());
        it->second.pop_front();
        return m;
      }
      if (abort_->raised()) EPL_FAIL("recv from rank ", src, " tag ", tag, " on group '", name_, "' at rank ", dst, " stopped: ", abort_->reason());
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string what = "recv on group '" + name_ + "' at rank " + member(dst) + " timed out after " +
                           std::to_string(opt_.timeout.count()) + " ms: rank " + member(src) +
                           " did not send a message with tag " + std::to_string(tag);
        abort_->raise(world_ranks_[dst], what);
        EPL_FAIL(what);
      }
      if (abort_->returned(world_ranks_[src])) {
        std::string what = "recv on group '" + name_ + "' at rank " + member(dst) + ": rank " + member(src) +
                           " returned from its function without sending a message with tag " + std::to_string(tag);
        abort_->raise(world_ranks_[dst], what);
        EPL_FAIL(what);
      }
      mail_cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

 private:
  // The barrier's state is one word: generation (high 32 bits) and arrivals (low 32), so an
  // arrival, the release by the last arrival and a withdrawal are each one atomic step.
  static std::uint64_t generation_of(std::uint64_t state) noexcept { return state >> 32; }
  static std::uint64_t arrivals_of(std::uint64_t state) noexcept { return state & 0xffffffffu; }
  // Counts this rank in (rank -1: a data-phase sync, not recorded); the last arrival releases
  // the waiters. Returns the generation waited on.
  std::uint64_t arrive(int rank) noexcept {
    std::uint64_t s = state_.load();
    while (true) {
      const std::uint64_t g = generation_of(s), n = arrivals_of(s) + 1;
      if (rank >= 0) arrived_[static_cast<std::size_t>(rank)].store(g + 1);
      const std::uint64_t next = n == static_cast<std::uint64_t>(size()) ? (g + 1) << 32 : (g << 32) | n;
      if (state_.compare_exchange_weak(s, next)) {
        if (n == static_cast<std::uint64_t>(size())) wake();
        return g;
      }
    }
  }
  // Takes this rank's arrival back, unless the barrier of generation `my` was released already
  // (then the caller has passed it after all): true when withdrawn. The rank's record of having
  // arrived stays: a peer that times out a moment later names only the ranks that never came
  // (two ranks timing out together named each other's withdrawn arrival as missing).
  bool withdraw(std::uint64_t my) noexcept {
    std::uint64_t s = state_.load();
    while (generation_of(s) == my)
      if (state_.compare_exchange_weak(s, s - 1)) return true;
    return false;
  }
  // Spins briefly (a barrier of ranks on their own cores passes in well under a microsecond),
  // yields a while (ranks sharing cores), then sleeps until woken or 20 ms pass. Returns what
  // check() says once it says anything but "wait".
  template <class Check>
  std::string wait_for_release(std::uint64_t my, Check&& check) {
    for (int i = 0; i < 2000; ++i) {
      if (generation_of(state_.load(std::memory_order_acquire)) != my) return {};
      cpu_relax();
    }
    for (int i = 0; i < 200; ++i) {
      std::string why = check();
      if (why != "wait") return why;
      std::this_thread::yield();
    }
    {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      if (generation_of(state_.load()) == my) cv_.wait_for(lock, std::chrono::milliseconds(20));
      sleepers_.fetch_sub(1);
    }
    return check();
  }
  void wake() {
    if (sleepers_.load() == 0) return;
    std::lock_guard lock(mutex_);
    cv_.notify_all();
  }
  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
  }
  // Empty unless a rank that has not arrived has returned from its function (run_threads): it
  // never will, so waiting out the timeout would only delay the same failure.
  std::string returned_message(const char* op, int rank, std::uint64_t my) const {
    std::string gone;
    for (int r = 0; r < size(); ++r)
      if (arrived_[static_cast<std::size_t>(r)].load() != my + 1 && abort_->returned(world_ranks_[static_cast<std::size_t>(r)]))
        gone += (gone.empty() ? "" : ", ") + member(r);
    if (gone.empty()) return {};
    return std::string(op) + " on group '" + name_ + "' (size " + std::to_string(size()) + ") at rank " + member(rank) +
           ": ranks " + gone + " returned from their function before arriving at it (a call skipped, or an asynchronous " +
           "one never waited for; every rank must issue the same collectives in the same order)";
  }
  std::string timeout_message(const char* op, int rank, std::uint64_t my) const {
    std::string missing;
    for (int r = 0; r < size(); ++r)
      if (arrived_[static_cast<std::size_t>(r)].load() != my + 1) missing += (missing.empty() ? "" : ", ") + member(r);
    return std::string(op) + " on group '" + name_ + "' (size " + std::to_string(size()) + ") timed out after " +
           std::to_string(opt_.timeout.count()) + " ms at rank " + member(rank) + ": ranks " + missing +
           " did not arrive (a rank died, hangs, or called a different collective; the timeout is the key "
           "communication.timeout)";
  }

  std::string member(int r) const { return member_text(r, world_ranks_[static_cast<std::size_t>(r)]); }

  std::vector<int> world_ranks_;
  std::shared_ptr<AbortFlag> abort_;
  std::string name_;
  CommOptions opt_;
  std::vector<Slot> slots_;
  std::atomic<std::uint64_t> state_{0};  // generation << 32 | arrivals
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::atomic<std::uint64_t>> arrived_;  // per rank: the last generation it arrived for, + 1 (messages only)
  std::mutex mail_mutex_;
  std::condition_variable mail_cv_;
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;
};

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
