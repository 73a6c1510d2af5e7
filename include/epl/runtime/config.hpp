#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/config/config.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/config.hpp is deprecated: include epl/config/config.hpp")
#include "epl/config/config.hpp"
