// The MPI tests run under mpirun; every rank runs every test case. A failure on any rank makes
// that process, and so mpirun, exit non-zero.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "epl/comm/mpi/mpi.hpp"

epl::comm::MpiCommunicator* g_world = nullptr;  // the tests' world, freed before MPI_Finalize

int main(int argc, char** argv) {
  epl::comm::MpiEnvironment env(&argc, &argv);
  int processes = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  if (processes < 2) {  // the cases compare ranks with each other: one process would fail them, or divide by zero
    std::fprintf(stderr, "epl_test_mpi: %d MPI process; run it under mpirun with 2 or more (mpirun -np 2 %s), as ctest's mpi.np2 does\n",
                 processes, argv[0]);
    return 2;
  }
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
