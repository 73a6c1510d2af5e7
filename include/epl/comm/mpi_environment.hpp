#pragma once
/// \file
/// \brief MPI's lifetime in a process (comm::MpiEnvironment), EPL_MPI_CHECK, and the process's
/// failed state. Part of epl::mpi: the files comm/mpi*.hpp are the only ones that include <mpi.h>.
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>

#include "epl/core/error.hpp"

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

/// \brief Initialises MPI (thread-multiple, for asynchronous operations) for its lifetime.
///
/// Destroyed while an exception unwinds, it aborts the job (MPI_Abort) instead of finalizing:
/// MPI_Finalize waits for every peer to finalize too, so a failed rank would hold back its own
/// error and leave the others waiting. epl::launch catches, prints and aborts before that.
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
