#pragma once
/// \file
/// \brief A model as a list of sequential units — the pieces a pipeline stage boundary may fall
/// between — each run through the generic nn::forward / nn::backward (so the hooks see it) by two
/// function pointers specialised for the pass context type.
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
  std::string name;
  bool split_entry = false;  ///< the first unit of an epl::Split
};

/// \brief A list of units run in order: a model chunk (a pipeline stage on this rank).
template <class Ctx>
class Chunk {
 public:
  Chunk() = default;
  explicit Chunk(std::vector<Unit<Ctx>> units) : units_(std::move(units)) {}
  Tensor forward(Ctx& ctx, const Tensor& x) const {
    Tensor h = x;
    for (const auto& u : units_) h = u.forward(u.layer, ctx, h);
    return h;
  }
  Tensor backward(Ctx& ctx, const Tensor& dy) const {
    Tensor g = dy;
    for (auto it = units_.rbegin(); it != units_.rend(); ++it) g = it->backward(it->layer, ctx, g);
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

 private:
  std::vector<Unit<Ctx>> units_;
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
  u.name = std::move(name);
  u.split_entry = std::is_same_v<L, epl::detail::SplitEntry>;
  return u;
}

/// \brief Appends l's sequential units to out: a Replicate's body, a Pipeline's stages, an
/// aggregate's fields, a Seq's or Repeat's parts, recursively; any other layer is one unit.
template <class Ctx, class L>
void flatten(L& l, std::vector<Unit<Ctx>>& out, const std::string& name = "model") {
  using T = std::remove_cvref_t<L>;
  if constexpr (is_strategy_v<T>) {
    flatten<Ctx>(l.body(), out, name);
  } else if constexpr (is_pipeline_v<T>) {
    std::size_t i = 0;
    std::apply([&](auto&... stage) { (flatten<Ctx>(stage, out, name + "." + std::to_string(i++)), ...); }, l.stages);
  } else {
    std::size_t i = 0;
    if (!nn::for_each_part(l, [&](auto& part) { flatten<Ctx>(part, out, name + "." + std::to_string(i++)); }))
      out.push_back(make_unit<Ctx>(l, name));
  }
}

/// \brief The chunks of a model cut into `chunks` contiguous pieces: a Pipeline's own stages when
/// it is one (their count must then be `chunks`, or 1: the whole), else a balanced cut of its
/// units by cost.
template <class Ctx, class M>
std::vector<Chunk<Ctx>> cut_into_chunks(M& model, int chunks) {
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
        flatten<Ctx>(stage, units, "stage" + std::to_string(i++));
        out.emplace_back(std::move(units));
      }()), ...);
    }, model.stages);
  } else {
    std::vector<Unit<Ctx>> units;
    flatten<Ctx>(model, units);
    std::vector<double> costs;
    for (const auto& u : units) costs.push_back(u.cost);
    const auto cut = balanced_partition(costs, static_cast<std::size_t>(chunks));
    for (int c = 0; c < chunks; ++c)
      out.emplace_back(std::vector<Unit<Ctx>>(units.begin() + static_cast<std::ptrdiff_t>(cut[c]),
                                              units.begin() + static_cast<std::ptrdiff_t>(cut[c + 1])));
  }
  return out;
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
