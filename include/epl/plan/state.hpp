#pragma once
/// \file
/// \brief The state a rank keeps between steps (parameters, gradients, optimizer state) by where
/// it lives, as ZeRO and offload place it: the planner's exact part.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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
/// blocks (exact) and the most blocks one layer's own parameters lie in; the compile-time planner
/// adds its units' parameters, each kept whole (a unit in one block).
struct ZeroBlocks {
  static constexpr int kMost = 8;   ///< windows of up to this many consecutive blocks
  std::int64_t block_elements = 0;  ///< a block closes once it holds this many (0: one block)
  std::int64_t open = 0;            ///< the block being filled
  std::int64_t count = 0;           ///< blocks closed
  std::int64_t largest = 0;         ///< the largest block
  std::array<std::int64_t, kMost> first{}, recent{};  ///< the first blocks, and the last (the latest first)
  std::array<std::int64_t, kMost + 1> most{};          ///< most[k]: the most k consecutive blocks hold
  int span = 1;  ///< the most blocks one layer's own parameters lie in (a layer's blocks are resident together)
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
    if (count < kMost) first[static_cast<std::size_t>(count)] = elements;
    for (std::size_t i = kMost - 1; i > 0; --i) recent[i] = recent[i - 1];
    recent[0] = elements;
    ++count;
    std::int64_t sum = 0;
    for (std::int64_t k = 1; k <= kMost && k <= count; ++k) {
      sum += recent[static_cast<std::size_t>(k - 1)];
      most[static_cast<std::size_t>(k)] = sum > most[static_cast<std::size_t>(k)] ? sum : most[static_cast<std::size_t>(k)];
    }
  }
  /// \brief The most `k` consecutive blocks hold (at most kMost) in the blocks' order gone through
  /// `passes` times, one after another: a step's micro-batches each reduce every block in turn,
  /// and the last blocks of one are still in flight when the next begins. With `shards` > 0 a
  /// block staged adds its shard's slice (1/shards of it): every block when `all_staged`, else the
  /// blocks of the passes after the first (a reduction added to the shard goes through a slice).
  [[nodiscard]] constexpr std::int64_t window(int k, int passes, int shards = 0, bool all_staged = false) const {
    if (count == 0 || k < 1) return 0;
    const auto staged = [&](std::int64_t elements, bool yes) { return elements + (shards > 0 && yes ? elements / shards : 0); };
    std::int64_t want = k < kMost ? k : kMost;
    const std::int64_t items = count * (passes > 1 ? passes : 1);
    want = want < items ? want : items;
    std::int64_t best = staged(most[static_cast<std::size_t>(want < count ? want : count)], all_staged || passes > 1);
    if (passes < 2) return best;
    // across the end of a pass: its last j blocks, then the next passes' from their first (where
    // the blocks are fewer than the window, every block is among `first`)
    for (std::int64_t j = 1; j < want && j <= count; ++j) {
      std::int64_t before = 0, after = 0;
      for (std::int64_t i = 0; i < j; ++i) before += recent[static_cast<std::size_t>(i)];
      std::int64_t rest = want - j;
      const std::int64_t later = count * (passes - 1);
      rest = rest < later ? rest : later;
      for (std::int64_t t = 0; t < rest; ++t) after += first[static_cast<std::size_t>(t % count)];
      const std::int64_t sum = staged(before, all_staged || passes > 2) + staged(after, true);
      best = sum > best ? sum : best;
    }
    return best;
  }
};

/// \brief The most state values an element an optimizer and the policies may keep, as the
/// planners take them (`slots`, Budget::optimizer_slots): more is a mistake, not an optimizer.
inline constexpr int kMostStateSlots = 64;

/// \brief What ZeRO holds on the device during a step beyond the state between steps: stage 3's
/// gathered blocks (the running layer's and the next one's gather), stages 2 and 3's gradient
/// blocks (the running layer's and the two before them still reducing), with their staging slices
/// where the shards live on the host or a step adds micro-batches.
struct InFlightBytes {
  std::int64_t parameters = 0, gradients = 0;
  [[nodiscard]] constexpr std::int64_t total() const noexcept { return parameters + gradients; }
};

