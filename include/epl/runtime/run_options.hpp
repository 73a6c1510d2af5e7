#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/config/run_options.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/run_options.hpp is deprecated: include epl/config/run_options.hpp")
#include "epl/config/run_options.hpp"
