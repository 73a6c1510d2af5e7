#pragma once
/// \file
/// \brief A model as a list of sequential units — the pieces a pipeline stage boundary may fall
/// between — each run through the generic nn::forward / nn::backward (so the hooks see it) by two
/// function pointers specialised for the pass context type; and the segments a chunk of them
/// recomputes under automatic gradient checkpointing.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "epl/strategy/partition.hpp"
#include "epl/strategy/pipeline.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

/// \brief One unit of a model: a layer, how to run it in a pass of context type Ctx, its
/// parameters and its cost.
template <class Ctx>
struct Unit {
  void* layer = nullptr;
  Tensor (*forward)(void*, Ctx&, const Tensor&) = nullptr;
  Tensor (*backward)(void*, Ctx&, const Tensor&) = nullptr;
  void (*parameters)(void*, const std::function<void(nn::Parameter&)>&) = nullptr;
  double cost = 0;
  TensorTraffic traffic;  ///< what its split group all-reduces per token (none unless sharded)
  std::string name;
  bool split_entry = false;  ///< the first unit of an epl::Split
  /// Its forward may run twice: it issues no collective (no parameter split over a
  /// tensor-parallel group, not a Split's entry or exit).
  bool recomputable = true;
};

/// \brief Units [begin, end) of a chunk, recomputed in backward or not.
struct Segment {
  std::size_t begin = 0, end = 0;
  bool recompute = false;
};

/// \brief A list of units run in order: a model chunk (a pipeline stage on this rank).
///
/// Under automatic gradient checkpointing (choose_segments, and a pass whose recompute is
/// nn::RecomputeMode::kSegments) forward keeps only each recomputed segment's input and backward
/// runs the segment's forward again before its backward (nn::recompute_forward / _backward).
template <class Ctx>
class Chunk {
 public:
  Chunk() = default;
  explicit Chunk(std::vector<Unit<Ctx>> units) : units_(std::move(units)) {}
  Tensor forward(Ctx& ctx, const Tensor& x) const {
    if (!segmented(ctx)) return run_forward(ctx, x, 0, units_.size());
    Tensor h = x;
    for (const auto& s : segments_) {
      if (!s.recompute) h = run_forward(ctx, h, s.begin, s.end);
      else h = nn::recompute_forward(ctx, &s, h, [&](Ctx& pass, const Tensor& in) { return run_forward(pass, in, s.begin, s.end); });
    }
    return h;
  }
  Tensor backward(Ctx& ctx, const Tensor& dy) const {
    if (!segmented(ctx)) return run_backward(ctx, dy, 0, units_.size());
    Tensor g = dy;
    for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) {
      const Segment& s = *it;
      if (!s.recompute) g = run_backward(ctx, g, s.begin, s.end);
      else
        g = nn::recompute_backward(
            ctx, &s, g, [&](Ctx& pass, const Tensor& in) { return run_forward(pass, in, s.begin, s.end); },
            [&](Ctx& pass, const Tensor& d) { return run_backward(pass, d, s.begin, s.end); });
    }
    return g;
  }
  void for_each_parameter(const std::function<void(nn::Parameter&)>& fn) const {
    for (const auto& u : units_) u.parameters(u.layer, fn);
  }
  [[nodiscard]] const std::vector<Unit<Ctx>>& units() const noexcept { return units_; }
  [[nodiscard]] double cost() const {
    double c = 0;
    for (const auto& u : units_) c += u.cost;
    return c;
  }

  /// \brief Chooses the segments gradient_checkpoint.type = "auto" recomputes: the n units cut
  /// into round(√n) pieces (at least 2) balanced by cost, as Chen et al.'s √n checkpointing
  /// does, so a pass keeps about √n segment inputs plus one segment's activations. Every piece
  /// is recomputed except, when keep_last, the last (the model's head: its backward is the
  /// first to run, so recomputing it would only repeat its forward). A unit that is not
  /// recomputable runs as itself between segments. Returns the number of units recomputed.
  std::size_t choose_segments(bool keep_last) {
    segments_.clear();
    const std::size_t n = units_.size();
    if (n < 2) {
      if (n == 1) segments_.push_back({0, 1, false});
      return 0;
    }
    const auto k = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(n)))), 2, n);
    std::vector<double> costs;
    for (const auto& u : units_) costs.push_back(u.cost);
    const auto cut = balanced_partition(costs, k);
    std::size_t recomputed = 0;
    for (std::size_t p = 0; p < k; ++p) {
      if (keep_last && p + 1 == k) {
        segments_.push_back({cut[p], cut[p + 1], false});
        break;
      }
      for (std::size_t i = cut[p]; i < cut[p + 1];) {
        std::size_t j = i;
        while (j < cut[p + 1] && units_[j].recomputable) ++j;
        if (j > i) {
          segments_.push_back({i, j, true});
          recomputed += j - i;
        } else {
          segments_.push_back({i, i + 1, false});
          j = i + 1;
        }
        i = j;
      }
    }
    return recomputed;
  }
  /// \brief The segments choose_segments chose (empty: none chosen).
  [[nodiscard]] const std::vector<Segment>& segments() const noexcept { return segments_; }

 private:
  bool segmented(const Ctx& ctx) const {
    return ctx.training() && ctx.options().recompute == nn::RecomputeMode::kSegments && !segments_.empty();
  }
  Tensor run_forward(Ctx& ctx, const Tensor& x, std::size_t begin, std::size_t end) const {
    Tensor h = x;
    for (std::size_t i = begin; i < end; ++i) h = units_[i].forward(units_[i].layer, ctx, h);
    return h;
  }
  Tensor run_backward(Ctx& ctx, const Tensor& dy, std::size_t begin, std::size_t end) const {
    Tensor g = dy;
    for (std::size_t i = end; i-- > begin;) g = units_[i].backward(units_[i].layer, ctx, g);
    return g;
  }
  std::vector<Unit<Ctx>> units_;
  std::vector<Segment> segments_;
};

