#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/data/data.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/data.hpp is deprecated: include epl/data/data.hpp")
#include "epl/data/data.hpp"
