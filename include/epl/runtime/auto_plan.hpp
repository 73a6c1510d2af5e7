#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/tune/auto_plan.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/auto_plan.hpp is deprecated: include epl/tune/auto_plan.hpp")
#include "epl/tune/auto_plan.hpp"
