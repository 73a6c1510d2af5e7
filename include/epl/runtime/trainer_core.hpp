#pragma once
/// \file
/// \brief detail::TrainerCore — the half of epl::Trainer that does not depend on the model: a
/// step, evaluation, saving and loading, over the chunks, arena and gradient sync the Trainer made
/// of its model. It is a class template over the optimizer, the loss, the device and the gradient
/// sync only, so every Trainer of a program shares it whatever its model, and a program linked
/// with epl::precompiled takes it (on the CPU, for the library's optimizers) from that library
/// (runtime/model_free.hpp). Its heavy members are defined below the class, not in it: an
/// `extern template` then keeps a program from compiling them (#38). The Trainer lends it the
/// things only the model knows (describe_model, fail_non_finite, name_layer).
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "epl/checkpoint/serializer.hpp"
#include "epl/config/run_options.hpp"
#include "epl/data/data.hpp"
#include "epl/device/requirements.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/nn/loss.hpp"
#include "epl/param/arena.hpp"
#include "epl/plan/plan.hpp"
#include "epl/policy/hooks.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/runtime/agreement.hpp"
#include "epl/runtime/context.hpp"
#include "epl/runtime/divergence.hpp"
#include "epl/runtime/trace.hpp"
#include "epl/strategy/executor.hpp"
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

// Gives back the device's cached blocks, all of them or those nothing needed since the last call,
// where the device can trim (CPU, Isolated; CUDA's pools do not yet).
template <class D>
void trim_device(const D& device, bool all) noexcept {
  if constexpr (requires { device.trim_cache(all); }) (void)device.trim_cache(all);
}

template <class Optimizer, class Loss, class D, class Sync>
class TrainerCore {
 public:
  using Pass = nn::Pass<D, Sync>;

  /// \brief One optimizer step on batch (this rank's share of the global batch); returns the
  /// global batch's mean loss. A collective: every rank calls it.
  double step(const Batch& batch);
  /// \brief The loss on batch without training (dropout off, no update), over this rank's rows
  /// (pipelined: the last stage's loss, on every rank).
  double evaluate(const Batch& batch);
  /// \brief The model's output on inputs (this rank's rows, as evaluate: dropout off, no update),
  /// whole on every rank: a vocabulary-parallel head's columns gathered over its split group, a
  /// pipeline's last stage's output sent to every stage. On this rank's device. A collective.
  Tensor predict(const Tensor& inputs);
  /// \brief Data parallel: fails unless every replica holds bit-identical parameters.
  void check_replicas() {
    agree_on_call(*world_, Call::kCheckReplicas, steps_, 0, false);
    compare_replicas();
  }
  /// \brief ZeRO stage 3 keeps only this rank's shard of the parameters between layers: this
  /// gathers all of them so model() can be read (a collective over the data-parallel group; every
  /// rank calls it). They stay until the next step or evaluation. Other runs: no-op for the
  /// values. A program may write them, alike on every rank: the next step, evaluation, save or
  /// with_owned_values compares the replicas' copies first and fails naming a rank that differs.
  void gather_parameters() {
    agree_on_call(*world_, Call::kGather, steps_, 0, false);
    sync_->gather_all();
    gathered_ = true;
  }

