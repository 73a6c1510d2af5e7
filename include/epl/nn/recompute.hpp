#pragma once
/// \file
/// \brief nn::Recompute<L...> (epl::Recompute) — recompute (EPL's gradient checkpointing) at a boundary the user
/// marks in the model type: in a training pass the layers inside keep only their input, and
/// backward runs their forward again before its own.
#include "epl/nn/combinators.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief The forward half of recompute: runs body(pass, x) in a scratch pass
/// context of ctx's kind (its saved activations are dropped when it returns) and saves only x,
/// under owner, for recompute_backward.
template <class Ctx, class Body>
Tensor recompute_forward(Ctx& ctx, const void* owner, const Tensor& x, Body&& body) {
  Ctx scratch(ctx.device(), ctx.options(), &ctx.hooks(), ctx.groups());
  Tensor y = body(scratch, x);
  ctx.add_loss(scratch.extra_loss());
  ctx.save(owner, {x});
  return y;
}
/// \brief The backward half: takes back owner's input, runs body_forward on it again in a
/// fresh pass context of the same options (the same dropout masks: draws depend on the seed,
/// step and sample positions only), then body_backward(pass, dy) there.
template <class Ctx, class Forward, class Backward>
Tensor recompute_backward(Ctx& ctx, const void* owner, const Tensor& dy, Forward&& body_forward, Backward&& body_backward) {
  Saved s = ctx.restore(owner);
  Ctx again(ctx.device(), ctx.options(), &ctx.hooks(), ctx.groups());
  (void)body_forward(again, s[0]);  // the activations, recomputed
  if constexpr (requires { again.defer_into(ctx.deferred()); }) again.defer_into(ctx.deferred());  // a B pass's weight work waits for W
  Tensor dx = body_backward(again, dy);
  EPL_CHECK(again.saved_count() == 0, "recompute: the recomputed layers left ", again.saved_count(),
            " activation frames behind; a layer's backward must restore what its forward saved");
  return dx;
}

/// \brief Runs L... in order (as Seq<L...>). When the pass recomputes the marks
/// (PassOptions::recompute is RecomputeMode::kMarked: a Trainer's gradient_checkpoint.type unset or
/// "collection"), forward saves only its input and drops the activations of the layers inside;
/// backward recomputes them from that input (recompute_forward / recompute_backward) and then
/// runs their backward. A recomputed forward issues no collective again: a layer inside may not
/// hold parameters split over a tensor-parallel group (checked: an error names the parameter).
/// The ZeRO stage-3 gathers a recompute needs are the gathers backward makes.
template <class... L>
class Recompute {
 public:
  Seq<L...> body;

  Recompute() = default;
  explicit Recompute(L... ls) : body(std::move(ls)...) {}

  template <class V> void visit(V&& v) { v("", body); }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    if (!recomputes(ctx)) return nn::forward(body, ctx, x);
    check_no_split_parameters();
    return recompute_forward(ctx, this, x, [&](Ctx& pass, const Tensor& h) { return nn::forward(body, pass, h); });
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    if (!recomputes(ctx)) return nn::backward(body, ctx, dy);
    return recompute_backward(
        ctx, this, dy, [&](Ctx& pass, const Tensor& h) { return nn::forward(body, pass, h); },
        [&](Ctx& pass, const Tensor& g) { return nn::backward(body, pass, g); });
  }

 private:
  template <class Ctx>
  static bool recomputes(const Ctx& ctx) {
    return ctx.training() && ctx.options().recompute == RecomputeMode::kMarked;
  }
  void check_no_split_parameters() {
    if (checked_) return;
    visit_parameters(body, [](std::string_view path, Parameter& p) {
      EPL_CHECK(p.shard.whole(), "epl::Recompute around a layer split over a tensor-parallel group (its parameter ", path,
                "): recomputing it would repeat its collectives; recompute the replicated layers only, or leave "
                "gradient_checkpoint.type empty");
    });
    checked_ = true;
  }
  bool checked_ = false;
};

}  // namespace nn

/// \brief A boundary of recompute (EPL's gradient checkpointing) in a model type: nn::Recompute<L...>.
template <class... L>
using Recompute = nn::Recompute<L...>;

/// \brief The name epl::Recompute had before 0.2 (kept for 0.2.x, removed in 0.3).
template <class... L>
using Checkpoint [[deprecated("renamed epl::Recompute (a checkpoint is now only saved state); see CHANGELOG.md")]] = nn::Recompute<L...>;
namespace nn {
/// \brief The name nn::Recompute had before 0.2 (kept for 0.2.x, removed in 0.3).
template <class... L>
using Checkpoint [[deprecated("renamed epl::nn::Recompute; see CHANGELOG.md")]] = Recompute<L...>;
}  // namespace nn

namespace nn {
template <class... L>
struct node_traits<Recompute<L...>> {
  static constexpr NodeKind kind = NodeKind::kRecompute;
  using children = type_list<Seq<L...>>;
};
}  // namespace nn

}  // namespace v0
}  // namespace epl
