#pragma once
/// \file
/// \brief epl::Trainer — one training step, visible in one place: forward, loss, backward over
/// the step's micro-batches, optional clipping, the optimizer.
#include <chrono>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include "epl/comm/buckets.hpp"
#include "epl/nn/loss.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/runtime/config.hpp"
#include "epl/runtime/data.hpp"
#include "epl/strategy/replicate.hpp"

namespace epl {
inline namespace v0 {

/// \brief Options of a Trainer that are not EPL config keys.
struct TrainerOptions {
  std::uint64_t seed = 0;  ///< parameter init and dropout streams
  double clip_norm = 0;    ///< clip gradients to this global L2 norm; 0: no clipping
  DType dtype = DType::kF32;
  /// Data parallel: every this many steps, compare a hash of the parameters across replicas
  /// and fail if they drifted apart (0: never; the check costs one small all_gather).
  std::int64_t check_replicas_every = 0;
};

namespace detail {
/// What data parallelism adds to a trainer: the gradient buckets over the data-parallel group,
/// a communicator of its own for the loss, and where each parameter sits in the buckets.
template <class Comm>
struct DataParallelState {
  Comm* grads = nullptr;
  std::unique_ptr<Comm> scalars;
  std::unique_ptr<comm::GradientBuckets<Comm>> buckets;
  std::unordered_map<const nn::Parameter*, std::size_t> slot;
  bool clip_after_allreduce = true;
  bool overlap = true;
};
template <>
struct DataParallelState<void> {};

/// EPL's communication keys as bucket options.
inline comm::BucketOptions bucket_options(const Config& cfg) {
  comm::BucketOptions o;
  o.max_splits = static_cast<int>(cfg.get<std::int64_t>("communication.max_splits"));
  o.fp16 = cfg.get<bool>("communication.fp16");
  o.fp16_scale = static_cast<double>(cfg.get<std::int64_t>("communication.fp16_scale"));
  o.op = cfg.get<std::string>("communication.gradients_reduce_method") == "sum" ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
  return o;
}
}  // namespace detail

/// \brief Trains Model with Optimizer on one device of type D, or data parallel over the ranks
/// of a communicator of type Comm.
///
/// step(batch) splits the batch's first dimension into pipeline.num_micro_batch micro-batches
/// and accumulates their gradients (each scaled by 1/M), so the update equals one step on
/// the whole batch; the returned loss is the mean over micro-batches. Data parallel, batch is
/// this rank's share of the global batch (data::Shard); during the last micro-batch's backward
/// each gradient joins its bucket as soon as it is final and the bucket's all-reduce starts, so
/// communication overlaps the rest of the backward pass; the optimizer waits for the buckets.
/// The returned loss is then the mean over all ranks: the global batch's loss.
/// \tparam Model a layer (a user aggregate of layers, a combinator, Replicate<D, ...>)
/// \tparam Optimizer models optim::optimizer
/// \tparam Loss has forward(ctx, logits, targets) -> double and backward(ctx, scale) -> Tensor
/// \tparam Comm void (one device) or a type modelling comm::communicator
template <class Model, optim::optimizer Optimizer, class Loss = nn::SoftmaxCrossEntropy, class D = device::Cpu, class Comm = void>
class Trainer {
  static_assert((nn::require_layer<Model>(), true));
  static constexpr bool kParallel = !std::is_void_v<Comm>;

 public:
  Trainer(const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
    requires(!kParallel)
      : device_(&device), model_(std::move(model)), optimizer_(std::move(optimizer)), opt_(opt),
        micro_batches_(cfg.get<std::int64_t>("pipeline.num_micro_batch")) {
    nn::materialize(model_, device, {opt.dtype, opt.seed});
  }

  /// \brief Data parallel over comm's ranks. Every rank must build the same model (checked).
  template <class C = Comm>
    requires(kParallel)
  Trainer(const D& device, C& comm, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : device_(&device), model_(std::move(model)), optimizer_(std::move(optimizer)), opt_(opt),
        micro_batches_(cfg.get<std::int64_t>("pipeline.num_micro_batch")) {
    constexpr int per_replica = devices_per_replica_v<Model>;
    EPL_CHECK(comm.size() % per_replica == 0, "world size ", comm.size(), " cannot hold replicas of ", per_replica,
              " devices each (Replicate<", per_replica, ", ...>); use a world size that is a multiple of ", per_replica);
    nn::materialize(model_, device, {opt.dtype, opt.seed});
    dp_.grads = &comm;
    dp_.scalars = std::make_unique<Comm>(comm.split(0, comm.rank()));
    dp_.clip_after_allreduce = cfg.get<bool>("communication.clip_after_allreduce");
    dp_.overlap = dp_.clip_after_allreduce || opt.clip_norm <= 0;
    check_same_model();
    std::vector<nn::Parameter*> params;
    nn::visit_parameters(model_, [&](std::string_view, nn::Parameter& p) { params.push_back(&p); });
    std::vector<Tensor> grads;  // in the order backward produces them: the last layer's first
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      dp_.slot[*it] = grads.size();
      grads.push_back((*it)->grad);
    }
    dp_.buckets = std::make_unique<comm::GradientBuckets<Comm>>(comm, std::move(grads), detail::bucket_options(cfg));
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
      if constexpr (kParallel) {
        // gradients are final only in the last micro-batch: reduce once per step
        if (m + 1 == micro_batches_ && dp_.overlap)
          ctx.on_gradient_ready([this](nn::Parameter& p) { dp_.buckets->ready(dp_.slot.at(&p)); });
      }
      Tensor logits = nn::forward(model_, ctx, batch.inputs.slice(m * per, (m + 1) * per));
      loss += loss_.forward(ctx, logits, batch.targets.slice(m * per, (m + 1) * per)) / static_cast<double>(micro_batches_);
      nn::backward(model_, ctx, loss_.backward(ctx, 1.0 / static_cast<double>(micro_batches_)));
    }
    if constexpr (kParallel) {
      if (!dp_.overlap) {  // EPL's per-replica clipping: clip the local gradient, then reduce it
        last_grad_norm_ = optim::clip_grad_norm(model_, *device_, opt_.clip_norm);
        // in slot order, identical on every rank (collectives must be issued in one order)
        for (std::size_t i = 0; i < dp_.slot.size(); ++i) dp_.buckets->ready(i);
      }
      dp_.buckets->finish();
      if (dp_.overlap && opt_.clip_norm > 0) last_grad_norm_ = optim::clip_grad_norm(model_, *device_, opt_.clip_norm);
      dp_.scalars->all_reduce(comm::Buffer(&loss, 1, DType::kF64), comm::ReduceOp::kMean);
    } else {
      if (opt_.clip_norm > 0) last_grad_norm_ = optim::clip_grad_norm(model_, *device_, opt_.clip_norm);
    }
    optimizer_.step(model_, *device_);
    ++steps_;
    if constexpr (kParallel) {
      if (opt_.check_replicas_every > 0 && steps_ % opt_.check_replicas_every == 0) check_replicas();
    }
    return loss;
  }

  /// \brief Data parallel: fails unless every rank holds bit-identical parameters.
  void check_replicas()
    requires(kParallel)
  {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over every parameter's bytes
    nn::visit_parameters(model_, [&](std::string_view, nn::Parameter& p) {
      std::vector<unsigned char> bytes(p.value.bytes());
      device_->download(p.value, bytes.data());
      for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
    });
    auto hashes = gather_all(static_cast<std::int64_t>(h));
    for (std::size_t r = 1; r < hashes.size(); ++r)
      EPL_CHECK(hashes[r] == hashes[0], "after step ", steps_, " the parameters of rank ", r, " differ from rank 0's: the replicas "
                "drifted apart (non-deterministic code on one rank, or a gradient that was not reduced)");
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
  /// \brief Data parallel: the fraction of the last step's gradient all-reduce time hidden
  /// behind the backward pass.
  [[nodiscard]] double last_overlap() const
    requires(kParallel)
  {
    return dp_.buckets->last_overlap();
  }
  /// \brief Data parallel: the gradient buckets' count.
  [[nodiscard]] std::size_t gradient_buckets() const
    requires(kParallel)
  {
    return dp_.buckets->buckets();
  }

 private:
  std::vector<std::int64_t> gather_all(std::int64_t mine)
    requires(kParallel)
  {
    std::vector<std::int64_t> all(static_cast<std::size_t>(dp_.scalars->size()));
    dp_.scalars->all_gather(comm::Buffer(&mine, 1, DType::kI64), comm::Buffer(all.data(), static_cast<std::int64_t>(all.size()), DType::kI64));
    return all;
  }
  // Every rank must have built the same model: same parameter count and shapes.
  void check_same_model()
    requires(kParallel)
  {
    std::int64_t count = 0;
    std::uint64_t shape_hash = 7;  // unsigned: the hash wraps by design
    nn::visit_parameters(model_, [&](std::string_view, nn::Parameter& p) {
      count += p.numel();
      for (int i = 0; i < p.shape.rank(); ++i) shape_hash = shape_hash * 31 + static_cast<std::uint64_t>(p.shape[i]);
    });
    auto counts = gather_all(count), shapes = gather_all(static_cast<std::int64_t>(shape_hash));
    for (std::size_t r = 1; r < counts.size(); ++r)
      EPL_CHECK(counts[r] == counts[0] && shapes[r] == shapes[0], "rank ", r, " built a model with ", counts[r],
                " parameters, rank 0 one with ", counts[0], counts[r] == counts[0] ? " (of other shapes)" : "",
                "; every data-parallel rank must build the same model");
  }

  const D* device_;
  Model model_;
  Optimizer optimizer_;
  Loss loss_;
  TrainerOptions opt_;
  std::int64_t micro_batches_;
  std::int64_t steps_ = 0;
  double last_grad_norm_ = 0;
  detail::DataParallelState<Comm> dp_;
};

/// \brief Prints the per-step progress line: step, loss, throughput, peak memory.
inline void print_progress(std::int64_t step, double loss, double items_per_s, const char* unit, DeviceId d) {
  std::printf("step %5lld  loss %.4f  %10.1f %s/s  peak %.1f MiB\n", static_cast<long long>(step), loss, items_per_s,
              unit, static_cast<double>(memory_stats(d).total_peak) / (1024.0 * 1024.0));
  std::fflush(stdout);
}

}  // namespace v0
}  // namespace epl
