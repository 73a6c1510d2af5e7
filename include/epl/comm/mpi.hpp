#pragma once
/// \file
/// \brief epl::mpi — MPI processes as ranks: the environment, the communicator and the store.
/// The files comm/mpi*.hpp are the only ones of epl that include <mpi.h>; link epl::mpi.
#include "epl/comm/mpi_communicator.hpp"
#include "epl/comm/mpi_environment.hpp"
#include "epl/comm/mpi_store.hpp"
