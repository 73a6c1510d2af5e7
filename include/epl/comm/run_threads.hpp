#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/comm/threads/run_threads.hpp now; it is kept for
/// 0.2.x and removed in 0.3 (CHANGELOG.md).
#pragma message("epl/comm/run_threads.hpp is deprecated: include epl/comm/threads/run_threads.hpp")
#include "epl/comm/threads/run_threads.hpp"
