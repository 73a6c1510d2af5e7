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

/// \brief ZeRO's blocks of a rank's arena, as param::layout cuts them, streamed in backward order:
/// what the blocks a step holds at once add up to. The run-time planner pushes the layout's
/// blocks (exact); the compile-time planner adds its units' parameters, each kept whole.
struct ZeroBlocks {
  std::int64_t block_elements = 0;  ///< a block closes once it holds this many (0: one block)
  std::int64_t open = 0;            ///< the block being filled
  std::int64_t last = 0, before = 0;  ///< the two blocks closed before it, the latest first
  std::int64_t largest = 0, two = 0, three = 0;  ///< the most one, two and three consecutive blocks hold
  /// \brief A parameter of `elements`, after the block is closed if it holds enough already.
  constexpr void add(std::int64_t elements) {
    if (block_elements > 0 && open >= block_elements) close();
    open += elements;
  }
  /// \brief Closes the block being filled (the end of a rank's chunk, or of the arena).
  constexpr void close() {
    if (open > 0) push(open);
    open = 0;
  }
  /// \brief A whole block of `elements`.
  constexpr void push(std::int64_t elements) {
    largest = elements > largest ? elements : largest;
    two = elements + last > two ? elements + last : two;
    three = elements + last + before > three ? elements + last + before : three;
    before = last;
    last = elements;
  }
};

/// \brief What ZeRO holds on the device during a step beyond the state between steps: stage 3's
/// gathered blocks (the running layer's and the next one's gather), stages 2 and 3's gradient
/// blocks (the one reducing and two in flight), each with its staging slice where the shard lives
/// on the host or a step adds micro-batches.
struct InFlightBytes {
  std::int64_t parameters = 0, gradients = 0;
  [[nodiscard]] constexpr std::int64_t total() const noexcept { return parameters + gradients; }
};

/// \brief The blocks in flight of an arena cut as `blocks` (closed), `shards` ranks sharing it, at
/// ZeRO `zero_stage`, with the shards on the host (`offload`) and more than one micro-batch a step
/// (`accumulates`), `element_bytes` an element: policy::ZeroSharder's own rules.
constexpr InFlightBytes in_flight_bytes(const ZeroBlocks& blocks, int shards, int zero_stage, bool offload, bool accumulates,
                                        std::int64_t element_bytes = 4) {
  InFlightBytes f;
  if (zero_stage >= 2)  // a block's buffer is reduced into a staging slice when added to, or sent to the host
    f.gradients = (blocks.three + (offload || accumulates ? blocks.three / shards : 0)) * element_bytes;
  if (zero_stage >= 3)  // a host shard is copied to a staging slice of the next block before its gather
    f.parameters = (blocks.two + (offload && shards > 1 ? blocks.largest / shards : 0)) * element_bytes;
  return f;
}

/// \brief A rank's place: its pipeline rank and its part of the tensor axis.
struct Place {
  int stage = 0, tensor = 0;
};

}  // namespace plan
}  // namespace v0
}  // namespace epl
