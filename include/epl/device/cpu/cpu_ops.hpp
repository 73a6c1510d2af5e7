#pragma once
/// \file
/// \brief Deprecated (0.2): the CPU device's operations are defined in epl/device/cpu/cpu.ipp, which
/// epl/device/cpu/cpu.hpp includes; this path is kept for 0.2.x and removed in 0.3 (CHANGELOG.md).
#pragma message("epl/device/cpu/cpu_ops.hpp is deprecated: include epl/device/cpu/cpu.hpp")
#include "epl/device/cpu/cpu.hpp"
