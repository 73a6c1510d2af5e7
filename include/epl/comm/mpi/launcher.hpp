#pragma once
/// \file
/// \brief comm::MpiLauncher — runs a function on this MPI process as one rank of MPI_COMM_WORLD
/// (under mpirun, epl-launch or srun): MPI started and finished around it, and a failure printed
/// with the rank and turned into MPI_Abort, so no peer waits in MPI_Finalize for a rank that is gone;
/// and a rank that returns finalizes only once every rank has returned (MpiCommunicator::finish).
#include <cstdio>
#include <exception>

#include "epl/comm/mpi/communicator.hpp"
#include "epl/comm/mpi/environment.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

struct MpiLauncher {
  static constexpr bool kAvailable = true;
  /// \brief fn(MpiCommunicator& world) on this process; returns 0, or does not return when it
  /// fails (the job is aborted with `failed`).
  template <class Fn>
  static int run(CommOptions opt, int failed, Fn&& fn) {
    MpiEnvironment env(nullptr, nullptr);
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    RankScope scope(rank);
    try {
      MpiCommunicator world(MPI_COMM_WORLD, opt);
      fn(world);
      // every rank agrees that all finished before any finalizes: a rank that returned early is
      // named to its peers, and fails within the timeout rather than wait in MPI_Finalize
      world.finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", epl::detail::with_rank(rank, e.what()).c_str());
      MpiEnvironment::abort_job(failed);
    } catch (...) {
      std::fprintf(stderr, "[rank %d] an exception that is not a std::exception\n", rank);
      MpiEnvironment::abort_job(failed);
    }
    return 0;
  }
};

}  // namespace comm
}  // namespace v0
}  // namespace epl