  /// \brief Saves the whole training state into dir/step-N (N = steps()): every parameter and the
  /// optimizer's state (each rank writes what it holds), the step, the optimizer's step count, the
  /// loss scale, the watched loaders' positions and the configuration. A collective: every rank
  /// calls it. The directory appears complete or not at all; a rank that fails ends the save on
  /// every rank with its error; the run holds dir's lock from its first save on. Returns the directory.
  std::filesystem::path save(const std::filesystem::path& dir);
  /// \brief Loads the newest complete checkpoint in dir and returns its directory; nullopt,
  /// changing nothing, when dir holds none. A collective.
  std::optional<std::filesystem::path> resume(const std::filesystem::path& dir);
  /// \brief Loads a checkpoint (a step-N directory save wrote) saved by any layout; a checkpoint of
  /// another model, optimizer or seed, or a missing, truncated or corrupt file, is an error naming
  /// the file, on every rank. A collective.
  void load(const std::filesystem::path& checkpoint);
  /// \brief Sets every parameter from a safetensors file whose tensors carry the model's parameter
  /// names (parameter_names()): an export of a checkpoint (any layout), or PyTorch's
  /// `safetensors.torch.save_file(model.state_dict(), path)` of a model of the same architecture.
  /// Strict, as PyTorch's load_state_dict(strict=True); the optimizer's state and the step stay.
  /// A collective.
  void load_safetensors(const std::filesystem::path& file);
  /// \brief fn(device, owned values, hooks) with the values this rank updates (its ZeRO slices, or all
  /// it holds) and the policies' step hooks, where a policy swaps weights in (epl::swap_ema). A collective.
  template <class Fn>
  void with_owned_values(Fn&& fn) {
    agree_on_call(*world_, Call::kOwnedValues, steps_, 0, false);
    check_gathered_alike();
    sync_->release_all();
    fn(*device_, std::span<const Tensor>(sync_->owned_values()), hooks_);
    sync_->after_update();
  }
  /// \brief Makes loader's position part of the saved state and, when this run resumed, moves it
  /// to the saved position. Watch the same loaders in the same order in every run.
  void watch(data::WindowLoader& loader) { serializer_.watch(loader); }
  [[nodiscard]] const std::optional<std::filesystem::path>& resumed_from() const noexcept { return serializer_.resumed_from(); }

  [[nodiscard]] Optimizer& optimizer() noexcept { return updater_.optimizer(); }
  [[nodiscard]] const D& device() const noexcept { return *device_; }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::int64_t micro_batches() const noexcept { return plan_.micro_batches; }
  /// \brief The rows of each global batch this rank reads (its data-parallel share): hand it to
  /// the loader (data::WindowLoader(..., trainer.data_shard())). Under io.slicing on several
  /// replicas each rank's data is its own (data::slice_files), and the shard says so; the key
  /// stays unread until data::slice_files reads it (a program that never calls it is refused).
  [[nodiscard]] data::Shard data_shard() const {
    const auto r = groups_->rows();
    return {r.rank, r.ranks, r.weights, r.quantum, r.ranks > 1 && config_.peek<bool>("io.slicing")};
  }
  /// \brief What this run does on its world: pipeline ranks, chunks, schedule, policies.
  [[nodiscard]] const plan::Plan& plan() const noexcept { return plan_; }
  /// \brief This rank's list of actions for a step (the schedule's, with sends and receives).
  [[nodiscard]] const std::vector<strategy::Action>& actions() const noexcept { return actions_; }
  /// \brief The model chunks (pipeline stages) this rank runs.
  [[nodiscard]] const std::vector<strategy::Chunk<Pass>>& local_chunks() const { return executor_->chunks(); }
  [[nodiscard]] double last_grad_norm() const noexcept { return last_grad_norm_; }
  /// \brief The learning rate of the last update (the lr.* schedule's, or the optimizer's options().lr).
  [[nodiscard]] double learning_rate() const { return updater_.learning_rate(); }
  /// \brief The fraction of the last step's gradient all-reduce time hidden behind backward.
  [[nodiscard]] double last_overlap() const noexcept { return sync_->last_overlap(); }
  [[nodiscard]] std::size_t gradient_buckets() const noexcept { return sync_->buckets(); }
  /// \brief gradient_checkpoint.check_gradients: the largest absolute difference, over every rank,
  /// between the first step's gradients with and without recompute (none until the check ran).
  [[nodiscard]] std::optional<double> checkpoint_gradient_difference() const { return hooks_.template get<policy::home::Recompute>().difference(); }
  /// \brief The dtype this run's GEMMs round their operands to: bf16 or f16 under AMP, else f32.
  [[nodiscard]] DType amp() const noexcept { return plan_.policies.matmul; }
  /// \brief Under AMP, the loss scale of the next step (policy::LossScaler's rule); 1 without.
  [[nodiscard]] double loss_scale() const noexcept { return hooks_.template get<policy::home::Amp>().loss_scale(); }
  /// \brief Steps whose update AMP skipped because a gradient overflowed (0 without AMP).
  [[nodiscard]] std::int64_t skipped_steps() const noexcept { return hooks_.template get<policy::home::Amp>().skipped(); }
  /// \brief Whether this run keeps weights, gradients and optimizer state in the host pool.
  [[nodiscard]] bool offloaded() const noexcept { return plan_.policies.offload; }
  /// \brief The ZeRO stage this run uses (0: none): zero.level, or the compiled epl::Zero<k>.
  [[nodiscard]] int zero_stage() const noexcept { return plan_.policies.zero_stage; }
  /// \brief The flat parameter and gradient buffers (this rank's stages'; under ZeRO 2 the
  /// gradients and under ZeRO 3 the values too are not kept whole: those buffers are empty).
  [[nodiscard]] const param::Arena& arena() const noexcept { return arena_; }
  [[nodiscard]] strategy::Mesh& mesh() noexcept { return groups_->mesh(); }
  /// \brief Bytes the gradient reduction moved so far (the data-parallel group's counts).
  [[nodiscard]] comm::CommStats gradient_stats() const { return groups_->mesh().data().stats(); }
  /// \brief Bytes the pipeline's sends and receives moved so far.
  [[nodiscard]] comm::CommStats pipeline_stats() const { return executor_->stats(); }
  /// \brief This rank's spans when the `trace` key names a file, else null.
  [[nodiscard]] const Timeline* timeline() const noexcept { return tracer_.timeline(); }

