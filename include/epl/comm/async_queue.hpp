#pragma once
/// \file
/// \brief The worker thread behind a communicator's asynchronous operations: tasks run in
/// issue order; a blocking operation first drains the queue, so one communicator's operations
/// always complete in the order they were issued.
///
/// Tasks still queued when the communicator is cancelled or destroyed never run: their Work
/// fails with the reason. A rank that unwinds from an exception would otherwise run every queued
/// collective, each waiting a full timeout for peers, on buffers its unwinding already freed.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "epl/comm/communicator.hpp"
#include "epl/device/cpu/parallel.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
namespace detail {

class AsyncQueue {
 public:
  AsyncQueue() = default;
  AsyncQueue(const AsyncQueue&) = delete;
  AsyncQueue& operator=(const AsyncQueue&) = delete;
  ~AsyncQueue() {
    cancel_pending("its communicator was destroyed before the operation started");
    stop();
  }

  /// Runs task on the worker (started on first use); the Work reports its completion.
  Work enqueue(std::function<void()> task) {
    start();
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({std::move(task), state});
    }
    cv_.notify_all();
    return Work(state);
  }
  /// Waits until every queued task has run (a no-op on the worker thread itself).
  void drain() {
    if (!thread_.joinable() || on_worker()) return;
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  /// Fails every task that has not started with an epl::Error giving `reason`; returns how many.
  std::size_t cancel_pending(const std::string& reason) noexcept {
    std::deque<Entry> dropped;
    {
      std::lock_guard lock(mutex_);
      dropped.swap(queue_);
    }
    for (auto& e : dropped) {
      try {
        EPL_FAIL("asynchronous operation cancelled: ", reason);
      } catch (...) {
        e.state->finish(std::current_exception());
      }
    }
    cv_.notify_all();
    return dropped.size();
  }
  /// True while a task runs or waits to run.
  [[nodiscard]] bool busy() {
    std::lock_guard lock(mutex_);
    return busy_ || !queue_.empty();
  }
  void stop() noexcept {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  struct Entry {
    std::function<void()> task;
    std::shared_ptr<Work::State> state;
  };
  static bool& on_worker() {
    static thread_local bool flag = false;
    return flag;
  }
  void start() {
    if (thread_.joinable()) return;
    const int threads = epl::detail::cpu::threads(), rank = current_rank();
    thread_ = std::thread([this, threads, rank] {
      RankScope scope(rank);  // its errors name the rank it works for
      epl::detail::cpu::set_threads(threads);
      on_worker() = true;
      std::unique_lock lock(mutex_);
      while (true) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        Entry e = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        e.state->start();
        try {
          e.task();
          e.state->finish(nullptr);
        } catch (...) {
          e.state->finish(std::current_exception());
        }
        lock.lock();
        busy_ = false;
        cv_.notify_all();
      }
    });
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
