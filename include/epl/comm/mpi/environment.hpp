#pragma once
/// \file
/// \brief MPI's lifetime in a process (comm::MpiEnvironment), EPL_MPI_CHECK, and the process's
/// failed state. Part of epl::mpi: the files of comm/mpi/ are the only ones that include <mpi.h>.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/device/cpu/parallel.hpp"

#define EPL_MPI_CHECK(call)                                                            \
  do {                                                                                 \
    int epl_rc_ = (call);                                                              \
    if (epl_rc_ != MPI_SUCCESS) {                                                      \
      char epl_msg_[MPI_MAX_ERROR_STRING];                                             \
      int epl_len_ = 0;                                                                \
      MPI_Error_string(epl_rc_, epl_msg_, &epl_len_);                                  \
      EPL_FAIL(#call, " failed: ", std::string(epl_msg_, static_cast<std::size_t>(epl_len_))); \
    }                                                                                  \
  } while (false)

namespace epl {
inline namespace v0 {
namespace comm {

namespace detail {
/// The first communication failure of this process (a timeout, a cancelled communicator). Once
/// set, every MPI operation of the process fails at once instead of waiting for peers one more
/// timeout each: the job is failing, and only its error matters.
class MpiFailure {
 public:
  static MpiFailure& get() {
    static auto* f = new MpiFailure;  // never destroyed: worker threads may still look at it
    return *f;
  }
  void raise(std::string reason) {
    std::lock_guard lock(mutex_);
    if (raised_.load()) return;
    reason_ = std::move(reason);
    raised_.store(true);
  }
  [[nodiscard]] bool raised() const noexcept { return raised_.load(); }
  [[nodiscard]] std::string reason() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false};
  std::string reason_;
};
}  // namespace detail

/// \brief Ends the job loudly when a blocking MPI call outlives its deadline. A collective that
/// has proved every rank arrived (the header exchange) may run as MPI's blocking call, which
/// cannot time out; a rank that stops in the middle of it would leave its peers waiting forever.
/// The watchdog (one thread per process, started on first use) prints what was waited for and
/// aborts the job instead.
class MpiWatchdog {
 public:
  /// \brief Watches the calling scope: past `timeout`, the job is aborted naming `what`.
  class Guard {
   public:
    Guard(const char* what, std::chrono::milliseconds timeout) : id_(get().watch(what, timeout)) {}
    ~Guard() { get().unwatch(id_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    std::uint64_t id_;
  };

 private:
  struct Watch {
    std::uint64_t id;
    const char* what;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;
    int rank;
  };
  static MpiWatchdog& get() {
    static auto* w = new MpiWatchdog;  // never destroyed: its thread runs until the process ends
    return *w;
  }
  std::uint64_t watch(const char* what, std::chrono::milliseconds timeout) {
    std::lock_guard lock(mutex_);
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
    int rank = current_rank();  // the rank scope epl::launch sets; a program of its own has none
    if (rank < 0) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    watches_.push_back({++next_, what, std::chrono::steady_clock::now() + timeout, timeout, rank});
    return next_;
  }
  void unwatch(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < watches_.size(); ++i)
      if (watches_[i].id == id) {
        watches_[i] = watches_.back();
        watches_.pop_back();
        return;
      }
  }
  [[noreturn]] void run() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      for (const auto& w : watches_)
        if (now >= w.deadline) {
          std::fprintf(stderr, "[rank %d] epl error: %s did not complete within %lld ms after every rank had arrived: a rank "
                               "stopped or died in the transfer (the timeout is the key communication.timeout); aborting the job\n",
                       w.rank, w.what, static_cast<long long>(w.timeout.count()));
          std::fflush(stderr);
          MPI_Abort(MPI_COMM_WORLD, 2);
          std::_Exit(2);
        }
    }
  }
  std::mutex mutex_;
  bool started_ = false;
  std::uint64_t next_ = 0;
  std::vector<Watch> watches_;
};

/// \brief Initialises MPI (thread-multiple, for asynchronous operations) for its lifetime.
///
/// Destroyed while an exception unwinds, it aborts the job (MPI_Abort) instead of finalizing:
/// MPI_Finalize waits for every peer to finalize too, so a failed rank would hold back its own
/// error and leave the others waiting. epl::launch catches, prints and aborts before that.
///
/// When it starts MPI and OMP_NUM_THREADS is not set, the calling thread's OpenMP regions take
/// this process's share of its node's cores: the cores it may run on divided by the processes of
/// its node (at least 1), as thread ranks share a process's cores. OpenMP's default, every core
/// in every process, put `mpirun -np 4` on 2 cores at 8 spinning threads, 2.2x slower than one each.
class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv) {
    int ready = 0;
    MPI_Initialized(&ready);
    if (ready) return;
    int provided = 0;
    EPL_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owner_ = true;
    EPL_CHECK(provided >= MPI_THREAD_MULTIPLE, "this MPI library lacks MPI_THREAD_MULTIPLE; asynchronous collectives need it");
    if (std::getenv("OMP_NUM_THREADS") == nullptr) epl::detail::cpu::set_threads(std::max(1, epl::detail::cpu::threads() / node_processes()));
  }

  /// \brief The processes of MPI_COMM_WORLD that share this process's node (its memory).
  static int node_processes() {
    MPI_Comm node = MPI_COMM_NULL;
    EPL_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int n = 1;
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    return n;
  }
  ~MpiEnvironment() {
    if (!owner_) return;
    if (std::uncaught_exceptions() > 0) abort_job(2);
    MPI_Finalize();
  }
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  /// \brief Ends every process of the job with `code` (mpirun kills the others): the way out
  /// for a rank that failed, whose peers would otherwise wait for it.
  [[noreturn]] static void abort_job(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it did
  }

 private:
  bool owner_ = false;
};

}  // namespace comm
}  // namespace v0
}  // namespace epl