  TrainerCore(const TrainerCore&) = delete;
  TrainerCore& operator=(const TrainerCore&) = delete;

 protected:
  // Over the ranks of ctx's world, on device d.
  TrainerCore(Context& ctx, const D& device, Optimizer optimizer, TrainerOptions opt)
      : device_(&device), world_(&ctx.world()), updater_(std::move(optimizer)), opt_(std::move(opt)) {
    if constexpr (requires { device.lane(); }) world_->attach(device.lane());  // its groups move the device's buffers
  }
  // On one device: a world of one.
  TrainerCore(const D& device, Optimizer optimizer, TrainerOptions opt)
      : device_(&device), solo_(comm::Communicator::solo_on(device)), world_(&*solo_), updater_(std::move(optimizer)),
        opt_(std::move(opt)) {}
  virtual ~TrainerCore();

  // What only the model knows: its parameters' names and the optimizer's view of them, for a
  // checkpoint (checkpoint::describe); and, when the gradient norm is not finite, the error naming
  // the first parameter whose gradient is not.
  virtual void describe_model(checkpoint::TrainerState& s) = 0;
  [[noreturn]] virtual void fail_non_finite(double norm) = 0;
  // An error leaving a layer of the model during a pass: named by the layer's path (nn::name_layer).
  virtual void name_layer(Error& e) = 0;

  // The run, once the Trainer made this rank's chunks of its model, drew its arena and agreed with
  // the other ranks: the replicas' first copy, the gradient sync, the optimizer's state and
  // schedule, the policies' hooks, the schedule's actions, the executor, the trace and the
  // checkpoints (a resume loads here). `replicated_from`: the arena offset where a colocated
  // split's replicated part begins (the arena's size when there is none).
  void start(const Config& cfg, std::vector<strategy::Chunk<Pass>> chunks, const nn::SplitPart& part, bool vocab_parallel,
             std::int64_t replicated_from);

