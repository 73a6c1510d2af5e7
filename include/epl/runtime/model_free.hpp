#pragma once
/// \file
/// \brief What a Trainer on device::Cpu instantiates that does not depend on the user's model: the
/// gradient syncs and what they reduce and shard with, the executor of each sync's passes, their
/// chunks of units and recompute segments, the sequence-parallel collectives, the EMA's hook, the
/// arena's layout (param::materialize past its walk of the model), the optimizers' updaters, and
/// the Trainer's model-free half (detail::TrainerCore) for each of them and each sync, and the
/// built-in layers' forward and backward in each sync's passes. A
/// program linked with epl::precompiled (EPL_PRECOMPILED) takes them from that library (`extern
/// template`), compiled once, instead of compiling them again.

// One list in two parts: declared `extern template` in a program linked with epl::precompiled,
// defined in that library, the first part by src/precompiled.cpp (EPL_PRECOMPILED_SOURCE), the
// second, the Trainer's core and the layers' passes (EPL_MODEL_FREE_RUN), by
// src/precompiled_run.cpp (EPL_PRECOMPILED_RUN_SOURCE), so that a parallel build compiles the two
// at once.
#if defined(EPL_PRECOMPILED_SOURCE)
#define EPL_MODEL_FREE template
#define EPL_MODEL_FREE_RUN extern template
#elif defined(EPL_PRECOMPILED_RUN_SOURCE)
#define EPL_MODEL_FREE extern template
#define EPL_MODEL_FREE_RUN template
#elif defined(EPL_PRECOMPILED)
#define EPL_MODEL_FREE extern template
#define EPL_MODEL_FREE_RUN extern template
#endif
#ifdef EPL_MODEL_FREE
#include "epl/device/cpu/cpu.hpp"
#include "epl/nn/activation.hpp"
#include "epl/nn/attention.hpp"
#include "epl/nn/embedding.hpp"
#include "epl/nn/linear.hpp"
#include "epl/nn/loss.hpp"
#include "epl/nn/norm.hpp"
#include "epl/nn/tensor_parallel.hpp"
#include "epl/optim/adamw.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/optim/sgd.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/policy/homes/ema.hpp"
#include "epl/runtime/trainer_core.hpp"
#include "epl/strategy/executor.hpp"
#include "epl/strategy/units.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace epl {
inline namespace v0 {
EPL_MODEL_FREE class policy::AllReduceReducer<device::Cpu>;
EPL_MODEL_FREE class policy::ReducerSet<device::Cpu>;
EPL_MODEL_FREE class policy::ZeroSharder<device::Cpu>;
EPL_MODEL_FREE class policy::AllReduceSync<device::Cpu>;
EPL_MODEL_FREE class policy::ZeroSync<device::Cpu>;
EPL_MODEL_FREE class strategy::Executor<nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>, nn::SoftmaxCrossEntropy>;
EPL_MODEL_FREE class strategy::Executor<nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>, nn::SoftmaxCrossEntropy>;
// the chunks of units each sync's passes run, their recompute segments, the sequence-parallel
// collectives, and the EMA's hook
EPL_MODEL_FREE class strategy::Chunk<nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>>;
EPL_MODEL_FREE class strategy::Chunk<nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>>;
EPL_MODEL_FREE void strategy::choose_recompute_segments(std::vector<strategy::Chunk<nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>>>&,
                                                        const std::vector<int>&, int, std::int64_t, int);
EPL_MODEL_FREE void strategy::choose_recompute_segments(std::vector<strategy::Chunk<nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>>>&,
                                                        const std::vector<int>&, int, std::int64_t, int);
EPL_MODEL_FREE Tensor nn::sequence_gather(nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>&, const Tensor&, const nn::SplitPart&,
                                          const char*);
EPL_MODEL_FREE Tensor nn::sequence_gather(nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>&, const Tensor&, const nn::SplitPart&,
                                          const char*);
EPL_MODEL_FREE Tensor nn::sequence_reduce_scatter(nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>&, const Tensor&,
                                                  const nn::SplitPart&, const char*);
EPL_MODEL_FREE Tensor nn::sequence_reduce_scatter(nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>&, const Tensor&, const nn::SplitPart&,
                                                  const char*);
EPL_MODEL_FREE class policy::EmaHook<device::Cpu>;
EPL_MODEL_FREE param::Arena param::detail::lay_out(const std::vector<nn::Parameter*>&, const device::Cpu&, const param::MaterializeOptions&);
EPL_MODEL_FREE class optim::Updater<optim::SGD>;
EPL_MODEL_FREE void optim::Updater<optim::SGD>::step<device::Cpu>(const device::Cpu&, std::span<const Tensor>, std::span<const Tensor>,
                                                                std::int64_t, double);
EPL_MODEL_FREE const std::vector<Tensor>& optim::Updater<optim::SGD>::restore<device::Cpu>(const device::Cpu&, std::int64_t, std::int64_t,
                                                                                         DType);
EPL_MODEL_FREE class optim::Updater<optim::Momentum>;
EPL_MODEL_FREE void optim::Updater<optim::Momentum>::step<device::Cpu>(const device::Cpu&, std::span<const Tensor>, std::span<const Tensor>,
                                                                std::int64_t, double);
EPL_MODEL_FREE const std::vector<Tensor>& optim::Updater<optim::Momentum>::restore<device::Cpu>(const device::Cpu&, std::int64_t, std::int64_t,
                                                                                         DType);
EPL_MODEL_FREE class optim::Updater<optim::AdamW>;
EPL_MODEL_FREE void optim::Updater<optim::AdamW>::step<device::Cpu>(const device::Cpu&, std::span<const Tensor>, std::span<const Tensor>,
                                                                std::int64_t, double);
EPL_MODEL_FREE const std::vector<Tensor>& optim::Updater<optim::AdamW>::restore<device::Cpu>(const device::Cpu&, std::int64_t, std::int64_t,
                                                                                         DType);
// the built-in layers' forward and backward (nn::forward, nn::backward) in each sync's passes
namespace detail {
using CpuReducePass = nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>;
using CpuZeroPass = nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>;
}  // namespace detail
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Linear&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Linear&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::LayerNorm&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::LayerNorm&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Embedding&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Embedding&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::PositionEmbedding&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::PositionEmbedding&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::CausalSelfAttention&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::CausalSelfAttention&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Mlp&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Mlp&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::GELU&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::GELU&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::ReLU&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::ReLU&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Dropout&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Dropout&, epl::detail::CpuReducePass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Linear&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Linear&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::LayerNorm&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::LayerNorm&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Embedding&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Embedding&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::PositionEmbedding&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::PositionEmbedding&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::CausalSelfAttention&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::CausalSelfAttention&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Mlp&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Mlp&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::GELU&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::GELU&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::ReLU&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::ReLU&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::forward(nn::Dropout&, epl::detail::CpuZeroPass&, const Tensor&);
EPL_MODEL_FREE_RUN Tensor nn::backward(nn::Dropout&, epl::detail::CpuZeroPass&, const Tensor&);
// the Trainer's half that no model changes, for each optimizer and gradient sync
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::SGD, nn::SoftmaxCrossEntropy, device::Cpu, policy::AllReduceSync<device::Cpu>>;
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::SGD, nn::SoftmaxCrossEntropy, device::Cpu, policy::ZeroSync<device::Cpu>>;
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::Momentum, nn::SoftmaxCrossEntropy, device::Cpu, policy::AllReduceSync<device::Cpu>>;
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::Momentum, nn::SoftmaxCrossEntropy, device::Cpu, policy::ZeroSync<device::Cpu>>;
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::AdamW, nn::SoftmaxCrossEntropy, device::Cpu, policy::AllReduceSync<device::Cpu>>;
EPL_MODEL_FREE_RUN class detail::TrainerCore<optim::AdamW, nn::SoftmaxCrossEntropy, device::Cpu, policy::ZeroSync<device::Cpu>>;

// A program compiled with other epl headers than the library it links (a tree changed after the
// install, headers of another version) calls the library's code on objects of another layout and
// crashed at its first step without a word (a stranger's finding). The sizes of what the list above
// names, as this translation unit's headers lay them out, are checked against the library's before
// main. (A change of code that keeps every size is not seen.)
namespace detail {
constexpr std::uint64_t model_free_layout() {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t size :
       {sizeof(Tensor), sizeof(Shape), sizeof(Config), sizeof(nn::Saved), sizeof(CpuReducePass), sizeof(CpuZeroPass), sizeof(param::Arena),
        sizeof(policy::ZeroSharder<device::Cpu>), sizeof(policy::AllReduceSync<device::Cpu>), sizeof(policy::ZeroSync<device::Cpu>),
        sizeof(strategy::Executor<CpuReducePass, nn::SoftmaxCrossEntropy>), sizeof(strategy::Chunk<CpuZeroPass>),
        sizeof(optim::Updater<optim::AdamW>), sizeof(policy::EmaHook<device::Cpu>),
        sizeof(detail::TrainerCore<optim::AdamW, nn::SoftmaxCrossEntropy, device::Cpu, policy::AllReduceSync<device::Cpu>>),
        sizeof(detail::TrainerCore<optim::SGD, nn::SoftmaxCrossEntropy, device::Cpu, policy::ZeroSync<device::Cpu>>)})
    h = (h ^ size) * 1099511628211ull;
  return h;
}
/// The library's model_free_layout(), compiled with its own headers (src/precompiled_run.cpp).
std::uint64_t precompiled_model_free_layout();
/// What a program whose layout (`mine`) is not the library's is told; empty when they agree.
inline std::string layout_mismatch(std::uint64_t mine, std::uint64_t library) {
  if (mine == library) return {};
  return "epl: this program was compiled with epl headers that lay out epl's types otherwise than the headers epl::precompiled "
         "(libepl_precompiled) was built with: they come from different versions or source trees. Build the program against "
         "the headers installed with that library (find_package(epl) of the same prefix), or rebuild the library from these "
         "headers";
}
#if !defined(EPL_PRECOMPILED_SOURCE) && !defined(EPL_PRECOMPILED_RUN_SOURCE)
[[gnu::used]] inline const bool model_free_layout_checked = [] {
  if (const std::string why = layout_mismatch(model_free_layout(), precompiled_model_free_layout()); !why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::_Exit(2);
  }
  return true;
}();
#endif
}  // namespace detail
}  // namespace v0
}  // namespace epl
#undef EPL_MODEL_FREE
#undef EPL_MODEL_FREE_RUN
#endif
