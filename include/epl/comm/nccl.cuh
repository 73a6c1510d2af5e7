#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/comm/nccl/nccl.cuh now; it is kept for 0.2.x and
/// removed in 0.3 (CHANGELOG.md).
#pragma message("epl/comm/nccl.cuh is deprecated: include epl/comm/nccl/nccl.cuh")
#include "epl/comm/nccl/nccl.cuh"
