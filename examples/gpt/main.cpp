// A byte-level GPT trained on real text that a Debian package ships (fortune cookies from
// the `fortunes` packages), on one device. A progress line per step: loss, tokens/s, peak memory.
//
//   gpt [--steps=N] [--data=FILE]... [--layers=N --dim=N --heads=N --context=N --batch=N]
//       [--pipeline.num_micro_batch=M] [--ranks=R] [--threads=N] [--io.slicing=true ...]   (--help)
// Data parallel on R thread ranks (--ranks or EPL_NUM_RANKS), or on MPI processes:
//   epl-launch --num_workers 2 -- gpt --steps=50
#include <epl/epl.hpp>
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
  auto cfg = epl::Config::from_args(argc, argv, steps, data, layers, dim, heads, context, batch, ranks, threads);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("gpt", "A byte-level GPT trained on the fortunes; data parallel on thread ranks or MPI processes.").c_str(), stdout);
    return 0;
  }
  const gpt::Shape shape{.vocab = 256, .context = cfg.get(context), .layers = cfg.get(layers), .heads = cfg.get(heads), .dim = cfg.get(dim)};
  EPL_CHECK(shape.dim % shape.heads == 0, "--dim=", shape.dim, " is not a multiple of --heads=", shape.heads,
            "; every attention head needs dim / heads columns");
  std::vector<std::filesystem::path> files;
  for (const auto& f : cfg.get(data)) files.emplace_back(f);
  if (files.empty()) files = default_corpus();
  const std::int64_t global_batch = cfg.get(batch);

  // Every rank runs this: thread ranks by default (--ranks or EPL_NUM_RANKS), MPI processes
  // under epl-launch. The global batch is divided among the ranks; the model is replicated.
  return epl::launch(cfg, [&](epl::Context& ctx) {
    const auto& cpu = ctx.cpu();
    auto files_here = epl::data::slice_files(files, {ctx.rank(), ctx.size()}, cfg);
    auto text = epl::data::TokenDataset::from_text(files_here);
    epl::data::WindowLoader loader(text, shape.context, global_batch, 1234, {ctx.rank(), ctx.size()});
    epl::Trainer<gpt::Gpt, epl::optim::AdamW> trainer(ctx, cfg, gpt::make_gpt(shape), epl::optim::AdamW({.lr = 2e-3, .weight_decay = 0.0}),
                                                      {.seed = 42, .clip_norm = 1.0});
    epl::log_rank(ctx.rank(), "of ", ctx.size(), ": ", cpu.id().str(), ", ", cpu.threads(), " thread(s), ", files_here.size(),
                  " file(s), ", global_batch / ctx.size(), " of each batch's ", global_batch, " windows");
    if (ctx.rank() == 0)
      std::printf("gpt: %lld parameters, %lld layers, dim %lld, context %lld, global batch %lld on %d rank(s) x %d thread(s), "
                  "%lld MiB of text in %zu files\n",
                  static_cast<long long>(epl::nn::parameter_count(trainer.model())), static_cast<long long>(shape.layers),
                  static_cast<long long>(shape.dim), static_cast<long long>(shape.context), static_cast<long long>(global_batch),
                  ctx.size(), cpu.threads(), static_cast<long long>(text.size() >> 20), files.size());
    for (std::int64_t s = 1; s <= cfg.get(steps); ++s) {
      auto t0 = std::chrono::steady_clock::now();
      double loss = trainer.step(loader.next(cpu));
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (ctx.rank() == 0) epl::print_progress(s, loss, static_cast<double>(global_batch * shape.context) / secs, "tokens", cpu.id());
    }
  }, {.ranks = static_cast<int>(cfg.get(ranks)), .threads_per_rank = static_cast<int>(cfg.get(threads))});
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
