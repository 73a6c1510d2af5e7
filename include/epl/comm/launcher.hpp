#pragma once
/// \file
/// \brief comm::ProcessLauncher — the backend that runs a rank as a process of a job started by
/// mpirun (epl-launch, srun), chosen in this one place: comm::MpiLauncher in a program built with
/// epl::mpi (which defines EPL_WITH_MPI), else a launcher that says how to get one. Backends are
/// types; the runtime's epl::launch names none of them.
#include <cstdio>

#include "epl/comm/communicator.hpp"

#if defined(EPL_WITH_MPI)
#include "epl/comm/mpi/launcher.hpp"
#endif

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief The launcher of a program built without MPI: started by mpirun, it fails saying how to
/// build it with MPI, or how to run it without.
struct NoProcessLauncher {
  static constexpr bool kAvailable = false;
  template <class Fn>
  static int run(CommOptions, int failed, Fn&&) {
    std::fprintf(stderr, "epl: this program was started by mpirun but built without MPI; link it with epl::mpi "
                         "(EPL_ENABLE_MPI=ON), or run it without mpirun (EPL_NUM_RANKS for thread ranks)\n");
    return failed;
  }
};

#if defined(EPL_WITH_MPI)
using ProcessLauncher = MpiLauncher;
#else
using ProcessLauncher = NoProcessLauncher;
#endif

}  // namespace comm
}  // namespace v0
}  // namespace epl
