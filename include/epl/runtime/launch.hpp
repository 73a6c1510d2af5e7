#pragma once
/// \file
/// \brief epl::launch — run a training function on the ranks this process was started with:
/// the MPI processes when started by mpirun / epl-launch (and built with epl::mpi), otherwise
/// thread ranks of this process (EPL_NUM_RANKS, or the count given; 1 by default).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "epl/comm/threads.hpp"
#if defined(EPL_WITH_MPI)
#include "epl/comm/mpi.hpp"
#endif

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

/// \brief Calls fn(communicator&) on every rank: a comm::MpiCommunicator under mpirun, a
/// comm::ThreadCommunicator otherwise. fn is generic over the communicator type.
template <class Fn>
void launch(int& argc, char**& argv, Fn&& fn, LaunchOptions opt = {}) {
  if (started_by_mpi()) {
#if defined(EPL_WITH_MPI)
    comm::MpiEnvironment env(&argc, &argv);
    comm::MpiCommunicator world;
    epl::detail::cpu::set_threads(opt.threads_per_rank);
    fn(world);
    return;
#else
    EPL_FAIL("this program was started by mpirun but built without MPI; link it with epl::mpi (EPL_ENABLE_MPI=ON)");
#endif
  }
  (void)argc;
  (void)argv;
  const int ranks = opt.ranks > 0 ? opt.ranks : comm::rank_count_from_env(1);
  int threads = opt.threads_per_rank;
  if (threads <= 0) threads = std::max(1, epl::detail::cpu::threads() / ranks);
  comm::run_threads(ranks, std::forward<Fn>(fn), {.threads_per_rank = threads});
}

/// \brief Prints a line prefixed with the rank ("[rank 3] ..."), for logs from every rank.
template <class... Parts>
void log_rank(int rank, const Parts&... parts) {
  std::string line = "[rank " + std::to_string(rank) + "] " + detail::concat(parts...) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace v0
}  // namespace epl
