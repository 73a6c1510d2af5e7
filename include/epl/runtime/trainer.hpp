#pragma once
/// \file
/// \brief epl::Trainer — one training step, the same for one device and for every strategy and
/// policy. It holds no strategy or policy logic: the plan decides (plan::make, the one
/// can_implement), the schedule runs the passes (strategy::Executor), the gradient sync reduces
/// and shards (policy::gradient_sync), the optimizer updates ranges (optim::Updater), and the
/// serializer saves and loads (checkpoint::Serializer). A step, top to bottom, is
/// detail::TrainerCore::step (runtime/trainer_core.hpp): the half that does not depend on the model,
/// shared by every Trainer of a program. This file is the half that does: the model cut, drawn
/// and named.
#include <memory>

#include "epl/checkpoint/serializer.hpp"
#include "epl/config/run_options.hpp"
#include "epl/device/requirements.hpp"
#include "epl/nn/loss.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/param/arena.hpp"
#include "epl/plan/shard.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/runtime/agreement.hpp"
#include "epl/runtime/context.hpp"
#include "epl/runtime/divergence.hpp"
#include "epl/runtime/model_free.hpp"  // under epl::precompiled: what a Trainer uses that no model changes
#include "epl/runtime/progress.hpp"
#include "epl/runtime/trainer_core.hpp"

