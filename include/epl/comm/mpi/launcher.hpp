#pragma once
/// \file
/// \brief comm::MpiLauncher — runs a function on this MPI process as one rank of MPI_COMM_WORLD
/// (under mpirun, epl-launch or srun): MPI started and finished around it, and a failure printed
/// with the rank and turned into MPI_Abort, so no peer waits in MPI_Finalize for a rank that is gone;
/// and a rank that returns finalizes only once every rank has returned (MpiCommunicator::finish).
/// The function sees MPI_COMM_WORLD behind comm::Communicator.
#include <cstdio>
#include <exception>
#include <functional>

#include "epl/comm/any_communicator.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

// run_world's one definition: inline in a header-only MPI program; under epl::precompiled built
// with MPI (EPL_PRECOMPILED_MPI) compiled once in that library (src/precompiled_mpi.cpp), so a
// program compiles none of MpiCommunicator's handshakes and collectives itself.
#if defined(EPL_PRECOMPILED_MPI_DEFINITIONS)
#define EPL_MPI_LINKED
#define EPL_MPI_LINKED_BODIES 1
#elif defined(EPL_PRECOMPILED_MPI)
#define EPL_MPI_LINKED
#define EPL_MPI_LINKED_BODIES 0
#else
#define EPL_MPI_LINKED inline
#define EPL_MPI_LINKED_BODIES 1
#endif
}  // namespace comm
}  // namespace v0
}  // namespace epl

// The MPI backend and <mpi.h>: only where run_world's body is compiled.
#if EPL_MPI_LINKED_BODIES
#include "epl/comm/mpi/communicator.hpp"
#include "epl/comm/mpi/environment.hpp"
#endif

namespace epl {
inline namespace v0 {
namespace comm {

struct MpiLauncher {
  static constexpr bool kAvailable = true;
  /// \brief fn(Communicator& world) on this process, `world` MPI_COMM_WORLD; returns 0, or does
  /// not return when it fails (the job is aborted with `failed`).
  static int run_world(CommOptions opt, int failed, const std::function<void(Communicator&)>& fn);
  /// \brief fn(Communicator& world), as run_world.
  template <class Fn>
  static int run(CommOptions opt, int failed, Fn&& fn) {
    return run_world(opt, failed, [&](Communicator& world) { fn(world); });
  }
};

#if EPL_MPI_LINKED_BODIES
EPL_MPI_LINKED int MpiLauncher::run_world(CommOptions opt, int failed, const std::function<void(Communicator&)>& fn) {
  MpiEnvironment env(nullptr, nullptr);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  RankScope scope(rank);
  try {
    MpiCommunicator world(MPI_COMM_WORLD, opt);
    Communicator borrowed = Communicator::borrow(world);
    fn(borrowed);
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
#endif

}  // namespace comm
}  // namespace v0
}  // namespace epl
