#pragma once
/// \file
/// \brief The communicator concept: collectives, point-to-point, sub-groups and asynchronous
/// work handles over host buffers, shared by every backend (threads, MPI, NCCL).
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief How a reduction combines ranks' elements. kMean is kSum divided by the group size.
enum class ReduceOp : std::uint8_t { kSum, kMean, kMax, kMin };

constexpr const char* name_of(ReduceOp op) {
  constexpr const char* names[] = {"sum", "mean", "max", "min"};
  return names[static_cast<int>(op)];
}

/// \brief Where a buffer lives, and which buffers a communicator moves: host memory (thread
/// ranks, MPI) or device memory (NCCL).
enum class MemorySpace : std::uint8_t { kHost, kDevice };
constexpr const char* name_of(MemorySpace s) { return s == MemorySpace::kHost ? "host" : "device"; }

/// \brief The memory space of a communicator type's buffers: host unless the backend says so.
template <class C> struct space_of : std::integral_constant<MemorySpace, MemorySpace::kHost> {};
template <class C> inline constexpr MemorySpace space_of_v = space_of<C>::value;

/// \brief A view of elements in memory the communicator can reach: pointer, count, dtype, and
/// where it lives. Built from a Tensor implicitly, so every operation takes tensors as well.
struct Buffer {
  void* data = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::kF32;
  MemorySpace space = MemorySpace::kHost;

  Buffer() = default;
  Buffer(void* d, std::int64_t n, DType t, MemorySpace s = MemorySpace::kHost) : data(d), count(n), dtype(t), space(s) {}
  Buffer(const Tensor& t)  // NOLINT: implicit by design
      : data(t.raw()), count(t.numel()), dtype(t.dtype()),
        space(host_reachable(t.device().kind) ? MemorySpace::kHost : MemorySpace::kDevice) {}
  [[nodiscard]] std::size_t bytes() const noexcept { return static_cast<std::size_t>(count) * size_of(dtype); }
  [[nodiscard]] char* byte_ptr(std::int64_t element) const noexcept {
    return static_cast<char*>(data) + static_cast<std::size_t>(element) * size_of(dtype);
  }
};

/// \brief Bytes this rank moved, as the algorithm moves them (what it read from or wrote to
/// other ranks' memory, or sent and received on the wire), per communicator.
struct CommStats {
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::int64_t operations = 0;
};

/// \brief Options every backend shares.
struct CommOptions {
  /// A blocking operation that has not completed after this long fails with an epl::Error
  /// naming the operation, the group, this rank and the ranks that did not arrive.
  std::chrono::milliseconds timeout{300'000};
};

/// \brief The handle of an asynchronous operation: wait() blocks until it completes and
/// rethrows its failure; test() says whether it has completed.
class Work {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point started{}, finished{};
    /// Work completed by its waiter (a receive that takes its message when waited for): run
    /// once, by the first wait(), in the waiting thread.
    std::function<void()> deferred;
    /// Work that can be checked without blocking (an MPI request): test() calls it until it
    /// returns true, which completes the work (and drops `deferred`).
    std::function<bool()> poll;
    void start() {
      std::lock_guard lock(mutex);
      started = std::chrono::steady_clock::now();
    }
    void finish(std::exception_ptr e) {
      {
        std::lock_guard lock(mutex);
        done = true;
        error = e;
        finished = std::chrono::steady_clock::now();
      }
      done_cv.notify_all();
    }
  };

  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}

  /// \brief True when the operation has completed (successfully or not); never blocks.
  [[nodiscard]] bool test() const {
    if (!state_) return true;
    std::function<bool()> poll;
    {
      std::lock_guard lock(state_->mutex);
      if (state_->done || !state_->poll) return state_->done;
      poll = state_->poll;
    }
    std::exception_ptr error;
    try {
      if (!poll()) return false;
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(state_->mutex);
      state_->deferred = nullptr;
      state_->poll = nullptr;
    }
    state_->finish(error);
    return true;
  }
  /// \brief Seconds the operation ran (0 until it completed, or when its start is unknown).
  [[nodiscard]] double seconds() const {
    if (!state_) return 0;
    std::lock_guard lock(state_->mutex);
    if (!state_->done || state_->started == std::chrono::steady_clock::time_point{}) return 0;
    return std::chrono::duration<double>(state_->finished - state_->started).count();
  }
  /// \brief When the operation started and finished (both zero until it completed, the start
  /// zero when unknown).
  [[nodiscard]] std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point> interval() const {
    if (!state_) return {};
    std::lock_guard lock(state_->mutex);
    if (!state_->done) return {};
    return {state_->started, state_->finished};
  }
  /// \brief Blocks until completion; rethrows the operation's error.
  void wait() const {
    if (!state_) return;
    std::function<void()> deferred;
    {
      std::lock_guard lock(state_->mutex);
      deferred = std::move(state_->deferred);
      state_->deferred = nullptr;
    }
    if (deferred) {
      try {
        deferred();
        state_->finish(nullptr);
      } catch (...) {
        state_->finish(std::current_exception());
      }
    }
    std::unique_lock lock(state_->mutex);
    state_->done_cv.wait(lock, [&] { return state_->done; });
    if (state_->error) std::rethrow_exception(state_->error);
  }
  /// \brief A Work that is already complete.
  static Work done() {
    auto s = std::make_shared<State>();
    s->finish(nullptr);
    return Work(s);
  }
  /// \brief A Work that runs `complete` in the thread that first waits for it; test() calls
  /// `poll` (when given), which returns true once the work is complete without waiting.
  static Work deferred(std::function<void()> complete, std::function<bool()> poll = {}) {
    auto s = std::make_shared<State>();
    s->start();
    s->deferred = std::move(complete);
    s->poll = std::move(poll);
    return Work(s);
  }

 private:
  std::shared_ptr<State> state_;
};

