#pragma once
/// \file
/// \brief Deprecated (0.2): nn::Context is nn::Pass, in epl/nn/pass.hpp; this header is kept for
/// 0.2.x and removed in 0.3 (CHANGELOG.md).
#pragma message("epl/nn/context.hpp is deprecated: include epl/nn/pass.hpp (nn::Context is nn::Pass)")
#include "epl/device/cpu/cpu.hpp"
#include "epl/nn/pass.hpp"

namespace epl {
inline namespace v0 {
namespace nn {
/// \brief The CPU pass of 0.1 (kept for 0.2.x, removed in 0.3).
using CpuContext [[deprecated("renamed epl::nn::Pass<epl::device::Cpu>; see CHANGELOG.md")]] = Pass<device::Cpu>;
}  // namespace nn
}  // namespace v0
}  // namespace epl
