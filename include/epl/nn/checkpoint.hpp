#pragma once
/// \file
/// \brief Deprecated (0.2): this header is epl/nn/recompute.hpp now; it is kept for 0.2.x and
/// removed in 0.3 (CHANGELOG.md).
#pragma message("epl/nn/checkpoint.hpp is deprecated: include epl/nn/recompute.hpp (epl::Checkpoint is epl::Recompute)")
#include "epl/nn/recompute.hpp"
