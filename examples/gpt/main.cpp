// A byte-level GPT trained on real text that a Debian package ships (fortune cookies from
// the `fortunes` packages). A progress line per step: loss, tokens/s, peak memory.
//
//   gpt [--steps=N] [--data=FILE]... [--layers=N --dim=N --heads=N --context=N --batch=N]
//       [--pipeline.num_micro_batch=M] [--ranks=R] [--threads=N] [--io.slicing=true ...]
//       [--trace=FILE]   (--help)
// Data parallel on R thread ranks (--ranks or EPL_NUM_RANKS), or on MPI processes:
//   epl-launch --num_workers 2 -- gpt --steps=50
// Pipelined: cut into stages automatically, or declared as two stages (--two_stage):
//   gpt --ranks=2 --pipeline.num_stages=2 --auto.auto_parallel=true --pipeline.num_micro_batch=4
//   gpt --ranks=2 --two_stage --pipeline.strategy=PreferForward --pipeline.num_micro_batch=4
// Planned: the planner measures the model and chooses stages, micro-batches, ZeRO, recompute, AMP:
//   gpt --ranks=4 --auto.auto_parallel=true
// Memory policies, alone or combined (built in; off unless asked for):
//   gpt --ranks=2 --zero.level=v2 --optimizer.num_apply_group=4
//   gpt --gradient_checkpoint.type=auto          (the library's segments)
//   gpt --gradient_checkpoint.type=collection    (each block an epl::Recompute: gpt::RecomputedGpt)
//   gpt --offload.level=v0                       (weights in host memory; brings zero.level=v2)
// Checkpoints: save every 50 steps; run again with the same directory to resume from the newest:
//   gpt --checkpoint.dir=ckpt --checkpoint.every=50
// Learning rate: 10 steps of warm-up to 2e-3, then a cosine decay to 2e-4 at step 200, unless the
// lr.* keys say otherwise (--lr.schedule=constant, --lr.decay_steps=1000, ...). The decay's length
// is a fixed 200 steps, not --steps: a run stopped and resumed with more steps keeps its rates.
#include <epl/epl.hpp>
#include <epl/tune/auto_plan.hpp>
#include <epl/runtime/launch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "gpt.hpp"

namespace {
std::vector<std::filesystem::path> default_corpus() {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      auto ext = e.path().extension();
      if (e.is_regular_file() && ext != ".dat" && ext != ".u8" && !e.is_symlink()) files.push_back(e.path());
    }
  std::sort(files.begin(), files.end());
  EPL_CHECK(!files.empty(), "no text found in ", dir, "; install the Debian package fortunes (or fortunes-min), or pass --data=FILE");
  return files;
}

struct Run {
  gpt::Shape shape;
  std::int64_t steps = 0, global_batch = 0;
  std::vector<std::filesystem::path> files;
};

// The policies as given, else off: a Trainer built with epl::Zero<3> and epl::Offload would
// otherwise run its compiled stage and level. Offload asked for alone brings ZeRO stage 3, the
// per-layer gathers that stream the weights.
epl::Config with_policies_off_by_default(epl::Config cfg) {
  const bool offload = cfg.source(epl::keys::offload_level) != epl::Config::Source::kDefault && cfg.get(epl::keys::offload_level) == "v0";
  if (cfg.source(epl::keys::offload_level) == epl::Config::Source::kDefault) cfg.set("offload.level", "");
  if (cfg.source(epl::keys::amp_level) == epl::Config::Source::kDefault) cfg.set("amp.level", "");
  if (cfg.source(epl::keys::zero_level) == epl::Config::Source::kDefault) cfg.set("zero.level", offload ? "v2" : "");
  return cfg;
}

// The learning-rate schedule given by the lr.* keys, else warm-up and a cosine decay.
epl::Config with_schedule_by_default(epl::Config cfg) {
  auto fill = [&](auto key, auto value) {
    if (cfg.source(key) == epl::Config::Source::kDefault) cfg.set(key, value);
  };
  if (cfg.source(epl::keys::lr_schedule) != epl::Config::Source::kDefault && cfg.get(epl::keys::lr_schedule) == "constant") return cfg;
  fill(epl::keys::lr_schedule, "cosine");
  fill(epl::keys::lr_warmup_steps, 10);
  fill(epl::keys::lr_decay_steps, 200);
  fill(epl::keys::lr_min, 2e-4);
  return cfg;
}

