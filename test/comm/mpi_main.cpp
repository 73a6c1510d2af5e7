// The MPI tests run under mpirun; every rank runs every test case. A failure on any rank makes
// that process, and so mpirun, exit non-zero.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "epl/comm/mpi/mpi.hpp"

epl::comm::MpiCommunicator* g_world = nullptr;  // the tests' world, freed before MPI_Finalize

int main(int argc, char** argv) {
  epl::comm::MpiEnvironment env(&argc, &argv);
  auto world = std::make_unique<epl::comm::MpiCommunicator>(MPI_COMM_WORLD, epl::comm::CommOptions{std::chrono::milliseconds(3000)});
  g_world = world.get();
  doctest::Context ctx(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) ctx.setOption("out", "/dev/null");  // one report; failures still set the exit code
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  world.reset();
  return worst;
}
