#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/checkpoint/serializer.hpp now; it is kept for 0.2.x and removed
/// in 0.3 (CHANGELOG.md).
#pragma message("epl/runtime/serializer.hpp is deprecated: include epl/checkpoint/serializer.hpp")
#include "epl/checkpoint/serializer.hpp"