  const D* device_;
  // Destroyed last of the run's members: once its tensors are freed, its device's cached blocks go
  // back too, so a destroyed Trainer's memory is not held until the next one trims (a stranger's).
  struct GiveBack {
    const D* device;
    ~GiveBack() { trim_device(*device, true); }
  } give_back_{device_};
  DeviceClaim claim_{device_->id()};  // one thread per GPU slot (or device::Isolated index)
  std::optional<comm::Communicator> solo_;
  comm::Communicator* world_;
  optim::Updater<Optimizer> updater_;
  TrainerOptions opt_;
  Config config_;
  plan::Plan plan_;
  std::optional<strategy::StepGroups> groups_;
  param::Arena arena_;
  std::unique_ptr<Sync> sync_;
  policy::Hooks<D> hooks_;  // the policies' step hooks: AMP's loss scale and verdict, recompute's check, the EMA
  std::vector<strategy::Action> actions_;
  std::optional<strategy::Executor<Pass, Loss>> executor_;
  Tracer tracer_;
  checkpoint::Serializer serializer_;
  std::int64_t steps_ = 0;
  strategy::RowPlace place_;  // this step's rows in the global batch
  bool stepped_ = false;  // this trainer took a step
  bool gathered_ = false;  // gather_parameters() was called: the program may have written the parameters
  bool sharded_output_ = false;  // the last chunk's output is a vocabulary-parallel part of its columns
  double last_grad_norm_ = 0;

 private:
  void compare_replicas() {
    EPL_CHECK(sync_->stage() < 3, "check_replicas compares the replicas' whole parameters, which ZeRO stage 3 never holds (each "
              "rank keeps its shard); it runs under zero.level \"\", \"v0\" and \"v1\"");
    groups_->check_replicas(strategy::content_hash(arena_.values(), reader()), steps_);
  }
  // After gather_parameters() a program may write the parameters, alike on every rank (each rank
  // keeps its own slice of them): before a step, an evaluation, a save or with_owned_values reads
  // them back, the replicas' copies must agree. keep: they stay gathered (a save), so a later write
  // is checked too.
  void check_gathered_alike(bool keep = false) {
    if (!gathered_) return;
    gathered_ = keep;
    if (groups_->mesh().data_size() == 1) return;
    std::uint64_t h = 0;
    for (const auto& t : sync_->gathered()) h = mix64(h ^ strategy::content_hash(t, reader()));
    groups_->check_gathered(h, steps_);
  }
  // How host code reads this device's tensors (a GPU's memory only through a download).
  [[nodiscard]] strategy::Download reader() const { return [d = device_](const Tensor& t, void* h) { d->download(t, h); }; }
  // A pass of chunk c for micro-batch m of `count`: the run's seed, step, the global index of its
  // first sample, the scale of its loss gradient, what it recomputes and AMP's GEMM precision.
  Pass pass(int m, int count, bool training, nn::RecomputeMode recompute, std::int64_t first = 0) {
    // this rank's share of the mean: 1 / M of its rows' mean, times its weight among uneven shares
    const double scale = hooks_.loss_factor() / count * (training ? place_.weight : 1.0);
    return Pass(*device_, nn::PassOptions{training, opt_.seed, static_cast<std::uint64_t>(steps_), static_cast<std::uint64_t>(m), first,
                                          scale, recompute, plan_.policies.matmul},
                sync_.get(), groups_->layer_groups());
  }
  // Forward and backward of every micro-batch on the schedule, and the gradients reduced (with
  // communication.clip_after_allreduce=false, clipped before); returns this rank's loss.
  double compute_gradients(const Batch& batch, nn::RecomputeMode recompute);
  // A load (a collective): into this rank's values, then the replicas or ZeRO slices meet again.
  template <class Fn>
  void reload(Call call, Fn&& into) {
    agree_on_call(*world_, call, steps_, 0, false);
    gathered_ = false;  // what a program wrote is loaded over
    sync_->release_all();  // as in resume
    auto s = state();
    into(s);
    sync_->after_update();
  }
  // The device's cached blocks that nothing since the last call needed go back (another batch's
  // activations), all of them once the run is built (start-up's whole model, which ZeRO shards).
  void trim_cache(bool all = false) noexcept { trim_device(*device_, all); }
  // What the serializer saves and loads: views of the arena, the optimizer and the scaler.
  checkpoint::TrainerState state();
};

template <class Optimizer, class Loss, class D, class Sync>
TrainerCore<Optimizer, Loss, D, Sync>::~TrainerCore() = default;