/// \brief l as one unit.
template <class Ctx, class L>
Unit<Ctx> make_unit(L& l, std::string name) {
  Unit<Ctx> u;
  u.layer = &l;
  u.forward = [](void* p, Ctx& ctx, const Tensor& x) { return nn::forward(*static_cast<L*>(p), ctx, x); };
  u.backward = [](void* p, Ctx& ctx, const Tensor& dy) { return nn::backward(*static_cast<L*>(p), ctx, dy); };
  u.parameters = [](void* p, const std::function<void(nn::Parameter&)>& fn) { nn::for_each_parameter(*static_cast<L*>(p), fn); };
  u.cost = unit_cost(l);
  u.traffic = tensor_traffic(l);
  u.name = std::move(name);
  u.split_entry = std::is_same_v<L, epl::detail::SplitEntry>;
  u.recomputable = !nn::is_structural_v<L>;  // a Split's entry and exit may move activations over the group
  nn::for_each_parameter(l, [&](nn::Parameter& p) { u.recomputable = u.recomputable && p.shard.whole(); });
  return u;
}

/// \brief Appends l's sequential units to out: a strategy's body, a Pipeline's stages, a
/// sequence's parts (an aggregate's fields, a Seq's or Repeat's layers), recursively; any other
/// node (a leaf, a residual, a recompute boundary) is one unit.
template <class Ctx, class L>
void flatten(L& l, std::vector<Unit<Ctx>>& out, const std::string& name = "model") {
  using nn::NodeKind;
  constexpr NodeKind kind = nn::kind_of_v<L>;
  if constexpr (kind == NodeKind::kReplicate || kind == NodeKind::kSplit) {
    nn::for_each_child(l, [&](auto& body) { flatten<Ctx>(body, out, name); });
  } else if constexpr (kind == NodeKind::kPipeline || nn::is_sequence(kind)) {
    std::size_t i = 0;
    nn::for_each_child(l, [&](auto& part) { flatten<Ctx>(part, out, name + "." + std::to_string(i++)); });
  } else {
    out.push_back(make_unit<Ctx>(l, name));
  }
}

