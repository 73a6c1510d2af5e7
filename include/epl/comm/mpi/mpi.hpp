#pragma once
/// \file
/// \brief epl::mpi — MPI processes as ranks: the environment, the communicator and the store.
/// The files of comm/mpi/ are the only ones of epl that include <mpi.h>; link epl::mpi.
#include "epl/comm/mpi/communicator.hpp"
#include "epl/comm/mpi/environment.hpp"
#include "epl/comm/mpi/store.hpp"