/// \brief The blocks in flight of an arena cut as `blocks` (closed), `shards` ranks sharing it, at
/// ZeRO `zero_stage`, with the shards on the host (`offload`), a step of `micro_batches` passes,
/// `element_bytes` an element: policy::ZeroSharder's own rules. Stage 3 holds a layer's blocks
/// and the next one's gather; stages 2 and 3 a layer's gradient blocks and the two before them
/// still reducing, across the micro-batches' passes; a staging slice of a shard's size each where
/// the shards are on the host, or (gradients) a step adds micro-batches. Exact in the tests but
/// where a layer's parameters lie in two blocks under offload with micro-batches, or a layer runs
/// another inside it (a bound there); see docs/planner.md for what it does not count.
constexpr InFlightBytes in_flight_bytes(const ZeroBlocks& blocks, int shards, int zero_stage, bool offload, int micro_batches,
                                        std::int64_t element_bytes = 4) {
  InFlightBytes f;
  if (zero_stage >= 2) f.gradients = blocks.window(blocks.span + 2, micro_batches, shards, offload) * element_bytes;
  if (zero_stage >= 3)  // a host shard is copied to a staging slice of the next block before its gather
    f.parameters = (blocks.window(blocks.span + 1, 1) + (offload && shards > 1 ? blocks.largest / shards : 0)) * element_bytes;
  return f;
}

/// \brief The gradient blocks in flight (elements, staging slices included) of a rank whose
/// arena's blocks lie in chunks (`chunk_blocks[c]`: chunk c's blocks' elements, in backward
/// order) when the schedule runs the chunks' backward passes in the order `visits` (a chunk index
/// a pass): the most `k` (the running layer's blocks and the two still reducing) consecutive
/// blocks the passes reduce one after another. A block's reduction is staged (a slice of its
/// shard's size more) under `offload`, and when its chunk's pass is not the step's first (it adds
/// to the shard). The run-time planner prices every plan so, the compile-time planner a schedule of
/// several chunks a rank (a constant expression); for one chunk and a pass a micro-batch
/// ZeroBlocks::window gives the same while k is at most its kMost (8). Interleaved's passes run a
/// chunk's backward for several micro-batches in a row. Each
/// chunk's blocks enter as its first and last k where it has more than 2k (a window inside it is
/// its most k consecutive blocks), so the walk is short whatever communication.max_splits cuts.
constexpr std::int64_t gradient_blocks_in_flight(const std::vector<std::vector<std::int64_t>>& chunk_blocks,
                                                 const std::vector<std::size_t>& visits, int k, int shards, bool offload) {
  if (k < 1) return 0;
  const auto kk = static_cast<std::size_t>(k);
  const auto staged = [&](std::int64_t elements, bool yes) { return elements + (shards > 0 && yes ? elements / shards : 0); };
  std::vector<std::int64_t> inside(chunk_blocks.size(), 0);  // each chunk's most k consecutive blocks
  for (std::size_t c = 0; c < chunk_blocks.size(); ++c) {
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < chunk_blocks[c].size(); ++i) {
      sum += chunk_blocks[c][i] - (i >= kk ? chunk_blocks[c][i - kk] : 0);
      inside[c] = std::max(inside[c], sum);
    }
  }
  std::vector<char> seen(chunk_blocks.size(), 0);
  std::vector<std::int64_t> recent;  // the blocks reduced last, since the last gap in the walk
  std::int64_t best = 0;
  const auto reduce = [&](std::int64_t elements) {
    recent.push_back(elements);
    if (recent.size() > kk) recent.erase(recent.begin());
    std::int64_t sum = 0;
    for (const std::int64_t e : recent) sum += e;
    best = std::max(best, sum);
  };
  for (const std::size_t c : visits) {
    if (c >= chunk_blocks.size()) continue;
    const auto& b = chunk_blocks[c];
    const bool stage = offload || seen[c] != 0;
    seen[c] = 1;
    best = std::max(best, staged(inside[c], stage));  // the blocks divide by the shards: a window's slices are its sum's
    if (b.size() <= 2 * kk) {
      for (const std::int64_t e : b) reduce(staged(e, stage));
      continue;
    }
    for (std::size_t i = 0; i < kk; ++i) reduce(staged(b[i], stage));
    recent.clear();  // the blocks between: a window there is inside the chunk, counted above
    for (std::size_t i = b.size() - kk; i < b.size(); ++i) reduce(staged(b[i], stage));
  }
  return best;
}

/// \brief A rank's place: its pipeline rank and its part of the tensor axis.
struct Place {
  int stage = 0, tensor = 0;
};

}  // namespace plan
}  // namespace v0
}  // namespace epl