/// \brief The chunks of a model cut into `chunks` contiguous pieces: a Pipeline's own stages when
/// it is one (their count must then be `chunks`, or 1: the whole), else a balanced cut of its
/// units by cost, chunk c taking its cost over speeds[c] when given (uneven devices).
template <class Ctx, class M>
std::vector<Chunk<Ctx>> cut_into_chunks(M& model, int chunks, const std::vector<double>& speeds = {}) {
  std::vector<Chunk<Ctx>> out;
  if constexpr (is_pipeline_v<M>) {
    if (chunks == 1) {  // every stage on this rank: the whole model in order
      std::vector<Unit<Ctx>> units;
      flatten<Ctx>(model, units);
      out.emplace_back(std::move(units));
      return out;
    }
    EPL_CHECK(chunks == M::kStages, "the model has ", M::kStages, " pipeline stages (epl::Pipeline<...>) but ", chunks,
              " were asked for");
    std::size_t i = 0;
    std::apply([&](auto&... stage) {
      (([&] {
        std::vector<Unit<Ctx>> units;
        flatten<Ctx>(stage, units, "model." + std::to_string(i++));  // as flatten names the whole model's
        out.emplace_back(std::move(units));
      }()), ...);
    }, model.stages);
  } else {
    std::vector<Unit<Ctx>> units;
    flatten<Ctx>(model, units);
    std::vector<double> costs;
    for (const auto& u : units) costs.push_back(u.cost);
    const auto cut = balanced_partition(costs, static_cast<std::size_t>(chunks), speeds);
    for (int c = 0; c < chunks; ++c)
      out.emplace_back(std::vector<Unit<Ctx>>(units.begin() + static_cast<std::ptrdiff_t>(cut[c]),
                                              units.begin() + static_cast<std::ptrdiff_t>(cut[c + 1])));
  }
  return out;
}

/// \brief Chooses the segments gradient_checkpoint.type = "auto" recomputes in a pipeline rank's
/// chunks (local[j] is chunk ids[j] of a model of `chunks`), those up to end_taskgraph (-1: all);
/// fails, naming them, when chunks that should recompute are too small to cut.
template <class Ctx>
void choose_recompute_segments(std::vector<Chunk<Ctx>>& local, const std::vector<int>& ids, int chunks, std::int64_t end_taskgraph,
                               int stage) {
  std::size_t recomputed = 0;
  std::string uncut;  // the task graphs that should recompute and cannot
  for (std::size_t j = 0; j < local.size(); ++j) {
    const int c = ids[j];
    if (end_taskgraph >= 0 && c > end_taskgraph) continue;
    const std::size_t here = local[j].choose_segments(c + 1 == chunks);
    recomputed += here;
    const std::size_t n = local[j].units().size();
    if (here == 0) uncut += (uncut.empty() ? "" : ", ") + std::to_string(c) + " (" + std::to_string(n) + " unit" + (n == 1 ? ")" : "s)");
  }
  EPL_CHECK(recomputed > 0 || uncut.empty(), "gradient_checkpoint.type = \"auto\" finds nothing to recompute on pipeline rank ",
            stage, ": task graph ", uncut, " is too small to cut (the model's last piece keeps its activations) or split over a "
            "tensor-parallel group; use a deeper model, gradient_checkpoint.end_taskgraph below the first of them, or "
            "gradient_checkpoint.type = \"\"");
}

/// \brief A model cut in two at its first epl::Split: the replicated part before it and the rest
/// (EPL's placement of a Replicate<N> and a Split<N> part on separate devices).
template <class Ctx, class M>
std::vector<Chunk<Ctx>> cut_at_first_split(M& model) {
  std::vector<Unit<Ctx>> units;
  flatten<Ctx>(model, units);
  std::size_t at = 0;
  while (at < units.size() && !units[at].split_entry) ++at;
  EPL_CHECK(at > 0 && at < units.size(), "the model has no part before its first epl::Split to place on separate devices");
  std::vector<Chunk<Ctx>> out;
  out.emplace_back(std::vector<Unit<Ctx>>(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(at)));
  out.emplace_back(std::vector<Unit<Ctx>>(units.begin() + static_cast<std::ptrdiff_t>(at), units.end()));
  return out;
}

}  // namespace strategy
}  // namespace v0
}  // namespace epl
