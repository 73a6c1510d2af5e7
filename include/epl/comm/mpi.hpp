#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/comm/mpi/mpi.hpp now; it is kept for 0.2.x and
/// removed in 0.3 (CHANGELOG.md).
#pragma message("epl/comm/mpi.hpp is deprecated: include epl/comm/mpi/mpi.hpp")
#include "epl/comm/mpi/mpi.hpp"
