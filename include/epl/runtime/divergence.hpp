#pragma once
/// \file
/// \brief What a step that diverged says: a loss or a gradient norm that is not finite is an error
/// naming the step, the ranks whose own rows gave the loss (bad data traced to its reader) and
/// the first parameter with a bad gradient, with the fix that fits the run's policies.
#include <cmath>
#include <limits>
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

/// A value that is not finite as the messages print it: "nan", "inf" or "-inf" (never "-nan").
inline const char* non_finite_name(double x) { return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

/// A loss that is not finite (the global batch's, on every rank alike: a collective over world)
/// fails on every rank, naming the ranks whose own part `mine` was not finite.
/// In a pipeline (`pipeline` stages) the ranks named are the last stages, where the loss is made.
EPL_LINKED void check_finite_loss(comm::Communicator& world, double loss, double mine, std::int64_t step, const policy::Setup& s,
                                  int pipeline);

/// A gradient norm that is not finite (on every rank alike: the norm is the world's): fails on
/// every rank naming the same parameter, the first in the model's order whose gradient
/// (`grad_of(p)`, this rank's part) is not finite on any rank. Each rank named its own first one,
/// and which rank's error a run reported changed from run to run (a stranger's finding).
template <class Model, class D, class GradOf>
[[noreturn]] void fail_non_finite_gradient(Model& model, const param::Arena& arena, GradOf&& grad_of, const D& device, double norm,
                                           std::int64_t step, const policy::Setup& s, comm::Communicator& world) {
  const std::unordered_set<const nn::Parameter*> held(arena.parameters().begin(), arena.parameters().end());
  std::int64_t first = std::numeric_limits<std::int64_t>::max();  // its ordinal: the same number on every rank
  nn::visit_parameters(model, [&](std::string_view, nn::Parameter& p) {
    if (p.ordinal >= first || !held.count(&p)) return;
    const Tensor g = grad_of(p);
    if (g.defined() && g.numel() > 0 && !std::isfinite(device.sum_squares(g))) first = p.ordinal;
  });
  world.all_reduce(comm::Buffer(&first, 1, DType::kI64), comm::Buffer(&first, 1, DType::kI64), comm::ReduceOp::kMin);
  std::string where;
  nn::visit_parameters(model, [&](std::string_view path, nn::Parameter& p) {
    if (p.ordinal == first) where = std::string(path);
  });
  EPL_FAIL("the gradient norm is ", non_finite_name(norm), " at step ", step,
           where.empty() ? "" : "; the first parameter with a NaN or infinite gradient is " + where,
           ": training diverged or a layer's backward is wrong; lower the learning rate, clip gradients "
           "(TrainerOptions::clip_norm) or gradcheck the layer",
           s.fp16 && !s.amp() && world.size() > 1 ? "; or, as gradients travel as fp16 (communication.fp16), lower "
           "communication.fp16_scale = " + concat(s.fp16_scale) + ": a gradient times the scale past 65504 is infinite" : "");
}

}  // namespace detail
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/runtime/divergence.ipp"
#endif
