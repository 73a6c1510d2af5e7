#pragma once
/// \file
/// \brief epl::Trainer — one training step, visible in one place: forward, loss, backward over
/// the step's micro-batches, optional clipping, the optimizer.
#include <chrono>
#include <cstdio>

#include "epl/nn/loss.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/runtime/config.hpp"
#include "epl/runtime/data.hpp"

namespace epl {
inline namespace v0 {

/// \brief Options of a Trainer that are not EPL config keys.
struct TrainerOptions {
  std::uint64_t seed = 0;  ///< parameter init and dropout streams
  double clip_norm = 0;    ///< clip gradients to this global L2 norm; 0: no clipping
  DType dtype = DType::kF32;
};

/// \brief Trains Model with Optimizer on one device of type D.
///
/// step(batch) splits the batch's first dimension into pipeline.num_micro_batch micro-batches
/// and accumulates their gradients (each scaled by 1/M), so the update equals one step on
/// the whole batch; the returned loss is the mean over micro-batches.
/// \tparam Model a layer (a user aggregate of layers, a combinator or a built-in)
/// \tparam Optimizer models optim::optimizer
/// \tparam Loss has forward(ctx, logits, targets) -> double and backward(ctx, scale) -> Tensor
template <class Model, optim::optimizer Optimizer, class Loss = nn::SoftmaxCrossEntropy, class D = device::Cpu>
class Trainer {
  static_assert((nn::require_layer<Model>(), true));

 public:
  Trainer(const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : device_(&device), model_(std::move(model)), optimizer_(std::move(optimizer)), opt_(opt),
        micro_batches_(cfg.get<std::int64_t>("pipeline.num_micro_batch")) {
    nn::materialize(model_, device, {opt.dtype, opt.seed});
  }

  /// \brief One optimizer step on batch; returns the mean loss.
  double step(const Batch& batch) {
    const auto rows = batch.inputs.dim(0);
    EPL_CHECK(rows % micro_batches_ == 0, "batch of ", rows, " samples does not divide into pipeline.num_micro_batch = ",
              micro_batches_, " micro-batches; make the batch a multiple of ", micro_batches_);
    EPL_CHECK(batch.targets.dim(0) == rows, "batch has ", rows, " inputs but ", batch.targets.dim(0), " targets");
    nn::zero_grad(model_, *device_);
    const auto per = rows / micro_batches_;
    double loss = 0;
    for (std::int64_t m = 0; m < micro_batches_; ++m) {
      nn::Context<D> ctx(*device_, {true, opt_.seed, static_cast<std::uint64_t>(steps_), static_cast<std::uint64_t>(m)});
      Tensor logits = nn::forward(model_, ctx, batch.inputs.slice(m * per, (m + 1) * per));
      loss += loss_.forward(ctx, logits, batch.targets.slice(m * per, (m + 1) * per)) / static_cast<double>(micro_batches_);
      nn::backward(model_, ctx, loss_.backward(ctx, 1.0 / static_cast<double>(micro_batches_)));
    }
    if (opt_.clip_norm > 0) last_grad_norm_ = optim::clip_grad_norm(model_, *device_, opt_.clip_norm);
    optimizer_.step(model_, *device_);
    ++steps_;
    return loss;
  }

  /// \brief The loss on batch without training (dropout off, no update).
  double evaluate(const Batch& batch) {
    nn::Context<D> ctx(*device_, {false, opt_.seed, static_cast<std::uint64_t>(steps_), 0});
    Tensor logits = nn::forward(model_, ctx, batch.inputs);
    return loss_.forward(ctx, logits, batch.targets);
  }

  [[nodiscard]] Model& model() noexcept { return model_; }
  [[nodiscard]] Optimizer& optimizer() noexcept { return optimizer_; }
  [[nodiscard]] const D& device() const noexcept { return *device_; }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::int64_t micro_batches() const noexcept { return micro_batches_; }
  [[nodiscard]] double last_grad_norm() const noexcept { return last_grad_norm_; }

 private:
  const D* device_;
  Model model_;
  Optimizer optimizer_;
  Loss loss_;
  TrainerOptions opt_;
  std::int64_t micro_batches_;
  std::int64_t steps_ = 0;
  double last_grad_norm_ = 0;
};

/// \brief Prints the per-step progress line: step, loss, throughput, peak memory.
inline void print_progress(std::int64_t step, double loss, double items_per_s, const char* unit, DeviceId d) {
  std::printf("step %5lld  loss %.4f  %10.1f %s/s  peak %.1f MiB\n", static_cast<long long>(step), loss, items_per_s,
              unit, static_cast<double>(memory_stats(d).total_peak) / (1024.0 * 1024.0));
  std::fflush(stdout);
}

}  // namespace v0
}  // namespace epl
