#pragma once
/// \file
/// \brief epl::Trainer — one training step, the same for one device and for every strategy:
///   plan      the mesh, the model cut into chunks (pipeline stages), this rank's flat arena;
///             the ranks checked to agree on the run
///   schedule  forward and backward of each micro-batch on this rank's chunks, with the sends
///             and receives between stages, in the schedule's order; the last micro-batch's
///             backward hands each finished gradient to the reducer
///   reduce    wait for the gradient buckets
///   clip      the global gradient norm (and a NaN or infinity stops the run, named; under AMP
///             the gradients are unscaled first, and a NaN or infinity skips the update)
///   update    the optimizer over the owned range of the arena
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "epl/device/requirements.hpp"
#include "epl/nn/loss.hpp"
#include "epl/optim/optimizer.hpp"
#include "epl/param/arena.hpp"
#include "epl/policy/amp.hpp"
#include "epl/policy/policies.hpp"
#include "epl/policy/reducer.hpp"
#include "epl/policy/zero.hpp"
#include "epl/runtime/agreement.hpp"
#include "epl/runtime/checkpoint.hpp"
#include "epl/runtime/config.hpp"
#include "epl/runtime/context.hpp"
#include "epl/runtime/data.hpp"
#include "epl/runtime/trace.hpp"
#include "epl/plan/plan.hpp"
#include "epl/plan/shard.hpp"
#include "epl/strategy/executor.hpp"

namespace epl {
inline namespace v0 {

/// \brief Options of a Trainer that are not EPL config keys.
struct TrainerOptions {
  std::uint64_t seed = 0;  ///< parameter init and dropout streams
  double clip_norm = 0;    ///< clip gradients to this global L2 norm; 0: no clipping
  DType dtype = DType::kF32;
  /// Data parallel: after the first step and every this many steps, compare a hash of the
  /// parameters across replicas and fail if they drifted apart (0: never; one small all_gather).
  std::int64_t check_replicas_every = 100;
  /// A loss or gradient that is NaN or infinite is an error naming the step and the parameter
  /// (false: train on, as a run that handles overflow itself might).
  bool check_finite = true;
  /// Mixed precision (amp.level "O1") with amp.loss_scale = "dynamic": the scale the run starts
  /// at, and the good steps in a row after which it doubles (policy::LossScaler has the rule).
  double amp_init_scale = 65536;
  std::int64_t amp_growth_interval = 2000;
  /// Called on every rank at each phase of a checkpoint save ("prepared", "shards written",
  /// "manifest written"): where a test makes a save fail part-way. Null: nothing.
  std::function<void(std::string_view phase)> checkpoint_phase = nullptr;
};

namespace detail {
/// EPL's communication keys as bucket options. Under AMP (`loss_scaled`) the gradients already
/// carry the loss scale, which is then the fp16 wire's scale too: communication.fp16_scale is 1.
inline policy::BucketOptions bucket_options(const Config& cfg, bool loss_scaled) {
  policy::BucketOptions o;
  o.max_splits = static_cast<int>(cfg.get(keys::max_splits));
  o.fp16 = cfg.get(keys::fp16);
  o.fp16_scale = loss_scaled ? 1.0 : static_cast<double>(cfg.get(keys::fp16_scale));
  o.op = cfg.get(keys::gradients_reduce_method) == "sum" ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
  return o;
}

/// The ZeRO stage a Policies list compiles (0 for what is not one: its static_assert says why).
template <class P>
constexpr int compiled_zero() {
  if constexpr (is_policies<P>::value) return P::zero::kStage;
  else return 0;
}

/// Whether a Policies list compiles offload (epl::Offload<epl::offload::V0>).
template <class P>
constexpr bool compiled_offload() {
  if constexpr (is_policies<P>::value) return P::offloading::kHost;
  else return false;
}

/// The precision a Policies list compiles for AMP's GEMMs (f32: none).
template <class P>
constexpr DType compiled_amp() {
  if constexpr (is_policies<P>::value) return P::mixed_precision::kMatmul;
  else return DType::kF32;
}

/// The stage a run uses: zero.level when given (EPL's "v0" stage 1, "v1" stage 2, "v2" stage 3,
/// "" none), else the compiled one; a stage above the compiled one is an error naming both.
inline int zero_stage(const Config& cfg, int compiled) {
  const std::string level = cfg.get(keys::zero_level);
  if (cfg.source(keys::zero_level) == Config::Source::kDefault) return compiled;
  const int stage = level.empty() ? 0 : level[1] - '0' + 1;
  EPL_CHECK(stage <= compiled, "zero.level = \"", level, "\" asks for ZeRO stage ", stage, " but this program was built with ",
            compiled == 0 ? std::string("no epl::Zero<k> in its epl::Policies<...>") : "epl::Zero<" + std::to_string(compiled) + ">",
            "; add epl::Zero<", stage, "> to them (or higher: it runs every stage up to its own; keep the other policies)",
            " or choose a zero.level up to ", compiled == 0 ? std::string("\"\"") : "\"v" + std::to_string(compiled - 1) + "\"");
  return stage;
}

/// The hooks of a training pass: in the last micro-batch, each layer's gradients go to the
/// reducers the moment the layer's backward returns; under ZeRO the sharder gathers each
/// layer's parameters before it runs and reduce-scatters its gradients after.
template <class Reducer, class Sharder>
struct StepHooks {
  Reducer* reducer = nullptr;
  Sharder* sharder = nullptr;  // null: no ZeRO this run
  bool active = false;
  template <class L, class Ctx> void before_forward(L& l, Ctx&) {
    if constexpr (!std::is_void_v<Sharder>)
      if (sharder) sharder->before_forward(l);
  }
  template <class L, class Ctx> void before_backward(L& l, Ctx&) {
    if constexpr (!std::is_void_v<Sharder>)
      if (sharder) sharder->before_backward(l);
  }
  template <class L, class Ctx> void after_backward(L& l, Ctx&) {
    if constexpr (!std::is_void_v<Sharder>)
      if (sharder) sharder->after_backward(l);
    if (active) nn::for_each_parameter(l, [&](nn::Parameter& p) { reducer->ready(p); });
  }
};

/// A fast hash of a tensor's bytes (64-bit words through mix64), for comparing replicas.
inline std::uint64_t content_hash(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw());
  const std::size_t n = t.bytes();
  std::uint64_t h = n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w);
  }
  for (; i < n; ++i) h = mix64(h ^ p[i]);
  return h;
}

/// Every rank's text, in rank order, on every rank of group (two all_gathers: lengths, then the
/// bytes padded to the longest).
inline std::vector<std::string> all_gather_text(comm::Communicator& group, const std::string& mine) {
  const int n = group.size();
  std::int64_t len = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n));
  group.all_gather(comm::Buffer(&len, 1, DType::kI64), comm::Buffer(lens.data(), n, DType::kI64));
  const std::int64_t words = (*std::max_element(lens.begin(), lens.end()) + 7) / 8;
  std::vector<std::uint64_t> padded(static_cast<std::size_t>(std::max<std::int64_t>(words, 1)), 0),
      all(static_cast<std::size_t>(n) * padded.size());
  std::memcpy(padded.data(), mine.data(), mine.size());
  group.all_gather(comm::Buffer(padded.data(), static_cast<std::int64_t>(padded.size()), DType::kI64),
                   comm::Buffer(all.data(), static_cast<std::int64_t>(all.size()), DType::kI64));
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r)
    texts.emplace_back(reinterpret_cast<const char*>(all.data() + static_cast<std::size_t>(r) * padded.size()),
                       static_cast<std::size_t>(lens[static_cast<std::size_t>(r)]));
  return texts;
}

/// Runs fn on every rank of group and then agrees on the outcome, so that an error on one rank
/// (a full disk, a corrupt file) ends the operation on all of them instead of leaving the others
/// waiting in its next collective: the failing rank rethrows its error, the others fail with it
/// (on thread ranks only the first error a process sees is printed, so each carries the cause).
template <class Fn>
void on_every_rank(comm::Communicator& group, const std::string& what, Fn&& fn) {
  std::exception_ptr error;
  std::string message;
  try {
    fn();
  } catch (const Error& e) {
    error = std::current_exception();
    message = e.what();
  } catch (const std::exception& e) {  // a filesystem error, say: named with what failed
    message = concat(what, " failed: ", e.what());
    error = std::make_exception_ptr(Error(message, __FILE__, __LINE__));
  }
  const auto all = all_gather_text(group, message);
  if (error) std::rethrow_exception(error);
  for (int r = 0; r < group.size(); ++r)
    EPL_CHECK(all[static_cast<std::size_t>(r)].empty(), what, " failed on rank ", r, ": ", all[static_cast<std::size_t>(r)]);
}

/// A number as text that reads back to the same double.
inline std::string exact(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

/// The largest absolute value of a floating-point tensor on device d (read back to the host).
template <class D>
double max_abs(const D& d, const Tensor& t) {
  if (t.numel() == 0) return 0;
  std::vector<double> host(static_cast<std::size_t>(t.numel()));
  if (t.dtype() == DType::kF64) {
    d.download(t, host.data());
  } else {
    EPL_CHECK(t.dtype() == DType::kF32, "max_abs: a ", name_of(t.dtype()), " tensor; expected f32 or f64");
    std::vector<float> f(host.size());
    d.download(t, f.data());
    std::copy(f.begin(), f.end(), host.begin());
  }
  double most = 0;
  for (double v : host) most = std::max(most, std::abs(v));
  return most;
}
}  // namespace detail