template <class Optimizer, class Loss, class D, class Sync>
double TrainerCore<Optimizer, Loss, D, Sync>::step(const Batch& batch) {
  if constexpr (!device::trainable<D>) return 0;  // the Trainer's static_assert is the one error
  else {
    agree_on_call(*world_, Call::kStep, steps_ + 1, detail::rows_of(batch.inputs), world_->size() == groups_->mesh().data_size(),
                  !groups_->uneven(), updater_.next_learning_rate());
    check_gathered_alike();
    detail::check_batch(batch.inputs, batch.targets, device_->id(), plan_.micro_batches, groups_->rows().ranks, groups_->uneven(),
                        config_.source(keys::num_micro_batch) == Config::Source::kEnvironment
                            ? " (" + Config::env_name(keys::num_micro_batch.name) + " in the environment)" : std::string());
    place_ = groups_->place(detail::rows_of(batch.inputs), steps_ + 1);  // uneven shares: checked, and the loss's weight
    groups_->check_rows(batch.inputs, batch.targets, steps_ + 1, reader());
    if (!std::exchange(stepped_, true)) config_.check_all_read();  // a key nothing read (io.slicing alone) is an error
    serializer_.before_step();
    hooks_.before_gradients(*device_, steps_, [&]() -> decltype(auto) {  // gradient_checkpoint.check_gradients' reference
      (void)compute_gradients(batch, nn::RecomputeMode::kNone);
      return sync_->owned_grads();
    });
    const double mine = place_.weight * compute_gradients(batch, plan_.policies.recompute);  // schedule, then sync.finish()
    const double loss = groups_->loss(mine);
    hooks_.after_gradients(*device_, sync_->owned_grads(), *world_);
    if (opt_.check_finite) detail::check_finite_loss(*world_, loss, mine, steps_ + 1, plan_.policies, plan_.pipeline);
    // AMP's factor and the clip coefficient are read with the gradients by the update, not applied in passes of their own
    const double unscale = hooks_.gradient_factor();
    if (plan_.policies.clip_after_reduce) last_grad_norm_ = groups_->norm(sync_->sum_squares()) * unscale;
    const bool finite = std::isfinite(last_grad_norm_);
    if (hooks_.accept(finite, steps_ + 1, world_->rank() == 0)) {  // AMP: an overflow skips the update
      if (opt_.check_finite && !finite) fail_non_finite(last_grad_norm_);
      const bool clips = plan_.policies.clip_after_reduce && opt_.clip_norm > 0;
      updater_.step(*device_, std::span<const Tensor>(sync_->owned_values()), std::span<const Tensor>(sync_->owned_grads()),
                    plan_.policies.apply_groups, unscale * (clips ? optim::clip_coefficient(last_grad_norm_, opt_.clip_norm) : 1.0));
      hooks_.after_update(*device_, sync_->owned_values());  // the EMA of the weights
    }
    sync_->after_update();  // ZeRO: the updated slices meet again
    ++steps_;
    if (opt_.check_replicas_every > 0 && groups_->mesh().data_size() > 1 && sync_->stage() < 3 &&
        (steps_ == 1 || steps_ % opt_.check_replicas_every == 0))
      compare_replicas();
    if (serializer_.due(steps_)) save(serializer_.dir());
    trim_cache();
    return loss;
  }
}

template <class Optimizer, class Loss, class D, class Sync>
double TrainerCore<Optimizer, Loss, D, Sync>::evaluate(const Batch& batch) {
  if constexpr (!device::trainable<D>) return 0;
  else {
    agree_on_call(*world_, Call::kEvaluate, steps_, 0, false);
    check_gathered_alike();
    detail::check_batch(batch.inputs, batch.targets, device_->id(), 1, 1, false);  // no rows evaluated to nan (a stranger's finding)
    groups_->check_evaluation_rows(batch.inputs, batch.targets, steps_, reader());  // a stage's rows another's: another loss, silently
    const Tensor targets = groups_->targets(*device_, batch.targets, 1);
    double loss = 0;
    try {
      loss = executor_->run(plan_.forward_only(groups_->mesh().coord().pipeline), {batch.inputs, targets, 1},
                            [&](int, int) { return pass(0, 1, false, nn::RecomputeMode::kNone); });
    } catch (Error& e) {
      name_layer(e);
      throw;
    }
    sync_->release_all();
    trim_cache();
    return groups_->stage_loss(loss);
  }
}

