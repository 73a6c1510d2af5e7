#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/tune/combinations.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/combinations.hpp is deprecated: include epl/tune/combinations.hpp")
#include "epl/tune/combinations.hpp"
