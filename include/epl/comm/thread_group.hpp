#pragma once
/// \file
/// \brief The shared state of a group of thread ranks: a barrier that times out and names the
/// ranks that did not arrive, the per-rank slots through which ranks publish their buffers, a
/// mailbox for point-to-point messages, and the world-wide abort flag.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
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
  void raise(int world_rank, std::string reason) {
    std::lock_guard lock(mutex_);
    if (raised_.load()) return;
    rank_ = world_rank;
    reason_ = std::move(reason);
    raised_.store(true);
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

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false};
  int rank_ = -1;
  std::string reason_;
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
  std::shared_ptr<void> handoff;
};

class ThreadGroup {
 public:
  ThreadGroup(std::vector<int> world_ranks, std::shared_ptr<AbortFlag> abort, std::string name, CommOptions opt)
      : world_ranks_(std::move(world_ranks)), abort_(std::move(abort)), name_(std::move(name)), opt_(opt),
        slots_(world_ranks_.size()), arrived_(world_ranks_.size(), 0) {}

  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks_.size()); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return opt_; }
  [[nodiscard]] const std::shared_ptr<AbortFlag>& abort_flag() const noexcept { return abort_; }
  [[nodiscard]] int world_rank(int r) const { return world_ranks_[r]; }
  Slot& slot(int r) { return slots_[r]; }

  /// Waits until every rank of the group arrives. Fails, naming the operation, the group,
  /// this rank and the missing ranks, when the timeout passes or another rank failed.
  void arrive_and_wait(int rank, const char* op) {
    std::unique_lock lock(mutex_);
    const std::uint64_t my = generation_;
    arrived_[rank] = my + 1;
    if (++count_ == size()) {
      count_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    while (generation_ == my) {
      if (abort_->raised())
        EPL_FAIL(op, " on group '", name_, "' at rank ", rank, " stopped: ", abort_->reason());
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (generation_ == my && std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < size(); ++r)
          if (arrived_[r] != my + 1) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        std::string what = detail_timeout(op, rank, missing);
        abort_->raise(world_ranks_[rank], what);
        EPL_FAIL(what);
      }
    }
  }

  // ---- point-to-point mailbox (buffered sends) ------------------------------------------
  struct Message {
    std::vector<char> bytes;
    std::int64_t count;
    DType dtype;
  };
  void post(int src, int dst, int tag, Message m) {
    {
      std::lock_guard lock(mail_mutex_);
      mail_[{src, dst, tag}].push_back(std::move(m));
    }
    mail_cv_.notify_all();
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
        std::string what = "recv on group '" + name_ + "' at rank " + std::to_string(dst) + " timed out after " +
                           std::to_string(opt_.timeout.count()) + " ms: rank " + std::to_string(src) +
                           " did not send a message with tag " + std::to_string(tag);
        abort_->raise(world_ranks_[dst], what);
        EPL_FAIL(what);
      }
      mail_cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

 private:
  std::string detail_timeout(const char* op, int rank, const std::string& missing) const {
    return std::string(op) + " on group '" + name_ + "' (size " + std::to_string(size()) + ") timed out after " +
           std::to_string(opt_.timeout.count()) + " ms at rank " + std::to_string(rank) + ": ranks " + missing +
           " did not arrive (a rank died, hangs, or called a different collective)";
  }

  std::vector<int> world_ranks_;
  std::shared_ptr<AbortFlag> abort_;
  std::string name_;
  CommOptions opt_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<std::uint64_t> arrived_;
  std::mutex mail_mutex_;
  std::condition_variable mail_cv_;
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;
};

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