template <class Optimizer, class Loss, class D, class Sync>
Tensor TrainerCore<Optimizer, Loss, D, Sync>::predict(const Tensor& inputs) {
  if constexpr (!device::trainable<D>) return {};
  else {
    agree_on_call(*world_, Call::kPredict, steps_, 0, false);
    check_gathered_alike();
    detail::check_batch(inputs, inputs, device_->id(), 1, 1, false);  // no targets: the inputs stand in for them
    groups_->check_evaluation_rows(inputs, inputs, steps_, reader(), "trainer.predict()");
    std::vector<Tensor> out(1);
    try {
      executor_->run(plan_.forward_only(groups_->mesh().coord().pipeline), {inputs, Tensor{}, 1, &out},
                     [&](int, int) { return pass(0, 1, false, nn::RecomputeMode::kNone); });
    } catch (Error& e) {
      name_layer(e);
      throw;
    }
    sync_->release_all();
    Tensor whole = groups_->whole_output(*device_, out[0], inputs.dim(0), sharded_output_);
    trim_cache();
    return whole;
  }
}

template <class Optimizer, class Loss, class D, class Sync>
std::filesystem::path TrainerCore<Optimizer, Loss, D, Sync>::save(const std::filesystem::path& dir) {
  agree_on_call(*world_, Call::kSave, steps_, 0, false);
  check_gathered_alike(true);
  sync_->write_back();  // ZeRO stage 3: what the user wrote into the gathered parameters is saved
  return serializer_.save(dir, state());
}

template <class Optimizer, class Loss, class D, class Sync>
std::optional<std::filesystem::path> TrainerCore<Optimizer, Loss, D, Sync>::resume(const std::filesystem::path& dir) {
  agree_on_call(*world_, Call::kResume, steps_, 0, false);
  gathered_ = false;
  sync_->release_all();  // ZeRO stage 3: parameters gathered for the user would be copied back over the loaded ones
  auto s = state();
  auto from = serializer_.resume(dir, s);
  if (from) sync_->after_update();  // each rank loaded its slices: they meet again
  return from;
}

template <class Optimizer, class Loss, class D, class Sync>
void TrainerCore<Optimizer, Loss, D, Sync>::load(const std::filesystem::path& checkpoint) {
  reload(Call::kLoad, [&](checkpoint::TrainerState& s) { serializer_.load(checkpoint, s); });
}

template <class Optimizer, class Loss, class D, class Sync>
void TrainerCore<Optimizer, Loss, D, Sync>::load_safetensors(const std::filesystem::path& file) {
  reload(Call::kLoadSafetensors, [&](checkpoint::TrainerState& s) {
    serializer_.load_safetensors(file, s, [&](std::uint64_t weights) {
      RunFacts facts;
      facts.add_hash("the weights they read", weights, "from " + file.string());
      check_agreement(*world_, facts, "load_safetensors:",
                      "every rank loads the same weights (one file, or copies of it): the ranks would otherwise each keep their own "
                      "shards of different models");
    });
    hooks_.replaced(*device_, sync_->owned_values());  // an EMA starts from the loaded weights
  });
}

