#pragma once
/// \file
/// \brief nn::Checkpoint<L...> (epl::Checkpoint) — gradient checkpointing at a boundary the user
/// marks in the model type: in a training pass the layers inside keep only their input, and
/// backward runs their forward again before its own.
#include "epl/nn/combinators.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Runs L... in order (as Seq<L...>). When the pass recomputes (PassOptions::recompute: a
/// Trainer's gradient_checkpoint.type, on by default), forward saves only its input and drops
/// the activations of the layers inside; backward recomputes them from that input, in the same
/// pass context (the same dropout masks: draws depend on the seed, step and sample positions
/// only) and then runs their backward. A recomputed forward issues no collective again: a layer
/// inside may not hold parameters split over a tensor-parallel group (checked: an error names
/// the parameter). The ZeRO stage-3 gathers a recompute needs are the gathers backward makes.
template <class... L>
class Checkpoint {
 public:
  Seq<L...> body;

  Checkpoint() = default;
  explicit Checkpoint(L... ls) : body(std::move(ls)...) {}

  template <class V> void visit(V&& v) { v("checkpointed", body); }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!ctx.training() || !ctx.options().recompute) return nn::forward(body, ctx, x);
    check_no_split_parameters();
    Ctx scratch(ctx.device(), ctx.options(), &ctx.hooks(), ctx.groups());  // its saved activations are dropped
    Tensor y = nn::forward(body, scratch, x);
    ctx.add_loss(scratch.extra_loss());
    ctx.save(this, {x});
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    if (!ctx.options().recompute) return nn::backward(body, ctx, dy);
    Saved s = ctx.restore(this);
    Ctx again(ctx.device(), ctx.options(), &ctx.hooks(), ctx.groups());
    (void)nn::forward(body, again, s[0]);  // the activations, recomputed
    Tensor dx = nn::backward(body, again, dy);
    EPL_CHECK(again.saved_count() == 0, "Checkpoint: the recomputed layers left ", again.saved_count(), " activation frames "
              "behind; a layer's backward must restore what its forward saved");
    return dx;
  }

 private:
  void check_no_split_parameters() {
    if (checked_) return;
    visit_parameters(body, [](std::string_view path, Parameter& p) {
      EPL_CHECK(p.shard.whole(), "epl::Checkpoint around a layer split over a tensor-parallel group (parameter checkpointed.", path,
                "): recomputing it would repeat its collectives; checkpoint the replicated layers only, or leave "
                "gradient_checkpoint.type empty");
    });
    checked_ = true;
  }
  bool checked_ = false;
};

}  // namespace nn

/// \brief A boundary of gradient checkpointing in a model type: nn::Checkpoint<L...>.
template <class... L>
using Checkpoint = nn::Checkpoint<L...>;

namespace nn {
/// \brief True for nn::Checkpoint<L...>.
template <class T>
struct is_checkpoint : std::false_type {};
template <class... L>
struct is_checkpoint<Checkpoint<L...>> : std::true_type {};
/// \brief True when a Checkpoint boundary lies anywhere in l's tree.
template <class M>
bool has_checkpoint(M& l) {
  bool found = false;
  visit_nodes(l, [&](std::string_view, auto& node) {
    if constexpr (is_checkpoint<std::remove_cvref_t<decltype(node)>>::value) found = true;
  });
  return found;
}
}  // namespace nn

}  // namespace v0
}  // namespace epl
