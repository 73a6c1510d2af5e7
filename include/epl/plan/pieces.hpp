#pragma once
/// \file
/// \brief What one micro-batch's chunk holds, walked piece by piece, and a pipeline rank's peak,
/// walked through its schedule's actions: the one rule both planners price activations with
/// (plan::estimate over a measured or static profile, plan::static_search and plan::static_price
/// over the layers' static costs).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace plan {
namespace detail {

/// One unit's bytes a row, as the probe measured them or a layer's static cost states them.
struct UnitBytes {
  std::int64_t activation = 0;      ///< what its forward leaves allocated until its backward
  std::int64_t output = 0;          ///< its output
  std::int64_t backward = 0;        ///< what its backward allocates for a while
  std::int64_t split_backward = 0;  ///< what its B pass allocates for a while (a schedule that splits backward)
  std::int64_t weight = 0;          ///< what its B pass leaves for its W
};

/// A run of a chunk's units, [begin, end), that gradient checkpointing recomputes or not; without
/// it each unit is a piece of its own.
struct Piece {
  std::size_t begin = 0, end = 0;
  bool recomputed = false;
};

/// What a chunk holds for one micro-batch, bytes a row.
struct PieceBytes {
  std::int64_t kept = 0;             ///< from its forward to its backward: with the input it receives, less the output it sends on
  std::int64_t transient = 0;        ///< the most its backward allocates over what is kept, less what it has freed by then
  std::int64_t split_transient = 0;  ///< the same for its B passes under a schedule that splits backward
  std::int64_t weight = 0;           ///< what its B passes leave for W
  std::int64_t boundary = 0;         ///< the output it sends on, whose gradient it holds while its backward runs
};

/// Walks a chunk's `pieces` over its `units` (indexable, each a UnitBytes) in forward, then backward
/// order. `received`: the input it receives from the chunk before (0 on the model's first chunk);
/// `last`: the model's last chunk, whose output goes to the loss (no boundary); `loss`: its last
/// piece is the loss, which keeps no input of its own.
template <class Units, class Pieces>
constexpr PieceBytes walk_pieces(const Units& units, const Pieces& pieces, std::int64_t received, bool last, bool loss = false) {
  PieceBytes b;
  const std::size_t count = pieces.size();
  if (count == 0) return b;
  const auto max = [](std::int64_t x, std::int64_t y) { return x > y ? x : y; };
  const auto input = [&](std::size_t i) -> std::int64_t {
    if (loss && i + 1 == count) return 0;
    return pieces[i].begin > 0 ? units[pieces[i].begin - 1].output : received;
  };
  // A recomputed piece keeps its input. So does a piece after a recomputed one, and a chunk's first
  // piece after the model's first chunk: its first unit saves its input (as a Linear does), which a
  // profile counts as the unit before's output, a unit not kept here (recomputed, or another rank's).
  const auto keeps_input = [&](std::size_t i) {
    return pieces[i].recomputed || (i > 0 && pieces[i - 1].recomputed) || (i == 0 && received > 0);
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (!pieces[i].recomputed)
      for (std::size_t u = pieces[i].begin; u < pieces[i].end; ++u) b.kept += units[u].activation;
    if (keeps_input(i)) b.kept += input(i);
  }
  // the output a chunk sends on is the next rank's to keep, not this one's (a profile charges it to
  // the unit that made it, kept while the unit after it held it)
  const auto& tail = pieces[count - 1];
  if (!last && tail.end > tail.begin) {
    b.boundary = units[tail.end - 1].output;
    if (!tail.recomputed) b.kept -= b.boundary;
  }
  // Backward, piece by piece from the last: each unit's backward over what the ones after it freed;
  // under a split schedule also over what their B passes left for W (`weight`).
  // The gradient a piece receives is held by its caller until the piece's backward ends: below its
  // top unit, whose output it stands for, it is more (a chunk's before the model's last chunk is the
  // boundary, counted apart). On the last chunk, the gradient of the model's output, which the loss
  // allocates, is held so until the chunk's backward ends. (Without these, a stranger's model of 10
  // units under recompute was priced 3.3% under its peak.)
  const std::size_t top = loss && count > 1 ? count - 2 : count - 1;  // the piece that ends with the model's last unit
  const std::int64_t model_gradient = loss ? units[pieces[count - 1].begin].backward : 0;
  std::int64_t freed = 0, freed_split = 0;
  for (std::size_t i = count; i-- > 0;) {
    const Piece& piece = pieces[i];
    std::int64_t all = 0, inner = 0, inner_split = 0;
    for (std::size_t u = piece.begin; u < piece.end; ++u) all += units[u].activation;
    if (!piece.recomputed) {
      const std::int64_t received_gradient = i == top ? model_gradient : i + 1 < count && piece.end > piece.begin ? units[piece.end - 1].output : 0;
      std::int64_t inner_freed = 0;
      for (std::size_t u = piece.end; u-- > piece.begin;) {
        const std::int64_t held = u + 1 < piece.end ? received_gradient : 0;
        inner = max(inner, units[u].backward - inner_freed + held);
        inner_split = max(inner_split, units[u].split_backward - inner_freed + b.weight);
        inner_freed += units[u].activation;
        b.weight += units[u].weight;
      }
    } else if (piece.end > piece.begin) {
      // A recomputed piece's forward runs again while the gradient of its output, received from the
      // piece after, waits: it peaks at all its units' activations and that gradient. Its output is
      // dropped at once (the piece after holds its own), then each unit's backward runs over what the
      // units up to it saved and the gradient. A chunk's last piece before the model's last chunk
      // receives the gradient from the next rank: the boundary counts it. (Priced without the
      // gradient, a stranger's model of Linears and GELUs measured 17% over.) The gradient is held
      // until the piece's backward ends.
      const std::int64_t output = units[piece.end - 1].output;
      const std::int64_t gradient = !last && i + 1 == count ? 0 : output;
      inner = all + gradient;
      inner_split = all + gradient + b.weight;
      std::int64_t upto = all;
      for (std::size_t u = piece.end; u-- > piece.begin;) {
        const std::int64_t held_for = u + 1 == piece.end ? gradient - output : gradient;  // the gradient; at the top, for the dropped output
        inner = max(inner, upto + held_for + units[u].backward);
        inner_split = max(inner_split, upto + (u + 1 == piece.end ? gradient - output : 0) + units[u].split_backward + b.weight);
        upto -= units[u].activation;
        b.weight += units[u].weight;
      }
    }
    b.transient = max(b.transient, inner - freed);
    b.split_transient = max(b.split_transient, inner_split - freed_split);
    // (the output a chunk sends on left its activations when it was sent)
    freed_split += (piece.recomputed ? 0 : all - (!last && i + 1 == count ? b.boundary : 0)) + (keeps_input(i) ? input(i) : 0);
    freed = freed_split - (loss && i <= top ? model_gradient : 0);
  }
  return b;
}

// What chunk c of a pipeline rank holds for one micro-batch (bytes): `kept` from its forward to
// its backward; `sent`, its output, from the end of its forward until it is sent (the action after);
// `transient`, more while its backward runs (the output's gradient it received included). Under a
// schedule that splits backward into B and W: `split_transient` more while B runs, and `weight`,
// what B leaves for W (the saved inputs and output gradients the weight gradients are made of).
struct ChunkBytes {
  std::vector<std::int64_t> kept, sent, transient, split_transient, weight;
  // (n, 0), not (n): clang 14 does not value-initialise a vector in a constant expression
  constexpr explicit ChunkBytes(std::size_t n) : kept(n, 0), sent(n, 0), transient(n, 0), split_transient(n, 0), weight(n, 0) {}
};

// The peak activation bytes of a pipeline rank running `actions` on chunks that hold `b`: the one
// walk of a schedule both planners take (plan::estimate over a profile's chunks, the compile-time
// planner over the static costs').
constexpr std::int64_t activation_peak(const std::vector<strategy::Action>& actions, const ChunkBytes& b) {
  bool split = false;  // a schedule that splits backward into B and W
  for (const auto& a : actions) split = split || a.kind == strategy::Action::Kind::kWeight;
  std::int64_t live = 0, peak = 0;
  for (const auto& a : actions) {
    const auto c = static_cast<std::size_t>(a.chunk);
    if (a.kind == strategy::Action::Kind::kForward) {
      live += b.kept[c];
      peak = std::max(peak, live + b.sent[c]);
    } else if (a.kind == strategy::Action::Kind::kBackward) {
      peak = std::max(peak, live + (split ? b.split_transient[c] : b.transient[c]));
      live += (split ? b.weight[c] : 0) - b.kept[c];
    } else if (a.kind == strategy::Action::Kind::kWeight) {
      live -= b.weight[c];
    }
    peak = std::max(peak, live);
  }
  return std::max(peak, live);
}

}  // namespace detail
}  // namespace plan
}  // namespace v0
}  // namespace epl
