#pragma once
/// \file
/// \brief The body of the divergence check (the header declares them): included by that header in a
/// header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/runtime/divergence.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

EPL_LINKED void check_finite_loss(comm::Communicator& world, double loss, double mine, std::int64_t step, const policy::Setup& s,
                                  int pipeline) {
  if (std::isfinite(loss)) return;
  std::vector<double> all(static_cast<std::size_t>(world.size()));
  world.all_gather(comm::Buffer(&mine, 1, DType::kF64), comm::Buffer(all.data(), world.size(), DType::kF64));
  std::string from;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!std::isfinite(all[r])) from += (from.empty() ? "" : ", ") + std::to_string(r);
  // a pipeline's loss is its last stage's: a NaN made in stage 1 was blamed on the last stage's rows (a stranger's finding)
  const bool one = from.find(',') == std::string::npos;
  const std::string ranks = (one ? "rank " : "ranks ") + from;
  EPL_FAIL("the loss is ", non_finite_name(loss), " at step ", step,
           from.empty() ? std::string()
           : pipeline > 1 ? " (from " + ranks + ", the last stage of " + (one ? "its" : "their") +
                                " pipeline: the value may have turned non-finite in any stage, or in the rows every stage reads)"
                          : " (from the rows of " + ranks + ")",
           ": training diverged or the "
           "data holds bad values; lower the learning rate, clip gradients (TrainerOptions::clip_norm) or check the inputs",
           s.matmul == DType::kF16 ? "; under AMP with f16 (epl::Amp<epl::amp::FP16>) a GEMM operand past 65504 is "
                                     "infinite in the forward, which no loss scale helps: train with bf16 "
                                     "(epl::Amp<epl::amp::BF16>) or keep activations smaller" : "");
}
}  // namespace detail
}  // namespace v0
}  // namespace epl