/// \brief C satisfies communicator if 1. it names its rank and size, 2. runs every collective
/// and point-to-point operation on Buffers, blocking and (for the gradient path) asynchronous,
/// (isend/irecv: the buffer belongs to the operation until its Work is waited for),
/// 3. splits into sub-communicators of its own type, 4. reports the bytes it moved, and
/// 5. cancels its outstanding asynchronous work (a failing rank's way out).
template <class C>
concept communicator = requires(C& c, const Buffer& b, int r) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_reduce(b, b, ReduceOp::kSum);
  { c.all_reduce_async(b, b, ReduceOp::kSum) } -> std::same_as<Work>;
  c.reduce_scatter(b, b, ReduceOp::kSum);
  c.all_gather(b, b);
  c.broadcast(b, r);
  c.reduce(b, b, ReduceOp::kSum, r);
  c.send(b, r, r);
  c.recv(b, r, r);
  { c.isend(b, r, r) } -> std::same_as<Work>;
  { c.irecv(b, r, r) } -> std::same_as<Work>;
  c.all_to_all(b, b);
  c.barrier();
  { c.split(r, r) } -> std::same_as<C>;
  { c.stats() } -> std::same_as<CommStats>;
  c.cancel(std::string());
};

namespace detail {
/// A group's rank r as a message names it: "1", or "1 (world rank 3)" when its world rank differs,
/// so that a timeout in a sub-group names the process or thread rank that hung.
inline std::string member_text(int r, int world_rank) {
  return world_rank == r ? std::to_string(r) : std::to_string(r) + " (world rank " + std::to_string(world_rank) + ")";
}
/// The shares of `count` elements over `n` ranks: rank r owns [offset(r), offset(r + 1)).
inline std::int64_t share_offset(std::int64_t count, int n, int r) { return count * r / n; }

/// What a rank's own arguments to a collective get wrong (empty when nothing): its local checks,
/// caught rather than thrown, so that the rank still takes part in the agreement of the
/// collective and every rank fails alike, in step (a rank that threw alone would pair its next
/// collective with its peers' current one).
template <class Check>
std::string invalid_arguments(Check&& check) {
  try {
    check();
    return {};
  } catch (const Error& e) {
    return e.detail();
  }
}

/// The per-rank counts of an all_to_all with equal blocks, after checking that it has them.
inline std::vector<std::int64_t> equal_blocks(const Buffer& in, const Buffer& out, int n, const std::string& group) {
  EPL_CHECK(in.count == out.count && in.count % n == 0, "all_to_all on group '", group, "': input ", in.count, " and output ",
            out.count, " elements must be equal and divisible by the group size ", n, "; use all_to_all_v for uneven blocks");
  return std::vector<std::int64_t>(static_cast<std::size_t>(n), in.count / n);
}

/// The local checks of an all_to_all_v, before any rank waits for another: one send and one
/// receive count per rank, none negative, and each side's counts fitting its buffer.
inline void check_all_to_all_counts(const Buffer& in, const std::vector<std::int64_t>& send_counts, const Buffer& out,
                                    const std::vector<std::int64_t>& recv_counts, int n, const std::string& group) {
  EPL_CHECK(static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n, "all_to_all_v on group '",
            group, "': need one send and one receive count per rank (", n, "), got ", send_counts.size(), " and ", recv_counts.size());
  std::int64_t sent = 0, received = 0;
  for (int q = 0; q < n; ++q) {
    EPL_CHECK(send_counts[q] >= 0 && recv_counts[q] >= 0, "all_to_all_v on group '", group, "': negative count for rank ", q);
    sent += send_counts[q];
    received += recv_counts[q];
  }
  EPL_CHECK(sent <= in.count && received <= out.count, "all_to_all_v on group '", group, "': sends ", sent, " of an input of ",
            in.count, " elements and receives ", received, " into an output of ", out.count);
  EPL_CHECK(in.dtype == out.dtype, "all_to_all_v on group '", group, "': input ", name_of(in.dtype), " and output ",
            name_of(out.dtype), " differ");
}
}  // namespace detail

}  // namespace comm
}  // namespace v0
}  // namespace epl
