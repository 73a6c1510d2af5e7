#pragma once
/// \file
/// \brief The worker thread behind a communicator's asynchronous operations: tasks run in
/// issue order; a blocking operation first drains the queue, so one communicator's operations
/// always complete in the order they were issued.
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
  ~AsyncQueue() { stop(); }

  /// Runs task on the worker (started on first use); the Work reports its completion.
  Work enqueue(std::function<void()> task) {
    start();
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back([task = std::move(task), state] {
        state->start();
        try {
          task();
          state->finish(nullptr);
        } catch (...) {
          state->finish(std::current_exception());
        }
      });
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
  static bool& on_worker() {
    static thread_local bool flag = false;
    return flag;
  }
  void start() {
    if (thread_.joinable()) return;
    const int threads = epl::detail::cpu::threads();
    thread_ = std::thread([this, threads] {
      epl::detail::cpu::set_threads(threads);
      on_worker() = true;
      std::unique_lock lock(mutex_);
      while (true) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        auto task = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        task();
        lock.lock();
        busy_ = false;
        cv_.notify_all();
      }
    });
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace detail
}  // namespace comm
}  // namespace v0
}  // namespace epl