/// \brief Trains Model with Optimizer on device type D, on one device or over the ranks of an
/// epl::Context.
///
/// step(batch) splits the batch's first dimension into pipeline.num_micro_batch micro-batches
/// and accumulates their gradients (each scaled by 1/M), so the update equals one step on the
/// whole batch; it returns the mean loss. Data parallel, batch is this rank's share of the
/// global batch (data_shard()): every rank must get the same number of rows (checked each
/// step), the gradients are averaged over the data-parallel group as backward produces them,
/// and the returned loss is the global batch's. Pipelined (an epl::Pipeline model, or
/// pipeline.num_stages with auto.auto_parallel), each rank holds its stages' parameters only,
/// runs pipeline.strategy's schedule, and returns the same loss on every rank.
/// \tparam Model a layer (a user aggregate, a combinator), or a strategy: Replicate<D, ...>,
///         Pipeline<Stages...>
/// \tparam Optimizer models optim::optimizer
/// \tparam Policy epl::Policies<...> (Zero<0> by default)
/// \tparam Loss has forward(ctx, logits, targets) -> double and backward(ctx, scale) -> Tensor
/// \tparam D the device type (device::Cpu)
template <class Model, optim::optimizer Optimizer, class Policy = Policies<>, class Loss = nn::SoftmaxCrossEntropy,
          class D = device::Cpu>
class Trainer {
  static_assert((nn::require_layer<Model>(), true));
  static_assert((device::require_trainable<D>(), true));
  static_assert(is_policies<Policy>::value, "epl::Trainer's third argument is an epl::Policies<...> list: wrap the policy, as "
                                            "epl::Policies<epl::Zero<3>>");
  static constexpr int kZero = detail::compiled_zero<Policy>();  // the highest ZeRO stage compiled in
  static constexpr bool kOffload = detail::compiled_offload<Policy>();
  static constexpr DType kAmp = detail::compiled_amp<Policy>();  // f32: built without epl::Amp
  using Reducer = policy::ReducerSet<D>;
  using Sharder = std::conditional_t<kZero == 0, void, policy::ZeroSharder<D>>;
  using Hooks = detail::StepHooks<Reducer, Sharder>;
  using PassT = nn::Pass<D, Hooks>;