namespace epl {
inline namespace v0 {

namespace detail {
// A Trainer's model, in a base of its own ahead of the run's: built before the run and destroyed
// after it, as the chunks, the arena and ZeRO's shards point into it.
template <class Model>
struct ModelHolder {
  Model model_;
};
}  // namespace detail

/// \brief Trains Model with Optimizer on device type D, on one device or over the ranks of an
/// epl::Context.
///
/// step(batch) splits the batch's first dimension into pipeline.num_micro_batch micro-batches
/// and accumulates their gradients (each scaled by 1/M), so the update equals one step on the
/// whole batch; it returns the global batch's mean loss. Data parallel, batch is this rank's share
/// of the global batch (data_shard()): every rank must get as many rows (checked each step).
/// Pipelined (an epl::Pipeline model, or pipeline.num_stages with auto.auto_parallel), each rank
/// holds its stages' parameters only, runs pipeline.strategy's schedule, and returns the same loss
/// on every rank.
/// \tparam Model a layer (a user aggregate, a combinator), or a strategy: Replicate<D, ...>,
///         Split<N, ...>, Pipeline<Stages...>
/// \tparam Optimizer models optim::optimizer
/// \tparam Policy epl::Policies<...> (Zero<0> by default)
/// \tparam Loss has forward(pass, logits, targets) -> double and backward(pass, scale) -> Tensor
/// \tparam D the device type (device::Cpu)
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Loss = nn::SoftmaxCrossEntropy,
          class D = device::Cpu>
class Trainer : private detail::ModelHolder<Model>,
                public detail::TrainerCore<Optimizer, Loss, D, policy::gradient_sync_t<Policy, D>> {
  static_assert((nn::require_layer<Model>(), true));
  static_assert((device::require_trainable<D>(), true));
  static_assert(is_policies<Policy>::value, "epl::Trainer's third argument is an epl::Policies<...> list: wrap the policy, as "
                                            "epl::Policies<epl::Zero<3>>");
  using Sync = policy::gradient_sync_t<Policy, D>;  // also the passes' hooks
  using Core = detail::TrainerCore<Optimizer, Loss, D, Sync>;
  using Pass = typename Core::Pass;

 public:
  /// \brief Trains over the ranks of ctx (data parallel, pipelined, split, as the model and the
  /// configuration say), on device d.
  Trainer(Context& ctx, const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : detail::ModelHolder<Model>{std::move(model)}, Core(ctx, device, std::move(optimizer), std::move(opt)) {
    if constexpr (device::trainable<D>) init(cfg);  // else the one static_assert above says why
  }
  /// \brief Trains over the ranks of ctx on the rank's CPU.
  Trainer(Context& ctx, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
    requires std::is_same_v<D, device::Cpu>
      : Trainer(ctx, ctx.cpu(), cfg, std::move(model), std::move(optimizer), std::move(opt)) {}
  /// \brief Trains on one device: a world of one, the same code.
  Trainer(const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : detail::ModelHolder<Model>{std::move(model)}, Core(device, std::move(optimizer), std::move(opt)) {
    if constexpr (device::trainable<D>) init(cfg);
  }
  // A temporary device would be gone before the first step: keep the device alive beside the Trainer.
  Trainer(Context& ctx, const D&& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {}) = delete;
  Trainer(const D&& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {}) = delete;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // step, evaluate, save, resume, load and the accessors of the run: detail::TrainerCore's.

  /// \brief Every parameter's name, in visiting order: its path of field and member names in the
  /// model (`body.0.attn.1.qkv.weight`), the names checkpoints and safetensors files use.
  [[nodiscard]] std::vector<std::string> parameter_names() {
    std::vector<std::string> names;
    nn::visit_parameters(this->model_, [&](std::string_view path, nn::Parameter&) { names.emplace_back(path); });
    return names;
  }
  /// \brief The model; pipelined, only this rank's stages' parameters are materialized.
  [[nodiscard]] Model& model() noexcept { return this->model_; }

 private:
  // The model cut for this rank's place (its split parts, its stages' chunks), its parameters
  // drawn, the ranks agreed; then the run (TrainerCore::start).
  void init(const Config& cfg) {
    this->config_ = cfg;
    auto options = plan_options(cfg, this->opt_);
    options.rank_speeds = rank_speeds(cfg, *this->device_, *this->world_);  // uneven devices: shares and stage cuts
    auto structure = plan::structure_of<Model>();
    structure.marks_recompute = nn::has_recompute(this->model_);  // by instance: a Repeat of none marks none
    this->plan_ = plan::make(options, this->world_->size(), structure, policy::compiled<Policy>(device::computes<D, double>()));
    const auto& plan = this->plan_;
    auto& groups = this->groups_.emplace(*this->world_, plan.mesh_shape(), plan.rows_over_tensor(), plan.data_weights, plan.micro_batches);
    auto& mesh = groups.mesh();
    const int stage = mesh.coord().pipeline;
    // The Split parts sharded for this rank's place on the tensor axis, before anything is drawn.
    const nn::SplitPart part{mesh.coord().tensor, mesh.tensor_size()};
    const bool vocab_parallel = plan::shard_model(this->model_, part, plan.rows_over_tensor(), plan.sequence_parallel).sharded_output;
    auto chunks = plan::local_chunks<Pass>(this->model_, plan, stage);
    // This rank's chunks' parameters materialized (every parameter is numbered), in ZeRO's blocks.
    const auto mo = plan::arena_options(chunks, plan.chunks_of(stage), plan, mesh.data_size(), this->opt_.seed);
    this->arena_ = param::materialize(this->model_, *this->device_, mo);
    check_agreement(*this->world_, run_facts(this->model_, cfg, this->updater_.optimizer(), this->opt_),
                    this->world_->size() == mesh.data_size() ? "data-parallel" : "the");
    // Gradients meet over the data axis; a colocated split's replicated part (the parameters
    // before its first Split, at the end of the backward-ordered arena) over data and tensor.
    std::int64_t replicated_from = this->arena_.size();
    if (plan.rows_over_tensor())
      plan::for_each_parameter_before_split(this->model_, [&](nn::Parameter& p) {
        if (p.materialized()) replicated_from = std::min(replicated_from, p.offset);
      });
    this->start(cfg, std::move(chunks), part, vocab_parallel, replicated_from);
  }

  void describe_model(checkpoint::TrainerState& s) override { checkpoint::describe(s, this->model_, this->updater_, *this->device_); }
  void name_layer(Error& e) override { nn::name_layer(this->model_, e); }
  [[noreturn]] void fail_non_finite(double norm) override {
    detail::fail_non_finite_gradient(this->model_, this->arena_, [&](const nn::Parameter& p) { return this->sync_->grad_of(p); },
                                     *this->device_, norm, this->steps_ + 1, this->plan_.policies, *this->world_);
  }
};

}  // namespace v0
}  // namespace epl