// Every rank runs this with the model type chosen on the command line.
template <class Model>
void train(epl::Context& ctx, const epl::Config& given, const Run& run, Model model) {
  const auto& cpu = ctx.cpu();
  // Built with every ZeRO stage, offload and AMP; zero.level, offload.level and amp.level pick (off when not given).
  using Policy = epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>, epl::Amp<epl::amp::BF16>>;
  epl::Config cfg = with_schedule_by_default(with_policies_off_by_default(given));
  // --auto.auto_parallel=true without --pipeline.num_stages: the planner measures the model on a
  // few windows of the first file and chooses the plan (docs/planner.md).
  if (cfg.get(epl::keys::auto_parallel) && cfg.source(epl::keys::num_stages) == epl::Config::Source::kDefault) {
    const auto sample = epl::data::TokenDataset::from_text({run.files.front()});
    epl::data::WindowLoader probe(sample, run.shape.context, 4, 99);
    cfg = epl::auto_plan<Model, epl::optim::AdamW, Policy>(ctx, cfg, model, probe.next(cpu), run.global_batch);
  }
  epl::Trainer<Model, epl::optim::AdamW, Policy> trainer(ctx, cfg, std::move(model), epl::optim::AdamW({.lr = 2e-3, .weight_decay = 0.0}),
                                                         {.seed = 42, .clip_norm = 1.0});
  // The data-parallel replicas divide each global batch; a pipeline's stages read the same rows.
  const epl::data::Shard shard = trainer.data_shard();
  auto files_here = epl::data::slice_files(run.files, shard, cfg);
  auto text = epl::data::TokenDataset::from_text(files_here);
  epl::data::WindowLoader loader(text, run.shape.context, run.global_batch, 1234, shard);
  trainer.watch(loader);  // its position is saved with checkpoints (--checkpoint.dir), and restored
  const auto& plan = trainer.plan();
  epl::log_rank(ctx.rank(), "of ", ctx.size(), ": ", cpu.id().str(), ", ", cpu.threads(), " thread(s), ", files_here.size(),
                " file(s), replica ", shard.rank, " of ", shard.ranks, " (", run.global_batch / shard.ranks, " of each batch's ",
                run.global_batch, " windows)", trainer.zero_stage() > 0 ? ", ZeRO stage " + std::to_string(trainer.zero_stage()) : std::string(),
                trainer.offloaded() ? ", weights offloaded to host memory" : "",
                plan.pipeline > 1 ? ", pipeline stage " + std::to_string(trainer.mesh().coord().pipeline) +
                " of " + std::to_string(plan.pipeline) : std::string());
  if (ctx.rank() == 0)
    std::printf("gpt: %lld parameters, %lld layers, dim %lld, context %lld, global batch %lld on %d rank(s) x %d thread(s), "
                "%lld MiB of text in %zu files\n",
                static_cast<long long>(epl::nn::parameter_count(trainer.model())), static_cast<long long>(run.shape.layers),
                static_cast<long long>(run.shape.dim), static_cast<long long>(run.shape.context), static_cast<long long>(run.global_batch),
                ctx.size(), cpu.threads(), static_cast<long long>(text.size() >> 20), run.files.size());
  // The progress line's peak is training's: the start-up draws the whole model once before ZeRO
  // shards it.
  epl::memory_account(cpu.id()).reset_peaks();
  for (std::int64_t s = trainer.steps() + 1; s <= run.steps; ++s) {  // a resumed run goes on from its checkpoint's step
    auto t0 = std::chrono::steady_clock::now();
    double loss = trainer.step(loader.next(cpu));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ctx.rank() == 0) epl::print_progress(s, loss, static_cast<double>(run.global_batch * run.shape.context) / secs, "tokens", cpu.id());
  }
  if (ctx.rank() == 0) {
    const auto m = epl::memory_stats(cpu.id());
    auto mib = [&](epl::MemoryCategory c) { return static_cast<double>(m.current_of(c)) / (1024.0 * 1024.0); };
    std::printf("rank 0 holds parameters %.2f MiB, gradients %.2f MiB, optimizer state %.2f MiB\n", mib(epl::MemoryCategory::kParameters),
                mib(epl::MemoryCategory::kGradients), mib(epl::MemoryCategory::kOptimizerState));
    if (trainer.offloaded()) {
      const auto h = epl::memory_stats(epl::DeviceId{epl::DeviceKind::kHost, cpu.id().index});
      auto host = [&](epl::MemoryCategory c) { return static_cast<double>(h.current_of(c)) / (1024.0 * 1024.0); };
      std::printf("and in its host pool parameters %.2f MiB, gradients %.2f MiB, optimizer state %.2f MiB\n",
                  host(epl::MemoryCategory::kParameters), host(epl::MemoryCategory::kGradients), host(epl::MemoryCategory::kOptimizerState));
    }
  }
}
}  // namespace

