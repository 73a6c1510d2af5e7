#pragma once
/// \file
/// \brief The state a rank keeps between steps (parameters, gradients, optimizer state) by where
/// it lives, as ZeRO and offload place it: the planner's exact part.
#include <cstdint>
#include <utility>

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief One rank's training state, by where it lives (the allocator's categories).
struct StateBytes {
  std::int64_t parameters = 0, gradients = 0, optimizer_state = 0;  ///< on the device
  /// In the device's host pool (offload.level = "v0").
  std::int64_t host_parameters = 0, host_gradients = 0, host_optimizer_state = 0;
  [[nodiscard]] constexpr std::int64_t device() const noexcept { return parameters + gradients + optimizer_state; }
  [[nodiscard]] constexpr std::int64_t host() const noexcept { return host_parameters + host_gradients + host_optimizer_state; }
};

/// \brief The state a rank keeps between steps for an arena of `elements` (padding included)
/// shared by `shards` data-parallel ranks: ZeRO stage 1 shards the optimizer state, stage 2 the
/// gradients too, stage 3 the parameters too; offload keeps stage 3's shards in host memory.
/// `slots` state values per element (optim's kStateSlots), `element_bytes` each (4: f32).
constexpr StateBytes state_bytes(std::int64_t elements, int shards, int zero_stage, bool offload, int slots,
                                 std::int64_t element_bytes = 4) {
  const std::int64_t whole = elements * element_bytes, part = elements / shards * element_bytes;
  StateBytes s;
  s.parameters = zero_stage >= 3 ? part : whole;
  s.gradients = zero_stage >= 2 ? part : whole;
  s.optimizer_state = slots * (zero_stage >= 1 ? part : whole);
  if (offload) {
    s.host_parameters = std::exchange(s.parameters, 0);
    s.host_gradients = std::exchange(s.gradients, 0);
    s.host_optimizer_state = std::exchange(s.optimizer_state, 0);
  }
  return s;
}

/// \brief A rank's place: its pipeline rank and its part of the tensor axis.
struct Place {
  int stage = 0, tensor = 0;
};

}  // namespace plan
}  // namespace v0
}  // namespace epl
