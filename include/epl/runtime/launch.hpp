#pragma once
/// \file
/// \brief epl::launch — run a training function on the ranks this process was started with:
/// the MPI processes when started by mpirun / epl-launch (and built with epl::mpi), otherwise
/// thread ranks of this process (EPL_NUM_RANKS, or the count given; 1 by default).
///
/// A failure ends the job loudly: the failing rank's error is printed at once, prefixed with its
/// rank; every rank stops within the timeout (communication.timeout) plus a small slack; and the
/// program gets a non-zero status. Under MPI the failing process aborts the job (MPI_Abort), so
/// no rank waits in MPI_Finalize for a peer that is gone or hung.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "epl/comm/launcher.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/config/config.hpp"
#include "epl/runtime/context.hpp"

namespace epl {
inline namespace v0 {

/// \brief True when this process was started by an MPI launcher.
inline bool started_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

/// \brief Options of launch.
struct LaunchOptions {
  int ranks = 0;             ///< thread ranks; 0: EPL_NUM_RANKS, else 1
  int threads_per_rank = 0;  ///< OpenMP threads per rank; 0: all cores / ranks
};

/// \brief The exit status of a failed launch.
inline constexpr int kLaunchFailed = 2;

namespace detail {
/// \brief LaunchOptions' ranges, checked alike for thread ranks and MPI processes.
inline void check_launch_options(const LaunchOptions& opt) {
  EPL_CHECK(opt.ranks >= 0 && opt.ranks <= comm::kMaxThreadRanks, "launch: LaunchOptions::ranks is ", opt.ranks, "; give a number of "
            "thread ranks from 1 to ", comm::kMaxThreadRanks, ", or 0 for EPL_NUM_RANKS (1 when unset)");
  EPL_CHECK(opt.threads_per_rank >= 0, "launch: LaunchOptions::threads_per_rank is ", opt.threads_per_rank,
            "; give OpenMP threads per rank (1 or more), or 0 for the cores divided among the ranks");
}
}  // namespace detail

/// \brief The communication options of a configuration (communication.timeout).
inline comm::CommOptions comm_options(const Config& cfg) {
  comm::CommOptions o;
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(cfg.get(keys::timeout) * 1000.0));
  return o;
}

/// \brief Calls fn(epl::Context&) on every rank: over MPI processes under mpirun, over thread
/// ranks otherwise; the program does not name the backend. Returns 0 when every rank returned,
/// kLaunchFailed after a failure (printed, rank-prefixed, when it happened); under MPI a
/// failure does not return: the job is aborted with kLaunchFailed.
template <class Fn>
[[nodiscard]] int launch(const Config& cfg, Fn&& fn, LaunchOptions opt = {}) {
  const auto comm_opt = comm_options(cfg);
  const int unthrown = epl::detail::unthrown_failures().load();  // failures a destructor printed (a trace it could not write)
  auto status = [&](int rc) { return rc == 0 && epl::detail::unthrown_failures().load() > unthrown ? kLaunchFailed : rc; };
  if (started_by_mpi())  // the process backend this program was built with (comm/launcher.hpp)
    return status(comm::ProcessLauncher::run(comm_opt, kLaunchFailed, [&](comm::Communicator& world) {
      detail::check_launch_options(opt);
      EPL_CHECK(opt.ranks == 0 || opt.ranks == world.size(), "launch: LaunchOptions::ranks is ", opt.ranks, " (thread ranks), but this "
                "program runs as ", world.size(), " MPI processes (mpirun -np ", world.size(), "); give 0 under mpirun");
      const int threads_asked = comm::rank_count_from_env(0);  // thread ranks: a different launch
      EPL_CHECK(threads_asked == 0 || threads_asked == world.size(), "EPL_NUM_RANKS=", threads_asked, " asks for thread ranks, but this "
                "program runs as ", world.size(), " MPI processes (mpirun -np ", world.size(), "); unset EPL_NUM_RANKS under mpirun");
      Context ctx(std::move(world), -1, opt.threads_per_rank);
      fn(ctx);
    }));
  std::atomic<bool> in_rank{false};
  try {
    detail::check_launch_options(opt);
    const int ranks = opt.ranks > 0 ? opt.ranks : comm::rank_count_from_env(1);
    int threads = opt.threads_per_rank;
    if (threads <= 0) threads = std::max(1, epl::detail::cpu::threads() / ranks);
    comm::run_threads(ranks, [&](comm::ThreadCommunicator& c) {
      try {
        Context ctx(c, -1, threads);
        fn(ctx);
      } catch (...) {
        in_rank.store(true);  // run_threads printed it, rank-prefixed, when it happened
        throw;
      }
    }, {.comm = comm_opt, .threads_per_rank = threads, .report = true});
    return status(0);
  } catch (const Error& e) {
    if (e.rank() < 0 && !in_rank.load()) std::fprintf(stderr, "%s\n", e.what());
    return kLaunchFailed;
  } catch (const std::exception& e) {  // a std::exception of a rank's was printed once, not again (a stranger's finding)
    if (!in_rank.load() && std::string_view(e.what()).substr(0, 6) != "[rank ") std::fprintf(stderr, "epl: %s\n", e.what());
    return kLaunchFailed;
  } catch (...) {  // `throw 42` in a rank: printed, rank-prefixed, when it happened
    return kLaunchFailed;
  }
}

/// \brief Prints a line prefixed with the rank ("[rank 3] ..."), for logs from every rank.
template <class... Parts>
void log_rank(int rank, const Parts&... parts) {
  std::string line = "[rank " + std::to_string(rank) + "] " + detail::concat(parts...) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace v0
}  // namespace epl