int main(int argc, char** argv) try {
  const gpt::Shape d;
  const epl::Flag<std::int64_t> steps{"steps", 200, "optimizer steps to run", {.min = 1}};
  const epl::Flag<std::vector<std::string>> data{"data", {}, "a text file to train on (give it once per file); default: the fortunes"};
  const epl::Flag<std::int64_t> layers{"layers", d.layers, "transformer blocks", {.min = 1, .max = 1024}};
  const epl::Flag<std::int64_t> dim{"dim", d.dim, "model width (a multiple of --heads)", {.min = 1, .max = 65536}};
  const epl::Flag<std::int64_t> heads{"heads", d.heads, "attention heads", {.min = 1, .max = 1024}};
  const epl::Flag<std::int64_t> context{"context", d.context, "tokens per window", {.min = 1, .max = 1 << 20}};
  const epl::Flag<std::int64_t> batch{"batch", 16, "windows per global batch (divided among the ranks)", {.min = 1}};
  const epl::Flag<std::int64_t> ranks{"ranks", 0, "thread ranks (0: EPL_NUM_RANKS, else 1)", {.min = 0, .max = 4096}};
  const epl::Flag<std::int64_t> threads{"threads", 0, "OpenMP threads per rank (0: the cores / ranks)", {.min = 0, .max = 4096}};
  const epl::Flag<bool> two_stage{"two_stage", false, "train the model declared as two pipeline stages (gpt::TwoStageGpt)"};
  auto cfg = epl::Config::from_args(argc, argv, steps, data, layers, dim, heads, context, batch, ranks, threads, two_stage);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("gpt", "A byte-level GPT trained on the fortunes; data parallel and pipelined on thread ranks or MPI processes.").c_str(), stdout);
    return 0;
  }
  const gpt::Shape shape{.vocab = 256, .context = cfg.get(context), .layers = cfg.get(layers), .heads = cfg.get(heads), .dim = cfg.get(dim)};
  EPL_CHECK(shape.dim % shape.heads == 0, "--dim=", shape.dim, " is not a multiple of --heads=", shape.heads,
            "; every attention head needs dim / heads columns");
  Run run{shape, cfg.get(steps), cfg.get(batch), {}};
  for (const auto& f : cfg.get(data)) run.files.emplace_back(f);
  if (run.files.empty()) run.files = default_corpus();

  // Every rank runs this: thread ranks by default (--ranks or EPL_NUM_RANKS), MPI processes
  // under epl-launch. The model is replicated, or cut into pipeline stages when asked; under
  // gradient_checkpoint.type=collection, each block is marked a checkpoint boundary.
  return epl::launch(cfg, [&](epl::Context& ctx) {
    if (cfg.get(two_stage)) train(ctx, cfg, run, gpt::make_two_stage_gpt(shape));
    else if (cfg.get(epl::keys::checkpoint_type) == "collection") train(ctx, cfg, run, gpt::make_recomputed_gpt(shape));
    else train(ctx, cfg, run, gpt::make_gpt(shape));
  }, {.ranks = static_cast<int>(cfg.get(ranks)), .threads_per_rank = static_cast<int>(cfg.get(threads))});
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
