#pragma once
/// \file
/// \brief What a step that diverged says: a loss or a gradient norm that is not finite is an error
/// naming the step, the ranks whose own rows gave the loss (bad data traced to its reader) and
/// the first parameter with a bad gradient, with the fix that fits the run's policies.
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/nn/tree.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/setup.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

/// A loss that is not finite (the global batch's, on every rank alike: a collective over world)
/// fails on every rank, naming the ranks whose own part `mine` was not finite.
EPL_LINKED void check_finite_loss(comm::Communicator& world, double loss, double mine, std::int64_t step, const policy::Setup& s);

/// A gradient norm that is not finite: fails naming the first parameter this rank holds (in
/// `arena`) whose gradient (`grad_of(p)`) is not finite.
template <class Model, class D, class GradOf>
[[noreturn]] void fail_non_finite_gradient(Model& model, const param::Arena& arena, GradOf&& grad_of, const D& device, double norm,
                                           std::int64_t step, const policy::Setup& s, int world_size) {
  std::string where;
  const std::unordered_set<const nn::Parameter*> held(arena.parameters().begin(), arena.parameters().end());
  nn::visit_parameters(model, [&](std::string_view path, nn::Parameter& p) {
    if (!where.empty() || !held.count(&p)) return;
    const Tensor g = grad_of(p);
    if (g.defined() && g.numel() > 0 && !std::isfinite(device.sum_squares(g))) where = std::string(path);
  });
  EPL_FAIL("the gradient norm is ", norm, " at step ", step, where.empty() ? "" : "; the first parameter with a "
           "NaN or infinite gradient is " + where, ": training diverged or a layer's backward is wrong; lower the learning "
           "rate, clip gradients (TrainerOptions::clip_norm) or gradcheck the layer",
           s.fp16 && !s.amp() && world_size > 1 ? "; or, as gradients travel as fp16 (communication.fp16), lower "
           "communication.fp16_scale = " + concat(s.fp16_scale) + ": a gradient times the scale past 65504 is infinite" : "");
}

}  // namespace detail
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/runtime/divergence.ipp"
#endif