template <class Optimizer, class Loss, class D, class Sync>
void TrainerCore<Optimizer, Loss, D, Sync>::start(const Config& cfg, std::vector<strategy::Chunk<Pass>> chunks, const nn::SplitPart& part,
                                                  bool vocab_parallel, std::int64_t replicated_from) {
  const auto& policies = plan_.policies;
  auto& mesh = groups_->mesh();
  const int stage = mesh.coord().pipeline;
  // Replicas start from one copy: rank 0's.
  if (mesh.data_size() > 1) mesh.data().broadcast(arena_.values().slice(0, replicated_from), 0);
  if (auto* g = groups_->stage_group()) g->broadcast(arena_.values().slice(replicated_from, arena_.size()), 0);
  sync_ = std::make_unique<Sync>(*device_, mesh.data(), groups_->stage_group(), arena_,
                                 policy::SyncOptions::of(policies, plan_.rows_over_tensor() ? replicated_from : -1, mesh.tensor_size() > 1));
  updater_.keep_state_in_host_pool(policies.offload);
  updater_.set_schedule(lr_schedule(cfg, opt_));
  hooks_.start(*device_, policies, {.row_shares = groups_->rows().ranks, .owned = sync_->owned_values(), .host = policies.offload});
  actions_ = plan_.actions(stage);
  executor_.emplace(*device_, std::move(chunks), plan_.chunks, plan_.pipeline, stage, mesh.pipeline());
  if (vocab_parallel) executor_->loss().parallelize(part);
  sharded_output_ = vocab_parallel;
  tracer_.open(cfg.get(keys::trace), *world_);
  executor_->set_timeline(tracer_.timeline());
  sync_->set_timeline(tracer_.timeline());
  groups_->set_timeline(tracer_.timeline());
  serializer_.configure(cfg, opt_.checkpoint_phase);
  auto s = state();
  serializer_.open(s);
  if (serializer_.resumed_from()) sync_->after_update();
  trim_cache(true);
}

template <class Optimizer, class Loss, class D, class Sync>
double TrainerCore<Optimizer, Loss, D, Sync>::compute_gradients(const Batch& batch, nn::RecomputeMode recompute) {
  const int count = plan_.micro_batches;
  const std::int64_t per = batch.inputs.dim(0) / count, first = place_.first;
  const auto end = plan_.policies.end_taskgraph;
  sync_->begin_step();
  double loss = 0;
  try {
    loss = executor_->run(actions_, {batch.inputs, groups_->targets(*device_, batch.targets, count), count},
                          [&](int c, int m) {
                            return pass(m, count, true, end < 0 || c <= end ? recompute : nn::RecomputeMode::kNone, first + m * per);
                          },
                          [&](int m) { sync_->backward_of(m, count); });
  } catch (Error& e) {
    name_layer(e);
    throw;
  }
  if (!plan_.policies.clip_after_reduce) {  // EPL's per-replica clipping, of each replica's gradients before the reduction
    last_grad_norm_ = groups_->norm(sync_->sum_squares());
    if (opt_.clip_norm > 0) optim::scale_to_norm(*device_, std::span<const Tensor>(sync_->owned_grads()), last_grad_norm_, opt_.clip_norm);
  }
  sync_->finish();
  return loss;
}

template <class Optimizer, class Loss, class D, class Sync>
checkpoint::TrainerState TrainerCore<Optimizer, Loss, D, Sync>::state() {
  checkpoint::TrainerState s;
  s.world = world_;
  s.step = &steps_;
  s.arena = &arena_;
  const auto ranges = sync_->owned_ranges();
  const auto values = sync_->owned_values();
  std::int64_t at = 0;
  for (std::size_t u = 0; u < ranges.size(); at += ranges[u].size(), ++u) s.regions.push_back({ranges[u], values[u], at});
  const auto& c = groups_->mesh().coord();
  const bool zero = sync_->stage() > 0;  // one copy of what replicas share: data rank 0, or under ZeRO each its slices
  s.writes = [zero, c](const nn::Parameter& p) { return (zero || c.data == 0) && (!p.shard.whole() || c.tensor == 0); };
  describe_model(s);
  s.scaler = hooks_.template get<policy::home::Amp>().scaler();
  hooks_.saved(*device_, values, s.policy_state);
  s.seed = opt_.seed;
  s.data = groups_->mesh().data_size();
  s.tensor = groups_->mesh().tensor_size();
  s.pipeline = groups_->mesh().pipeline_size();
  s.zero = sync_->stage();
  return s;
}

}  // namespace detail
}  // namespace v0
}  // namespace epl