 public:
  /// \brief Trains over the ranks of ctx (data parallel, pipelined, as the model and the
  /// configuration say), on device d.
  Trainer(Context& ctx, const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : device_(&device), world_(&ctx.world()), model_(std::move(model)), updater_(std::move(optimizer)), opt_(opt) {
    if constexpr (device::trainable<D>) init(cfg);  // else the one static_assert above says why
  }
  /// \brief Trains over the ranks of ctx on the rank's CPU.
  Trainer(Context& ctx, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
    requires std::is_same_v<D, device::Cpu>
      : Trainer(ctx, ctx.cpu(), cfg, std::move(model), std::move(optimizer), opt) {}
  /// \brief Trains on one device: a world of one, the same code.
  Trainer(const D& device, const Config& cfg, Model model, Optimizer optimizer, TrainerOptions opt = {})
      : device_(&device), solo_(comm::Communicator(comm::ThreadCommunicator::solo(comm::CommOptions{}))), world_(&*solo_),
        model_(std::move(model)), updater_(std::move(optimizer)), opt_(opt) {
    if constexpr (device::trainable<D>) init(cfg);  // else the one static_assert above says why
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  /// Writes the trace file (the `trace` key) when the run ends normally: a collective over the
  /// world, so every rank's trainer must end too (they do: a step is collective).
  ~Trainer() {
    if (timeline_ && std::uncaught_exceptions() == 0) {
      try {
        write_trace(trace_group_, *timeline_, trace_path_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
      }
    }
  }

  /// \brief One optimizer step on batch; returns the mean loss (the global batch's).
  double step(const Batch& batch) {
    // On a device that cannot train, the static_assert above is the one error: the layers'
    // forward and backward are not instantiated on it.
    if constexpr (device::trainable<D>) return train_step(batch);
    else return 0;
  }

  /// \brief The loss on batch without training (dropout off, no update), over this rank's rows
  /// (pipelined: the last stage's loss, on every rank).
  double evaluate(const Batch& batch) {
    if constexpr (device::trainable<D>) return evaluate_loss(batch);
    else return 0;
  }

  /// \brief Data parallel: fails unless every replica holds bit-identical parameters.
  void check_replicas() {
    EPL_CHECK(zero_stage_ < 3, "check_replicas compares the replicas' whole parameters, which ZeRO stage 3 never holds (each rank "
              "keeps its shard); it runs under zero.level \"\", \"v0\" and \"v1\"");
    auto& replicas = replica_scalars_;
    std::vector<std::uint64_t> hashes(static_cast<std::size_t>(replicas.size()));
    std::uint64_t mine = detail::content_hash(arena_.values());
    replicas.all_gather(comm::Buffer(&mine, 1, DType::kI64), comm::Buffer(hashes.data(), replicas.size(), DType::kI64));
    for (std::size_t r = 1; r < hashes.size(); ++r)
      EPL_CHECK(hashes[r] == hashes[0], "after step ", steps_, " the parameters of data-parallel rank ", r,
                " differ from rank 0's: the replicas drifted apart (non-deterministic code on one rank, or a gradient "
                "that was not reduced)");
  }

  /// \brief The model; pipelined, only this rank's stages' parameters are materialized.
  [[nodiscard]] Model& model() noexcept { return model_; }
  [[nodiscard]] Optimizer& optimizer() noexcept { return updater_.optimizer(); }
  [[nodiscard]] const D& device() const noexcept { return *device_; }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::int64_t micro_batches() const noexcept { return plan_.micro_batches; }
  /// \brief The rows of each global batch this rank reads (its data-parallel share): hand it to
  /// the loader (data::WindowLoader(..., trainer.data_shard())). The stages of one pipeline
  /// replica read the same rows.
  [[nodiscard]] data::Shard data_shard() const {
    const auto& c = mesh_->coord();
    // a colocated split's replicated part runs data parallel over the tensor axis too
    if (plan_.rows_over_tensor()) return {c.data * mesh_->tensor_size() + c.tensor, mesh_->data_size() * mesh_->tensor_size()};
    return {c.data, mesh_->data_size()};
  }
  /// \brief What this run does on its world: pipeline ranks, chunks, schedule.
  [[nodiscard]] const plan::Plan& plan() const noexcept { return plan_; }
  /// \brief This rank's list of actions for a step (the schedule's, with sends and receives).
  [[nodiscard]] const std::vector<strategy::Action>& actions() const noexcept { return actions_; }
  /// \brief The model chunks (pipeline stages) this rank runs.
  [[nodiscard]] const std::vector<strategy::Chunk<PassT>>& local_chunks() const { return executor_->chunks(); }
  [[nodiscard]] double last_grad_norm() const noexcept { return last_grad_norm_; }
  /// \brief The fraction of the last step's gradient all-reduce time hidden behind backward.
  [[nodiscard]] double last_overlap() const noexcept { return reducer_->last_overlap(); }
  [[nodiscard]] std::size_t gradient_buckets() const noexcept { return reducer_->buckets(); }
  /// \brief gradient_checkpoint.check_gradients: the largest absolute difference, over every
  /// rank, between the first step's gradients with and without recompute (none until the check
  /// ran: before step 1, or without the key).
  [[nodiscard]] std::optional<double> checkpoint_gradient_difference() const noexcept { return checkpoint_difference_; }
  /// \brief The dtype this run's GEMMs round their operands to: bf16 or f16 under AMP
  /// (amp.level "O1" with epl::Amp<...>), else f32.
  [[nodiscard]] DType amp() const noexcept { return matmul_; }
  /// \brief Under AMP, the loss scale of the next step (policy::LossScaler's rule); 1 without.
  [[nodiscard]] double loss_scale() const noexcept { return scaler_ ? scaler_->scale() : 1.0; }
  /// \brief Steps whose update AMP skipped because a gradient overflowed (0 without AMP).
  [[nodiscard]] std::int64_t skipped_steps() const noexcept { return scaler_ ? scaler_->skipped() : 0; }
  /// \brief Whether this run keeps weights, gradients and optimizer state in the host pool
  /// (offload.level "v0", or the compiled epl::Offload<epl::offload::V0>).
  [[nodiscard]] bool offloaded() const noexcept { return offload_; }
  /// \brief The ZeRO stage this run uses (0: none): zero.level, or the compiled epl::Zero<k>.
  [[nodiscard]] int zero_stage() const noexcept { return zero_stage_; }
  /// \brief ZeRO stage 3 keeps only this rank's shard of the parameters between layers: this
  /// gathers all of them so model() can be read (a collective over the data-parallel group;
  /// every rank calls it). They stay until the next step or evaluation. Other runs: no-op.
  void gather_parameters() {
    if (sharder_) sharder_->gather_all();
  }
  /// \brief Saves the whole training state into dir/step-N (N = steps()): every parameter and
  /// the optimizer's state (each rank writes what it holds: its stages, its split parts, its ZeRO
  /// shards, one copy of what replicas share), the step, the optimizer's step count, the loss
  /// scale, the watched loaders' positions and the configuration. A collective: every rank calls
  /// it. The directory appears complete or not at all (written as .step-N.partial, renamed last);
  /// a rank that fails to write ends the save on every rank with its error. The run holds dir's
  /// lock from its first save on: another run saving there is an error. Returns the directory.
  std::filesystem::path save(const std::filesystem::path& dir) {
    const std::string name = checkpoint::step_name(steps_);
    const auto final_dir = dir / name, partial = dir / ("." + name + ".partial");
    const std::string what = "saving checkpoint " + final_dir.string();
    const bool root = world_->rank() == 0;
    detail::on_every_rank(*world_, what, [&] {
      if (root) {
        take_checkpoint_dir(dir);
        std::filesystem::remove_all(partial);  // a save of this step that did not finish
        std::filesystem::create_directory(partial);
      }
      checkpoint_phase("prepared");
    });
    std::string mine;  // this rank's pieces, as a manifest of its own
    detail::on_every_rank(*world_, what, [&] {
      mine = write_shard(partial);
      checkpoint_phase("shards written");
    });
    const auto parts = detail::all_gather_text(*world_, mine);
    detail::on_every_rank(*world_, what, [&] {
      if (!root) return;
      checkpoint::write_durably(partial / checkpoint::kManifest, checkpoint::format(merged_manifest(parts)));
      checkpoint_phase("manifest written");
      if (std::filesystem::exists(final_dir)) std::filesystem::remove_all(final_dir);  // saved again (a rerun from an older step)
      std::filesystem::rename(partial, final_dir);
      checkpoint::sync_directory(dir);
    });
    return final_dir;
  }
  /// \brief Loads the newest complete checkpoint in dir (see save) and returns its directory;
  /// nullopt, changing nothing, when dir holds none. A collective: every rank calls it.
  std::optional<std::filesystem::path> resume(const std::filesystem::path& dir) {
    std::int64_t step = -1;  // rank 0 chooses, so every rank loads the same one
    detail::on_every_rank(*world_, "resuming from " + dir.string(), [&] {
      if (world_->rank() != 0) return;
      check_checkpoint_dir(dir);
      if (auto newest = checkpoint::newest(dir)) step = *checkpoint::step_of(newest->filename().string());
    });
    world_->broadcast(comm::Buffer(&step, 1, DType::kI64), 0);
    if (step < 0) return std::nullopt;
    const auto chosen = dir / checkpoint::step_name(step);
    load(chosen);
    return chosen;
  }
  /// \brief Loads the checkpoint in directory `checkpoint` (a step-N directory that save wrote),
  /// saved by any layout: any number of data-parallel ranks, any ZeRO stage, offload or not; each
  /// rank reads the pieces of what it holds. A collective: every rank calls it. A checkpoint of
  /// another model, optimizer or seed, or a missing, truncated or corrupt file, is an error
  /// naming the file and the problem, on every rank (the trainer's values are then undefined).
  void load(const std::filesystem::path& checkpoint) {
    detail::on_every_rank(*world_, "loading checkpoint " + checkpoint.string(), [&] {
      const checkpoint::Reader reader(checkpoint);
      const auto named = checkpoint::step_of(checkpoint.filename().string());
      EPL_CHECK(!named || *named == reader.manifest().step, "checkpoint ", checkpoint, " is named for step ", *named,
                " but its manifest says step ", reader.manifest().step, ": a step directory renamed or copied over another; "
                "rename it step-", checkpoint::step_name(reader.manifest().step).substr(5), " or move it aside");
      restore(reader, checkpoint.string());
    });
    if (sharder_) sharder_->after_update();  // each rank loaded its slices: they meet again
    resumed_from_ = checkpoint;
  }
  /// \brief Makes loader's position part of the saved state (save) and, when this run resumed,
  /// moves it to the saved position. Watch the same loaders in the same order in every run
  /// (watching one twice counts once).
  void watch(data::WindowLoader& loader) {
    if (std::find(loaders_.begin(), loaders_.end(), &loader) != loaders_.end()) return;
    EPL_CHECK(!resumed_from_ || loaders_.size() < saved_loaders_, "this run resumed from ", resumed_from_->string(),
              ", which holds the position of ", saved_loaders_, " data loader", saved_loaders_ == 1 ? "" : "s", ", and now watches loader ",
              loaders_.size() + 1, ", which would start from the beginning; watch the loaders the saving run watched");
    loaders_.push_back(&loader);
    if (loaders_.size() <= saved_positions_.size()) loader.seek(saved_positions_[loaders_.size() - 1]);
  }
  [[nodiscard]] const std::optional<std::filesystem::path>& resumed_from() const noexcept { return resumed_from_; }

  /// \brief The flat parameter and gradient buffers (this rank's stages'; under ZeRO 2 the
  /// gradients and under ZeRO 3 the values too are not kept whole: those buffers are empty).
  [[nodiscard]] const param::Arena& arena() const noexcept { return arena_; }
  [[nodiscard]] strategy::Mesh& mesh() noexcept { return *mesh_; }
  /// \brief Bytes the gradient reduction moved so far (the data-parallel group's counts).
  [[nodiscard]] comm::CommStats gradient_stats() const { return mesh_->data().stats(); }
  /// \brief Bytes the pipeline's sends and receives moved so far.
  [[nodiscard]] comm::CommStats pipeline_stats() const { return executor_->stats(); }
  /// \brief This rank's spans (forward, backward, send, receive, all-reduce) when the `trace`
  /// key names a file, else null.
  [[nodiscard]] const Timeline* timeline() const noexcept { return timeline_.get(); }

 private:
  double train_step(const Batch& batch) {
    const std::int64_t rows = batch.inputs.rank() > 0 ? batch.inputs.dim(0) : 0;
    const int m_count = plan_.micro_batches;
    EPL_CHECK(batch.targets.defined() && batch.targets.rank() > 0 && batch.targets.dim(0) == rows, "batch has ", rows,
              " inputs but ", batch.targets.defined() && batch.targets.rank() > 0 ? batch.targets.dim(0) : 0, " targets");
    EPL_CHECK(rows > 0, "the batch has no rows; give every step at least one row per micro-batch (pipeline.num_micro_batch = ",
              m_count, ")");
    EPL_CHECK(rows % m_count == 0, "batch of ", rows, " samples does not divide into pipeline.num_micro_batch = ",
              m_count, " micro-batches; make the batch a multiple of ", m_count);
    if (resumed_from_ && !saved_positions_.empty()) check_watched_loaders();
    agree_on_rows(batch);
    const auto plain = check_gradients_ && steps_ == 0 ? plain_gradients(batch) : std::vector<Tensor>{};
    double loss = compute_gradients(batch, recompute_);
    if (!plain.empty()) report_gradient_difference(plain);
    if (auto* p = stages()) p->all_reduce(comm::Buffer(&loss, 1, DType::kF64), comm::ReduceOp::kSum);  // the last stage's
    loss_group().all_reduce(comm::Buffer(&loss, 1, DType::kF64), comm::ReduceOp::kMean);
    EPL_CHECK(!opt_.check_finite || std::isfinite(loss), "the loss is ", loss, " at step ", steps_ + 1,
              ": training diverged or the data holds bad values; lower the learning rate, clip gradients "
              "(TrainerOptions::clip_norm) or check the inputs",
              matmul_ == DType::kF16 ? "; under AMP with f16 (epl::Amp<epl::amp::FP16>) a GEMM operand past 65504 is infinite in the "
                                       "forward, which no loss scale helps: train with bf16 (epl::Amp<epl::amp::BF16>) or keep "
                                       "activations smaller"
                                     : "");
    if (scaler_) unscale();
    if (overlap_) last_grad_norm_ = clip(opt_.clip_norm);
    if (scaler_ && !scale_step(std::isfinite(last_grad_norm_))) {  // AMP: an overflow skips the update
      if (sharder_) sharder_->after_update();
    } else {
      if (opt_.check_finite && !std::isfinite(last_grad_norm_)) fail_non_finite_gradient();
      update();
    }
    ++steps_;
    if (opt_.check_replicas_every > 0 && mesh_->data_size() > 1 && zero_stage_ < 3 &&
        (steps_ == 1 || steps_ % opt_.check_replicas_every == 0))
      check_replicas();
    if (checkpoint_every_ > 0 && steps_ % checkpoint_every_ == 0) save(checkpoint_dir_);
    return loss;
  }
  // Forward and backward of every micro-batch, and the gradients reduced over the replicas (and,
  // with communication.clip_after_allreduce=false, clipped before); returns this rank's loss.
  // recompute says which activations backward recomputes (chunks after end_taskgraph: none).
  double compute_gradients(const Batch& batch, nn::RecomputeMode recompute) {
    const int m_count = plan_.micro_batches;
    if (sharder_) sharder_->zero_grads();
    else device_->fill(arena_.grads(), 0.0);
    const std::int64_t rows = batch.inputs.dim(0), per = rows / m_count, first = static_cast<std::int64_t>(data_shard().rank) * rows;
    // A colocated split's loss sees the group's rows: its targets, gathered, micro-batch by micro-batch.
    const Tensor targets = plan_.rows_over_tensor() ? gather_targets(batch.targets, m_count) : batch.targets;
    double loss = executor_->run(actions_, {batch.inputs, targets, m_count}, [&](int c, int m) {
      const bool checkpointed = end_taskgraph_ < 0 || c <= end_taskgraph_;
      return PassT(*device_, nn::PassOptions{true, opt_.seed, static_cast<std::uint64_t>(steps_), static_cast<std::uint64_t>(m),
                                                   first + m * per, loss_scale() / (m_count * row_shares()),
                                                   checkpointed ? recompute : nn::RecomputeMode::kNone, matmul_},
                         &hooks_, groups());
    }, [&](int m) {  // a chunk's gradients are final in its last micro-batch (ZeRO 2 and 3: no bucket; the sharder reduces)
      hooks_.active = overlap_ && m + 1 == m_count && reducer_->buckets() > 0;
    });
    hooks_.active = false;
    if (!overlap_) {  // EPL's per-replica clipping: clip the local gradient, then reduce it
      last_grad_norm_ = clip(opt_.clip_norm);
      reducer_->ready_all();
    }
    reducer_->finish();
    if (sharder_) sharder_->finish();
    return loss;
  }
  // gradient_checkpoint.check_gradients, on the first step: the gradients computed without
  // recompute (copies of what this rank holds), to compare with the run's own.
  std::vector<Tensor> plain_gradients(const Batch& batch) {
    (void)compute_gradients(batch, nn::RecomputeMode::kNone);
    std::vector<Tensor> plain;
    for (const auto& g : held_grads()) {
      plain.push_back(device_->empty(g.shape(), g.dtype(), MemoryCategory::kWorkspace));
      device_->copy(g, plain.back());
    }
    return plain;
  }
  // The largest difference between plain and the gradients this rank holds now, over the world;
  // kept for checkpoint_gradient_difference() and printed by world rank 0.
  void report_gradient_difference(const std::vector<Tensor>& plain) {
    const auto held = held_grads();
    double most[2] = {0, 0};  // |plain - checkpointed|, |plain|
    for (std::size_t i = 0; i < held.size(); ++i) {
      most[1] = std::max(most[1], detail::max_abs(*device_, plain[i]));
      device_->axpy(-1.0, held[i], plain[i]);
      most[0] = std::max(most[0], detail::max_abs(*device_, plain[i]));
    }
    world_->all_reduce(comm::Buffer(most, 2, DType::kF64), comm::ReduceOp::kMax);
    checkpoint_difference_ = most[0];
    if (world_->rank() == 0) {
      std::printf("gradient_checkpoint.check_gradients: at step 1 the recomputed gradients differ from the full-activation "
                  "ones by at most %.3g (largest gradient %.3g)\n", most[0], most[1]);
      std::fflush(stdout);
    }
  }
  // The reduced gradients this rank holds: the whole buffer, or under ZeRO 2 and 3 its shards.
  std::vector<Tensor> held_grads() const {
    if (zero_stage_ >= 2) return sharder_->owned_grads();
    return {arena_.grads()};
  }
  double evaluate_loss(const Batch& batch) {
    const Tensor targets = plan_.rows_over_tensor() ? gather_targets(batch.targets, 1) : batch.targets;
    double loss = executor_->run(plan_.forward_only(mesh_->coord().pipeline), {batch.inputs, targets, 1}, [&](int, int) {
      return PassT(*device_, nn::PassOptions{.training = false, .seed = opt_.seed, .step = static_cast<std::uint64_t>(steps_), .matmul = matmul_},
                         &hooks_, groups());
    });
    if (sharder_) sharder_->release_all();
    if (auto* p = stages()) p->all_reduce(comm::Buffer(&loss, 1, DType::kF64), comm::ReduceOp::kSum);
    return loss;
  }
  // AMP: the reduced gradients this rank holds go back to the loss's own scale. Each rank's loss
  // is the mean over its rows, 1/R of the global batch (R row shares), so the passes scale by
  // S / R: every GEMM then sees the magnitudes one device would, and a step overflows alike on
  // any number of ranks; the reduction's mean leaves S / R, undone here.
  void unscale() {
    for (const auto& g : held_grads()) device_->scale(g, row_shares() / scaler_->scale());
  }
  // How many ranks share the global batch's rows: AMP's scale is divided by it (1 without AMP).
  double row_shares() const { return scaler_ ? static_cast<double>(data_shard().ranks) : 1.0; }
  // AMP: the step's verdict to the loss scaler (finite: the global gradient norm is, so every
  // rank agrees); returns whether to update. amp.debug_log prints each change on world rank 0.
  bool scale_step(bool finite) {
    const auto c = scaler_->update(finite);
    if (amp_log_ && world_->rank() == 0 && (c.skipped || c.after != c.before)) {
      if (c.skipped)
        std::printf("amp: step %lld: a gradient overflowed; update skipped, loss scale %g -> %g\n",
                    static_cast<long long>(steps_ + 1), c.before, c.after);
      else
        std::printf("amp: step %lld: %lld step%s without overflow; loss scale %g -> %g\n", static_cast<long long>(steps_ + 1),
                    static_cast<long long>(scaler_->options().growth_interval), scaler_->options().growth_interval == 1 ? "" : "s",
                    c.before, c.after);
      std::fflush(stdout);
    }
    return !c.skipped;
  }
  // The optimizer over this rank's values: all of them, or under ZeRO its slices, which then
  // meet again. optimizer.num_apply_group splits the update into that many parts.
  void update() {
    if (!sharder_) return updater_.step(*device_, arena_.values(), arena_.grads(), apply_groups_);
    const auto values = sharder_->owned_values(), grads = sharder_->owned_grads();
    updater_.step(*device_, std::span<const Tensor>(values), std::span<const Tensor>(grads), apply_groups_);
    sharder_->after_update();
  }

  void init(const Config& cfg) {
    plan_ = plan::make<Model>({.micro_batches = static_cast<int>(cfg.get(keys::num_micro_batch)),
                               .stages = static_cast<int>(cfg.get(keys::num_stages)),
                               .stages_given = cfg.source(keys::num_stages) != Config::Source::kDefault,
                               .schedule = cfg.get(keys::pipeline_strategy),
                               .virtual_stages = static_cast<int>(cfg.get(keys::num_virtual_stages)),
                               .virtual_stages_given = cfg.source(keys::num_virtual_stages) != Config::Source::kDefault,
                               .auto_parallel = cfg.get(keys::auto_parallel),
                               .prefer_intra_node = cfg.get(keys::prefer_intra_node),
                               .colocate = cfg.get(keys::colocate_split_and_replicate)},
                              world_->size());
    // Replicate<D, ...> spans D devices of one replica (per stage), each with its share of the
    // batch: on the mesh, those ranks are on the data axis; Split<N, ...> parts on the tensor axis.
    mesh_ = std::make_unique<strategy::Mesh>(*world_, plan_.mesh_shape());
    // The step's own small collectives (loss, norms, checks) go on groups of their own, so the
    // data and tensor groups' byte counts are the gradients' and the layers' traffic alone.
    // scalars_: the ranks that share the loss (each with its rows); replica_scalars_: the ranks
    // that hold the same parameters (a colocated split: only those of the same tensor part).
    replica_scalars_ = mesh_->data().split(0, 0);
    if (plan_.rows_over_tensor()) scalars_ = stage_group().split(0, 0);
    if (mesh_->tensor_size() > 1) tensor_scalars_ = mesh_->tensor().split(0, 0);
    if (mesh_->pipeline_size() > 1) pipeline_scalars_ = mesh_->pipeline().split(0, 0);
    // The Split parts sharded for this rank's place on the tensor axis, before anything is drawn.
    const nn::SplitPart part{mesh_->coord().tensor, mesh_->tensor_size()};
    const bool vocab_parallel = plan::shard_model(model_, part, plan_.rows_over_tensor()).sharded_output;
    // This rank's chunks, and only their parameters materialized (every parameter is numbered).
    auto all = plan_.cut_at_split ? strategy::cut_at_first_split<PassT>(model_) : strategy::cut_into_chunks<PassT>(model_, plan_.chunks);
    const int stage = mesh_->coord().pipeline;
    std::vector<strategy::Chunk<PassT>> mine;
    std::set<const nn::Parameter*> owned;
    for (int c : plan_.chunks_of(stage)) {
      all[static_cast<std::size_t>(c)].for_each_parameter([&](nn::Parameter& q) { owned.insert(&q); });
      mine.push_back(all[static_cast<std::size_t>(c)]);
    }
    zero_stage_ = detail::zero_stage(cfg, kZero);
    choose_offload(cfg);
    choose_amp(cfg);
    choose_recompute(cfg, mine);
    apply_groups_ = cfg.get(keys::num_apply_group);
    param::MaterializeOptions mo;
    mo.dtype = opt_.dtype;
    mo.seed = opt_.seed;
    mo.owned = [&](const nn::Parameter& q) { return owned.count(&q) > 0; };
    std::map<const nn::Parameter*, int> chunk_of;  // ZeRO's units never span two chunks
    if (zero_stage_ > 0) {
      check_zero_setup(cfg);
      std::int64_t total = 0;
      for (int c : plan_.chunks_of(stage))
        all[static_cast<std::size_t>(c)].for_each_parameter([&](nn::Parameter& q) { chunk_of[&q] = c; total += q.numel(); });
      const std::int64_t splits = cfg.get(keys::max_splits);
      mo.block_elements = (total + splits - 1) / splits;
      mo.shards = mesh_->data_size();
      mo.segment = [&](const nn::Parameter& q) { return chunk_of.at(&q); };
    }
    arena_ = param::materialize(model_, *device_, mo);
    RunFacts facts;
    add_model_facts(facts, model_);
    add_config_facts(facts, cfg);
    add_optimizer_facts(facts, updater_.optimizer());
    facts.add_number("TrainerOptions::seed", static_cast<double>(opt_.seed));
    facts.add_number("TrainerOptions::clip_norm", opt_.clip_norm);
    facts.add_number("TrainerOptions::dtype", static_cast<double>(opt_.dtype));
    facts.add_number("TrainerOptions::check_replicas_every", static_cast<double>(opt_.check_replicas_every));
    facts.add_number("TrainerOptions::amp_init_scale", opt_.amp_init_scale);
    facts.add_number("TrainerOptions::amp_growth_interval", static_cast<double>(opt_.amp_growth_interval));
    check_agreement(*world_, facts, world_->size() == mesh_->data_size() ? "data-parallel" : "the");
    // Gradients meet over the data axis; a colocated split's replicated part (the parameters
    // before its first Split, at the end of the backward-ordered arena) over data and tensor.
    const std::int64_t replicated_from = plan_.rows_over_tensor() ? first_offset_before_split() : arena_.size();
    reducer_ = std::make_unique<Reducer>();
    if (cfg.get(keys::fp16) && !scaler_ && (mesh_->data_size() > 1 || plan_.rows_over_tensor()))
      fp16_scale_ = static_cast<double>(cfg.get(keys::fp16_scale));
    // ZeRO 2 and 3: the sharder reduces every gradient, into shards
    reducer_->add(*device_, mesh_->data(), arena_, detail::bucket_options(cfg, scaler_.has_value()), {0, zero_stage_ >= 2 ? 0 : replicated_from});
    if (plan_.rows_over_tensor()) {  // each rank holds its rows' share of a replica's gradient: summed over the tensor axis
      auto o = detail::bucket_options(cfg, scaler_.has_value());
      o.mean_over = mesh_->data_size();
      reducer_->add(*device_, stage_group(), arena_, o, {replicated_from, arena_.size()});
    }
    hooks_.reducer = reducer_.get();
    // Replicas start from one copy: rank 0's.
    if (mesh_->data_size() > 1) mesh_->data().broadcast(arena_.values().slice(0, replicated_from), 0);
    if (plan_.rows_over_tensor()) stage_group().broadcast(arena_.values().slice(replicated_from, arena_.size()), 0);
    if constexpr (kZero > 0) {
      if (zero_stage_ > 0) {
        const auto op = cfg.get(keys::gradients_reduce_method) == "sum" ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
        sharder_ = std::make_unique<policy::ZeroSharder<D>>(*device_, mesh_->data(), arena_, zero_stage_, op, offload_);
        updater_.keep_state_in_host_pool(offload_);
        hooks_.sharder = sharder_.get();
      }
    }
    overlap_ = overlap_clip(cfg);
    actions_ = plan_.actions(stage);
    executor_.emplace(*device_, std::move(mine), plan_.chunks, plan_.pipeline, stage, mesh_->pipeline());
    if (vocab_parallel) executor_->loss().parallelize(part);
    if (trace_path_ = cfg.get(keys::trace); !trace_path_.empty()) {
      trace_group_ = world_->split(0, world_->rank());
      // rank 0 writes the file at the end: find out now, on every rank, whether it can
      std::int64_t writable = trace_group_.rank() == 0 ? std::ofstream(trace_path_, std::ios::app).good() : 0;
      trace_group_.broadcast(comm::Buffer(&writable, 1, DType::kI64), 0);
      EPL_CHECK(writable == 1, "cannot write the trace file ", detail::quoted(trace_path_),
                " (the trace key); give it, as --trace=FILE or EPL_TRACE=FILE, a path in a writable directory");
      timeline_ = std::make_unique<Timeline>();
      trace_group_.barrier();  // the ranks' clocks start together
      timeline_->set_origin();
      executor_->set_timeline(timeline_.get());
      reducer_->set_timeline(timeline_.get());
      if (sharder_) sharder_->set_timeline(timeline_.get());
    }
    choose_checkpoints(cfg);
  }
  // ---- checkpoints ---------------------------------------------------------------------
  // A range of the arena this rank keeps values (and optimizer state) for, as one flat view, and
  // where its state starts in the optimizer's buffers: the whole arena, or under ZeRO each
  // unit's owned slice.
  struct Region {
    param::Range range;
    Tensor values;
    std::int64_t state_at = 0;
  };
  std::vector<Region> regions() const {
    if (!sharder_) return {{{0, arena_.size()}, arena_.values(), 0}};
    std::vector<Region> r;
    const auto ranges = sharder_->owned_ranges();
    const auto values = sharder_->owned_values();
    std::int64_t at = 0;
    for (std::size_t u = 0; u < ranges.size(); at += ranges[u].size(), ++u) r.push_back({ranges[u], values[u], at});
    return r;
  }
  // Every parameter's name (its path in the model), materialized here or not.
  std::map<const nn::Parameter*, std::string> parameter_names() {
    std::map<const nn::Parameter*, std::string> names;
    nn::visit_parameters(model_, [&](std::string_view path, nn::Parameter& p) { names[&p] = std::string(path); });
    return names;
  }
  // Whether this rank writes p's pieces: one copy of what replicas share (data rank 0, or under
  // ZeRO every data rank its own slices; tensor rank 0 for what a split group shares).
  bool writes(const nn::Parameter& p) const {
    return (zero_stage_ > 0 || mesh_->coord().data == 0) && (!p.shard.whole() || mesh_->coord().tensor == 0);
  }
  // A directory to save into or resume from: not empty, and not a checkpoint itself (an easy slip:
  // epl-checkpoint takes either).
  static void check_checkpoint_dir(const std::filesystem::path& dir) {
    EPL_CHECK(!dir.empty(), "no checkpoint directory given; name the directory that holds (or will hold) the step-N directories");
    std::error_code ec;
    EPL_CHECK(!std::filesystem::exists(dir / checkpoint::kManifest, ec), "checkpoint directory ", dir, " is itself a checkpoint (it holds ",
              checkpoint::kManifest, "); give the directory that holds the step-N directories, ", dir.parent_path(),
              ", or load this one with trainer.load");
    EPL_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec), "checkpoint directory ", dir,
              " is not a directory; give checkpoint.dir a directory (it is created when missing)");
  }
  // Rank 0: dir exists, is this run's (its lock taken) and can be written.
  void take_checkpoint_dir(const std::filesystem::path& dir) {
    check_checkpoint_dir(dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    EPL_CHECK(!ec, "cannot create checkpoint directory ", dir, ": ", ec.message(), "; give checkpoint.dir a writable directory");
    const auto canonical = std::filesystem::weakly_canonical(dir, ec);
    if (locked_dir_ == canonical) return;
    dir_lock_.reset();
    dir_lock_ = std::make_unique<checkpoint::DirectoryLock>(dir);
    locked_dir_ = canonical;
  }
  void checkpoint_phase(std::string_view phase) const {
    if (opt_.checkpoint_phase) opt_.checkpoint_phase(phase);
  }
  static std::string state_name(const std::string& parameter, std::size_t slot) { return parameter + "@state" + std::to_string(slot); }
  // Writes this rank's pieces into dir/rank-R.bin; returns them as a manifest of their own.
  std::string write_shard(const std::filesystem::path& dir) {
    checkpoint::Manifest m;
    m.step = steps_;
    const auto names = parameter_names();
    const std::size_t elem = size_of(arena_.dtype());
    char file[32];
    std::snprintf(file, sizeof file, "rank-%05d.bin", world_->rank());
    std::optional<checkpoint::ShardWriter> out;
    std::vector<unsigned char> host;
    const auto& state = updater_.state();
    auto add = [&](const std::string& tensor, const nn::Parameter& p, std::int64_t b, std::int64_t e, const Tensor& from) {
      if (!out) out.emplace(dir / file, file);
      host.resize(static_cast<std::size_t>(e - b) * elem);
      device_->download(from, host.data());
      m.tensors[tensor] = {arena_.dtype(), p.global_shape()};
      m.pieces.push_back(out->add(tensor, p.shard, p.shape, b, e, host.data(), host.size()));
    };
    for (const auto& region : regions())
      for (auto* p : arena_.parameters()) {
        const std::int64_t b = std::max(p->offset, region.range.begin), e = std::min(p->offset + p->numel(), region.range.end);
        if (b >= e || !writes(*p)) continue;
        const std::int64_t at = b - region.range.begin;
        add(names.at(p), *p, b - p->offset, e - p->offset, region.values.slice(at, at + e - b));
        for (std::size_t s = 0; s < state.size(); ++s)
          add(state_name(names.at(p), s), *p, b - p->offset, e - p->offset, state[s].slice(region.state_at + at, region.state_at + at + e - b));
      }
    if (out) m.files[file] = out->sync();
    m.scalars.emplace_back("loaders", std::to_string(loaders_.size()));
    for (std::size_t i = 0; i < loaders_.size(); ++i) {
      const auto q = loaders_[i]->position();
      const std::string l = "loader." + std::to_string(i) + ".";
      for (const auto& [k, v] : {std::pair{"epoch", q.epoch}, {"cursor", q.cursor}, {"windows", q.windows}, {"seq_len", q.seq_len},
                                 {"batch", q.batch}})
        m.scalars.emplace_back(l + k, std::to_string(v));
      m.scalars.emplace_back(l + "seed", std::to_string(q.seed));
    }
    return checkpoint::format(m);
  }
  // Rank 0: the ranks' pieces and this run's scalars and configuration, as one manifest.
  checkpoint::Manifest merged_manifest(const std::vector<std::string>& parts) const {
    checkpoint::Manifest m;
    m.step = steps_;
    std::vector<std::vector<std::pair<std::string, std::string>>> loader_scalars;
    for (std::size_t r = 0; r < parts.size(); ++r) {
      auto part = checkpoint::parse(parts[r], "(the pieces of rank " + std::to_string(r) + ")");
      loader_scalars.push_back(std::move(part.scalars));
      m.tensors.insert(part.tensors.begin(), part.tensors.end());
      m.files.insert(part.files.begin(), part.files.end());
      for (auto& p : part.pieces) m.pieces.push_back(std::move(p));
    }
    auto scalar = [&](std::string name, std::string value) { m.scalars.emplace_back(std::move(name), std::move(value)); };
    scalar("seed", std::to_string(opt_.seed));
    scalar("optimizer", std::string(reflect::type_name<Optimizer>()));
    scalar("optimizer.steps", std::to_string(updater_.steps()));
    if (scaler_) {
      const auto st = scaler_->state();
      scalar("amp.scale", detail::exact(st.scale));
      scalar("amp.good", std::to_string(st.good));
      scalar("amp.skipped", std::to_string(st.skipped));
      scalar("amp.in_a_row", std::to_string(st.in_a_row));
    }
    // the loaders' positions: once when every rank's are the same (each reads its rows of one
    // global order: any layout resumes them), else each rank's (io.slicing: each reads its own
    // files; only the same ranks resume them)
    const bool same = std::all_of(loader_scalars.begin(), loader_scalars.end(), [&](const auto& q) { return q == loader_scalars[0]; });
    for (std::size_t r = 0; r < (same ? 1 : loader_scalars.size()); ++r)
      for (const auto& [k, v] : loader_scalars[r]) {
        EPL_CHECK(same || k != "loaders" || v == loader_scalars[0][0].second, "rank ", r, " watches ", v, " data loaders and rank 0 ",
                  loader_scalars[0][0].second, "; every rank watches the same loaders");
        scalar(same || k == "loaders" ? k : "rank" + std::to_string(r) + "." + k, v);
      }
    // what wrote it, for a reader's information: loading does not depend on it
    scalar("layout.world", std::to_string(world_->size()));
    scalar("layout.data", std::to_string(mesh_->data_size()));
    scalar("layout.tensor", std::to_string(mesh_->tensor_size()));
    scalar("layout.pipeline", std::to_string(mesh_->pipeline_size()));
    scalar("layout.zero", std::to_string(zero_stage_));
    m.config = config_;
    return m;
  }
  // This rank's part of the saved state, from reader (`where` names the checkpoint).
  void restore(const checkpoint::Reader& reader, const std::string& where) {
    const auto& m = reader.manifest();
    auto scalar = [&](const std::string& name) -> std::int64_t {
      const std::string* v = m.scalar(name);
      EPL_CHECK(v != nullptr, "checkpoint ", where, " lacks its \"", name, "\" entry: the manifest is not one a save writes");
      std::int64_t x = 0;
      const auto r = std::from_chars(v->data(), v->data() + v->size(), x);
      EPL_CHECK(r.ec == std::errc() && r.ptr == v->data() + v->size() && x >= 0, "checkpoint ", where, ": \"", name, "\" = \"", *v,
                "\" is not a count");
      return x;
    };
    // the same model, optimizer and seed
    const auto names = parameter_names();
    std::set<std::string> ours;
    for (const auto& [p, name] : names) {
      ours.insert(name);
      const auto t = m.tensors.find(name);
      EPL_CHECK(t != m.tensors.end(), "checkpoint ", where, " holds no parameter ", name, " ", p->global_shape(),
                " of this model: it was saved from another model; resume with the model that saved it");
      EPL_CHECK(t->second.shape == p->global_shape() && t->second.dtype == arena_.dtype(), "checkpoint ", where, " holds parameter ",
                name, " as ", name_of(t->second.dtype), " ", t->second.shape, " but this model's is ", name_of(arena_.dtype()), " ",
                p->global_shape(), ": it was saved from another model; resume with the model that saved it");
    }
    for (const auto& [name, t] : m.tensors)
      EPL_CHECK(name.find('@') != std::string::npos || ours.count(name), "checkpoint ", where, " holds parameter ", name, " ",
                t.shape, ", which this model lacks: it was saved from another model; resume with the model that saved it");
    const std::string* optimizer = m.scalar("optimizer");
    EPL_CHECK(optimizer && *optimizer == reflect::type_name<Optimizer>(), "checkpoint ", where, " was saved with optimizer ",
              optimizer ? *optimizer : std::string("(none named)"), " but this trainer's is ", reflect::type_name<Optimizer>(),
              "; resume with the optimizer that saved it");
    const std::string* seed = m.scalar("seed");
    EPL_CHECK(seed && *seed == std::to_string(opt_.seed), "checkpoint ", where, " was saved with TrainerOptions::seed = ",
              seed ? *seed : std::string("(none)"), " and this trainer has ", opt_.seed, ": dropout would draw other numbers than the saved run's; "
              "resume with the same seed");
    // the values, and the optimizer state (none before the first update)
    const std::int64_t optimizer_steps = scalar("optimizer.steps");
    std::int64_t held = 0;
    const auto mine = regions();
    for (const auto& r : mine) held += r.range.size();
    const auto& state = updater_.restore(*device_, optimizer_steps, held, arena_.dtype());
    const std::size_t elem = size_of(arena_.dtype());
    std::vector<unsigned char> host;
    auto fill = [&](const std::string& tensor, const nn::Parameter& p, std::int64_t b, std::int64_t e, const Tensor& to) {
      EPL_CHECK(reader.has(tensor), "checkpoint ", where, " holds no ", tensor, " although the optimizer had taken ", optimizer_steps,
                " steps: the manifest is not one a save writes");
      const auto whole = reader.whole(tensor);
      if (p.shard.whole()) return device_->upload(whole.data() + static_cast<std::size_t>(b) * elem, to);  // a range of it
      host.resize(static_cast<std::size_t>(e - b) * elem);
      for (std::int64_t i = b; i < e; ++i)
        std::memcpy(host.data() + static_cast<std::size_t>(i - b) * elem, whole.data() + p.global_index(i) * elem, elem);
      device_->upload(host.data(), to);
    };
    for (const auto& region : mine)
      for (auto* p : arena_.parameters()) {
        const std::int64_t b = std::max(p->offset, region.range.begin), e = std::min(p->offset + p->numel(), region.range.end);
        if (b >= e) continue;
        const std::int64_t at = b - region.range.begin;
        fill(names.at(p), *p, b - p->offset, e - p->offset, region.values.slice(at, at + e - b));
        for (std::size_t s = 0; s < state.size(); ++s)
          fill(state_name(names.at(p), s), *p, b - p->offset, e - p->offset, state[s].slice(region.state_at + at, region.state_at + at + e - b));
      }
    // the scalars
    steps_ = m.step;
    if (scaler_ && m.scalar("amp.scale")) {
      policy::LossScaler::State st;
      st.scale = std::strtod(m.scalar("amp.scale")->c_str(), nullptr);
      st.good = scalar("amp.good");
      st.skipped = scalar("amp.skipped");
      st.in_a_row = scalar("amp.in_a_row");
      scaler_->restore(st);
    }
    saved_positions_.clear();
    const std::int64_t loaders = scalar("loaders");
    EPL_CHECK(loaders <= 1024, "checkpoint ", where, " says it holds ", loaders, " loader positions: the manifest is not one a save writes");
    saved_loaders_ = static_cast<std::size_t>(loaders);
    // one position for all ranks, or each rank's (see merged_manifest)
    const std::string own = "rank" + std::to_string(world_->rank()) + ".";
    auto key_of = [&](const std::string& key) {
      if (m.scalar(key)) return key;
      EPL_CHECK(scalar("layout.world") == world_->size(), "checkpoint ", where, " holds each of its ", scalar("layout.world"),
                " ranks' own data position (their loaders read different data, as under io.slicing), which only a run on ",
                scalar("layout.world"), " ranks can resume; this one has ", world_->size());
      return own + key;
    };
    for (std::int64_t i = 0; i < loaders; ++i) {
      const std::string l = "loader." + std::to_string(i) + ".";
      std::uint64_t seed = 0;  // any 64-bit value, where the other entries are counts
      const std::string* text = m.scalar(key_of(l + "seed"));
      const auto r = text ? std::from_chars(text->data(), text->data() + text->size(), seed) : std::from_chars_result{nullptr, std::errc::invalid_argument};
      EPL_CHECK(text && r.ec == std::errc() && r.ptr == text->data() + text->size(), "checkpoint ", where, " lacks loader ", i,
                "'s seed or holds one that is not a number: the manifest is not one a save writes");
      saved_positions_.push_back({scalar(key_of(l + "epoch")), scalar(key_of(l + "cursor")), scalar(key_of(l + "windows")),
                                  scalar(key_of(l + "seq_len")), scalar(key_of(l + "batch")), seed});
    }
    for (std::size_t i = 0; i < loaders_.size() && i < saved_positions_.size(); ++i) loaders_[i]->seek(saved_positions_[i]);
  }
  // checkpoint.dir and checkpoint.every: the directory checked (and, when the run saves, created
  // and locked) now rather than at the first save, hours later; then resume from its newest
  // checkpoint, if any.
  void choose_checkpoints(const Config& cfg) {
    checkpoint_dir_ = cfg.get(keys::checkpoint_dir);
    checkpoint_every_ = cfg.get(keys::checkpoint_every);
    EPL_CHECK(checkpoint_every_ == 0 || !checkpoint_dir_.empty(), "checkpoint.every = ", checkpoint_every_, " but checkpoint.dir "
              "is not set; give the directory to save into (--checkpoint.dir=DIR) or drop checkpoint.every");
    for (const auto& k : Config::keys()) config_.emplace_back(k.name, cfg.value_text(k.name));
    if (checkpoint_dir_.empty()) return;
    detail::on_every_rank(*world_, "checkpoint.dir = " + checkpoint_dir_, [&] {
      if (world_->rank() != 0) return;
      if (checkpoint_every_ > 0) take_checkpoint_dir(checkpoint_dir_);
      else check_checkpoint_dir(checkpoint_dir_);
    });
    if (auto from = resume(checkpoint_dir_); from && world_->rank() == 0) {
      std::printf("resumed from checkpoint %s at step %lld\n", from->c_str(), static_cast<long long>(steps_));
      std::fflush(stdout);
    }
  }
  // A resumed run that saved loader positions must watch as many loaders before its first step.
  void check_watched_loaders() {
    EPL_CHECK(loaders_.size() >= saved_positions_.size(), "this run resumed from ", resumed_from_->string(), ", which holds the "
              "position of ", saved_positions_.size(), " data loader", saved_positions_.size() == 1 ? "" : "s", " but the program "
              "watches ", loaders_.size(), "; call trainer.watch(loader) for each loader before the first step, or the run reads "
              "its data from the start again");
    saved_positions_.clear();
  }

  // gradient_checkpoint.*: type unset, the model's epl::Recompute marks recompute; "" turns them
  // off; "collection" asks for them (a model without one is an error); "auto" recomputes the
  // segments each chunk chooses (the marks then keep their activations). end_taskgraph: only
  // chunks (pipeline stages, in model order) up to it recompute.
  void choose_recompute(const Config& cfg, std::vector<strategy::Chunk<PassT>>& mine) {
    const std::string type = cfg.get(keys::checkpoint_type);
    if (type == "auto") recompute_ = nn::RecomputeMode::kSegments;
    else if (type == "collection" || cfg.source(keys::checkpoint_type) == Config::Source::kDefault) recompute_ = nn::RecomputeMode::kMarked;
    else recompute_ = nn::RecomputeMode::kNone;
    EPL_CHECK(type != "collection" || nn::has_recompute_v<Model>, "gradient_checkpoint.type = \"collection\" but the model "
              "marks no boundary; wrap the layers whose activations to recompute in epl::Recompute<...> (a field of the model), "
              "or let the library choose them with gradient_checkpoint.type = \"auto\"");
    end_taskgraph_ = cfg.get(keys::checkpoint_end_taskgraph);
    EPL_CHECK(end_taskgraph_ < plan_.chunks, "gradient_checkpoint.end_taskgraph = ", end_taskgraph_, " but the model runs as ",
              plan_.chunks, " task graph", plan_.chunks == 1 ? "" : "s", " (pipeline stages, numbered from 0 in model order)",
              "; choose -1 (all of them) or at most ", plan_.chunks - 1);
    check_gradients_ = cfg.get(keys::checkpoint_check_gradients);
    // the keys that shape recompute ask for one: nothing recomputed is named, not ignored
    const bool nothing = recompute_ == nn::RecomputeMode::kNone || (recompute_ == nn::RecomputeMode::kMarked && !nn::has_recompute_v<Model>);
    const char* asked = check_gradients_ ? "gradient_checkpoint.check_gradients = true"
                        : cfg.source(keys::checkpoint_end_taskgraph) != Config::Source::kDefault ? "gradient_checkpoint.end_taskgraph is set"
                                                                                                  : nullptr;
    EPL_CHECK(!asked || !nothing, asked, " but nothing is recomputed (gradient_checkpoint.type = ",
              recompute_ == nn::RecomputeMode::kNone ? "\"\"" : "unset and the model marks no epl::Recompute",
              "); set gradient_checkpoint.type to \"auto\" (or \"collection\" with marks), or drop the key");
    if (recompute_ != nn::RecomputeMode::kSegments) return;
    const auto chunks = plan_.chunks_of(mesh_->coord().pipeline);
    std::size_t recomputed = 0;
    std::string uncut;  // the task graphs that should recompute and cannot
    for (std::size_t j = 0; j < mine.size(); ++j) {
      const int c = chunks[j];
      if (end_taskgraph_ >= 0 && c > end_taskgraph_) continue;
      const std::size_t here = mine[j].choose_segments(c + 1 == plan_.chunks);
      recomputed += here;
      if (here == 0) uncut += (uncut.empty() ? "" : ", ") + std::to_string(c) + " (" + std::to_string(mine[j].units().size()) + " unit" +
                              (mine[j].units().size() == 1 ? ")" : "s)");
    }
    EPL_CHECK(recomputed > 0 || uncut.empty(), "gradient_checkpoint.type = \"auto\" finds nothing to recompute on pipeline rank ",
              mesh_->coord().pipeline, ": task graph ", uncut, " is too small to cut (the model's last piece keeps its "
              "activations) or split over a tensor-parallel group; use a deeper model, gradient_checkpoint.end_taskgraph below ",
              "the first of them, or gradient_checkpoint.type = \"\"");
  }
  // offload.level: "v0" keeps weights, gradients and optimizer state in the host pool (built with
  // epl::Offload<epl::offload::V0>, which comes with epl::Zero<3>: its per-layer gathers stream
  // them); unset, the compiled level.
  void choose_offload(const Config& cfg) {
    const bool given = cfg.source(keys::offload_level) != Config::Source::kDefault;
    offload_ = given ? cfg.get(keys::offload_level) == "v0" : kOffload;
    EPL_CHECK(!offload_ || kOffload, "offload.level = \"v0\" but this program was built without offload; build the Trainer with "
              "epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>> or set offload.level to \"\"");
    EPL_CHECK(!offload_ || zero_stage_ == 3, "offload.level = \"v0\"", given ? "" : " (unset: the program's epl::Offload<epl::offload::V0>)",
              " streams each layer's weights from host memory through ZeRO stage 3's per-layer gathers, but zero.level = \"",
              cfg.get(keys::zero_level), "\" asks for stage ", zero_stage_, "; set zero.level = \"v2\" (it works on one rank too) "
              "or turn offload off with offload.level = \"\" (the empty string)");
  }
  // amp.level: "O1" rounds every GEMM's operands to the compiled epl::Amp<...>'s precision and
  // scales the loss (amp.loss_scale: "dynamic" or a fixed number); "" turns it off; unset, the
  // compiled policy decides.
  void choose_amp(const Config& cfg) {
    const bool given = cfg.source(keys::amp_level) != Config::Source::kDefault;
    const bool on = given ? cfg.get(keys::amp_level) == "O1" : kAmp != DType::kF32;
    EPL_CHECK(!on || kAmp != DType::kF32, "amp.level = \"O1\" but this program was built without mixed precision; build the "
              "Trainer with epl::Policies<epl::Amp<epl::amp::BF16>> (or epl::amp::FP16) or set amp.level to \"\"");
    EPL_CHECK(!on || overlap_clip(cfg), "amp.level = \"O1\" with communication.clip_after_allreduce=false is not supported: "
              "each replica would clip gradients that are still multiplied by the loss scale; clip after the reduction "
              "(communication.clip_after_allreduce=true)");
    EPL_CHECK(!on || cfg.source(keys::fp16_scale) == Config::Source::kDefault, "communication.fp16_scale = ",
              cfg.get(keys::fp16_scale), " with amp.level = \"O1\": the gradients already carry the loss scale (amp.loss_scale), "
              "which is also their scale on the fp16 wire, and an overflow there skips the step and lowers it; drop "
              "communication.fp16_scale");
    amp_log_ = cfg.get(keys::amp_debug_log);
    const std::string scale = cfg.get(keys::amp_loss_scale);
    const char* asked = amp_log_ ? "amp.debug_log = true" : scale != "dynamic" ? "amp.loss_scale is set" : nullptr;
    EPL_CHECK(on || !asked, asked, " but mixed precision is off (amp.level = \"", cfg.get(keys::amp_level), "\"",
              given ? "" : ", and the program has no epl::Amp<...>", "); set amp.level = \"O1\" or drop the key");
    if (!on) return;
    matmul_ = kAmp;
    policy::LossScaleOptions o;
    o.dynamic = scale == "dynamic";
    o.init = o.dynamic ? opt_.amp_init_scale : std::stod(scale);
    o.growth_interval = opt_.amp_growth_interval;
    scaler_.emplace(o);
  }
  // Whether the gradients are clipped (if at all) after the reduction.
  bool overlap_clip(const Config& cfg) const { return cfg.get(keys::clip_after_allreduce) || opt_.clip_norm <= 0; }
  // What ZeRO cannot be combined with (yet), named with the key that asks for it.
  void check_zero_setup(const Config& cfg) {
    EPL_CHECK(!plan_.rows_over_tensor(), "zero.level (ZeRO stage ", zero_stage_, ") with cluster.colocate_split_and_replicate is not "
              "supported: the colocated replicated part reduces over the data and tensor axes; drop one of the two keys");
    if (zero_stage_ >= 2) {
      EPL_CHECK(!cfg.get(keys::fp16), "communication.fp16 with ZeRO stage ", zero_stage_, " (zero.level = \"v", zero_stage_ - 1,
                "\"", offload_ ? ", which offload.level = \"v0\" needs" : "", ") is not supported: the gradient shards are reduced in "
                "full precision; set communication.fp16=false", offload_ ? "" : " or use zero.level=\"v0\"");
      EPL_CHECK(overlap_clip(cfg), "communication.clip_after_allreduce=false clips each "
                "replica's whole local gradient, which ZeRO stage ", zero_stage_, " never holds; clip after the reduction "
                "(communication.clip_after_allreduce=true) or use zero.level=\"v0\"");
    }
  }
  // The pipeline group when the model is cut into stages across ranks (norms and the loss sum
  // over it), else null.
  comm::Communicator* stages() { return mesh_->pipeline_size() > 1 ? &mesh_->pipeline() : nullptr; }
  // The ranks of this pipeline stage on every replica and tensor part (a colocated split's
  // replicated part is data parallel over them).
  comm::Communicator& stage_group() {
    if (!stage_group_.valid()) stage_group_ = world_->split(mesh_->coord().pipeline, world_->rank());
    return stage_group_;
  }
  comm::Communicator& loss_group() { return scalars_.valid() ? scalars_ : replica_scalars_; }
  nn::Groups groups() { return {mesh_->tensor_size() > 1 ? &mesh_->tensor() : nullptr, &mesh_->data()}; }
  // The first arena offset of the parameters visited before the model's first Split part.
  std::int64_t first_offset_before_split() {
    std::int64_t first = arena_.size();
    plan::for_each_parameter_before_split(model_, [&](nn::Parameter& p) {
      if (p.materialized()) first = std::min(first, p.offset);
    });
    return first;
  }
  // Every data-parallel rank must train on an equal share of the global batch, and the ranks of
  // a split group (unless colocated) on the same rows.
  void agree_on_rows(const Batch& batch) {
    const std::int64_t rows = batch.inputs.dim(0);
    auto& sharers = loss_group();
    if (sharers.size() > 1) {
      std::vector<std::int64_t> all(static_cast<std::size_t>(sharers.size()));
      std::int64_t mine = rows;
      sharers.all_gather(comm::Buffer(&mine, 1, DType::kI64), comm::Buffer(all.data(), sharers.size(), DType::kI64));
      for (std::size_t r = 1; r < all.size(); ++r)
        EPL_CHECK(all[r] == all[0], "at step ", steps_ + 1, " data-parallel rank ", r, " got a batch of ", all[r],
                  " rows and rank 0 one of ", all[0], "; every rank must get an equal share of the global batch "
                  "(data::WindowLoader with trainer.data_shard() does this)");
    }
    if (mesh_->tensor_size() > 1 && !plan_.rows_over_tensor())
      same_rows(tensor_scalars_, batch, "tensor-parallel rank ", " of a split group", "the ranks of an epl::Split group work on the same rows");
    if (pipeline_scalars_.valid())
      same_rows(pipeline_scalars_, batch, "pipeline stage ", "",
                "the stages of one pipeline replica work on the same rows (stage 0 reads their inputs, the last stage their targets)");
  }
  // The ranks of group must have been given the same rows (inputs and targets).
  void same_rows(comm::Communicator& group, const Batch& batch, const char* who, const char* of, const char* why) {
    std::uint64_t mine[2] = {detail::content_hash(batch.inputs), detail::content_hash(batch.targets)};
    std::vector<std::uint64_t> all(static_cast<std::size_t>(2 * group.size()));
    group.all_gather(comm::Buffer(mine, 2, DType::kI64), comm::Buffer(all.data(), 2 * group.size(), DType::kI64));
    for (int r = 1; r < group.size(); ++r) {
      const bool inputs = all[2 * r] == all[0], targets = all[2 * r + 1] == all[1];
      EPL_CHECK(inputs && targets, "at step ", steps_ + 1, " ", who, r, of, " got other ", inputs ? "targets" : "inputs",
                " than its ", who, "0; ", why, " (read them with data::WindowLoader and trainer.data_shard())");
    }
  }
  // The split group's targets of a colocated split, [group rows] micro-batch by micro-batch: each
  // micro-batch's rows of every part in group order (what the split's entry gathers).
  Tensor gather_targets(const Tensor& mine, int micro_batches) {
    const std::int64_t n = mesh_->tensor_size(), rows = mine.dim(0), per = rows / micro_batches;
    Tensor all = device_->empty({n * rows}, mine.dtype(), MemoryCategory::kActivations);
    mesh_->tensor().all_gather(mine, all);
    Tensor ordered = device_->empty({n * rows}, mine.dtype(), MemoryCategory::kActivations);
    for (std::int64_t m = 0; m < micro_batches; ++m)
      for (std::int64_t q = 0; q < n; ++q)
        device_->copy(all.slice(q * rows + m * per, q * rows + (m + 1) * per), ordered.slice((m * n + q) * per, (m * n + q + 1) * per));
    return ordered;
  }
  // The global L2 norm of the gradients, clipped to max_norm when it is positive; returns it
  // before clipping. A split group's parts hold parts of the sharded gradients (summed over the
  // tensor axis) and all of the replicated ones (counted once); the pipeline's stages sum.
  double clip(double max_norm) {
    double sq[2] = {0, 0};  // replicated, sharded
    const bool sharded_grads = zero_stage_ >= 2;  // each data-parallel rank holds a shard: they sum
    if (mesh_->tensor_size() == 1 && !sharded_grads) sq[0] = device_->sum_squares(arena_.grads());
    else
      for (auto* p : arena_.parameters()) sq[p->shard.whole() ? 0 : 1] += device_->sum_squares(grad_here(*p));
    if (sharded_grads && mesh_->data_size() > 1) replica_scalars_.all_reduce(comm::Buffer(sq, 2, DType::kF64), comm::ReduceOp::kSum);
    if (mesh_->tensor_size() > 1) tensor_scalars_.all_reduce(comm::Buffer(&sq[1], 1, DType::kF64), comm::ReduceOp::kSum);
    double total = sq[0] + sq[1];
    if (auto* p = stages()) p->all_reduce(comm::Buffer(&total, 1, DType::kF64), comm::ReduceOp::kSum);
    const double norm = std::sqrt(total);
    if (max_norm > 0 && max_norm / (norm + 1e-6) < 1) {  // PyTorch's rule
      if (sharded_grads)
        for (const auto& g : sharder_->owned_grads()) device_->scale(g, max_norm / (norm + 1e-6));
      else device_->scale(arena_.grads(), max_norm / (norm + 1e-6));
    }
    return norm;
  }
  // p's reduced gradient as this rank holds it: whole, or under ZeRO 2 and 3 the part in its
  // shard (possibly none: an empty tensor, whose sum of squares is 0).
  Tensor grad_here(const nn::Parameter& p) const {
    if (zero_stage_ < 2) return p.grad;
    Tensor part = sharder_->owned_grad_of(p).first;
    return part.defined() ? part : device_->empty({0}, arena_.dtype(), MemoryCategory::kWorkspace);
  }
  [[noreturn]] void fail_non_finite_gradient() {
    std::string where;
    nn::visit_parameters(model_, [&](std::string_view path, nn::Parameter& p) {
      if (where.empty() && p.materialized() && !std::isfinite(device_->sum_squares(grad_here(p)))) where = std::string(path);
    });
    EPL_FAIL("the gradient norm is ", last_grad_norm_, " at step ", steps_ + 1, where.empty() ? "" : "; the first parameter with a "
             "NaN or infinite gradient is " + where, ": training diverged or a layer's backward is wrong; lower the learning "
             "rate, clip gradients (TrainerOptions::clip_norm) or gradcheck the layer",
             fp16_scale_ > 0 ? "; or, as gradients travel as fp16 (communication.fp16), lower communication.fp16_scale = " +
                                   detail::concat(fp16_scale_) + ": a gradient times the scale past 65504 is infinite"
                             : std::string());
  }

  const D* device_;
  std::optional<comm::Communicator> solo_;
  comm::Communicator* world_;
  Model model_;
  optim::Updater<Optimizer> updater_;
  TrainerOptions opt_;
  plan::Plan plan_;
  std::vector<strategy::Action> actions_;
  std::unique_ptr<strategy::Mesh> mesh_;
  comm::Communicator scalars_, replica_scalars_, tensor_scalars_, pipeline_scalars_;
  double fp16_scale_ = 0;  // communication.fp16_scale when gradients travel as fp16, else 0
  param::Arena arena_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<policy::ZeroSharder<D>> sharder_;  // null: no ZeRO this run
  int zero_stage_ = 0;
  bool offload_ = false;  // offload.level = "v0": the shards live in the device's host pool
  DType matmul_ = DType::kF32;                 // amp.level "O1": the compiled epl::Amp's bf16 or f16
  std::optional<policy::LossScaler> scaler_;  // amp.level "O1": the loss scale
  bool amp_log_ = false;                      // amp.debug_log
  nn::RecomputeMode recompute_ = nn::RecomputeMode::kMarked;  // gradient_checkpoint.type
  std::int64_t end_taskgraph_ = -1;                   // the last chunk that recomputes (-1: all)
  bool check_gradients_ = false;
  std::optional<double> checkpoint_difference_;
  std::int64_t apply_groups_ = 1;
  Hooks hooks_;
  std::optional<strategy::Executor<PassT, Loss>> executor_;
  std::unique_ptr<Timeline> timeline_;
  std::string trace_path_;
  comm::Communicator trace_group_, stage_group_;
  bool overlap_ = true;
  std::int64_t steps_ = 0;
  double last_grad_norm_ = 0;
  std::vector<std::pair<std::string, std::string>> config_;  // every key's value as text, for checkpoints
  std::string checkpoint_dir_;                               // checkpoint.dir
  std::int64_t checkpoint_every_ = 0;                        // checkpoint.every
  std::vector<data::WindowLoader*> loaders_;                 // watched: their positions are saved
  std::vector<data::WindowLoader::Position> saved_positions_;  // a resumed run's, until the loaders are watched
  std::size_t saved_loaders_ = 0;                               // the loader positions the resumed checkpoint held
  std::optional<std::filesystem::path> resumed_from_;
  std::unique_ptr<checkpoint::DirectoryLock> dir_lock_;  // rank 0: the directory this run saves into
  std::filesystem::path locked_dir_;
};

/// \brief Prints the per-step progress line: step, loss, throughput, peak memory.
inline void print_progress(std::int64_t step, double loss, double items_per_s, const char* unit, DeviceId d) {
  std::printf("step %5lld  loss %.4f  %10.1f %s/s  peak %.1f MiB\n", static_cast<long long>(step), loss, items_per_s, unit,
              static_cast<double>(memory_stats(d).total_peak) / (1024.0 * 1024.0));
  std::fflush(stdout);
}

}  // namespace v0
}  // namespace epl
