// A byte-level GPT trained on real text that a Debian package ships (fortune cookies from
// the `fortunes` packages), on one device. A progress line per step: loss, tokens/s, peak memory.
//
//   gpt [--steps=N] [--data=FILE]... [--layers=N --dim=N --heads=N --context=N --batch=N]
//       [--pipeline.num_micro_batch=M] [--ranks=R] [--threads=N] [--io.slicing=true ...]
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
  auto cfg = epl::Config::from_args(argc, argv);
  gpt::Shape shape;
  int steps = 200, threads = 0, ranks = 0;
  std::int64_t batch = 16;
  std::vector<std::filesystem::path> files;
  for (const auto& a : cfg.program_args()) {
    auto eq = a.find('=');
    auto name = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (name == "--steps") steps = std::stoi(value);
    else if (name == "--data") files.emplace_back(value);
    else if (name == "--layers") shape.layers = std::stoll(value);
    else if (name == "--dim") shape.dim = std::stoll(value);
    else if (name == "--heads") shape.heads = std::stoll(value);
    else if (name == "--context") shape.context = std::stoll(value);
    else if (name == "--batch") batch = std::stoll(value);
    else if (name == "--threads") threads = std::stoi(value);
    else if (name == "--ranks") ranks = std::stoi(value);
    else EPL_FAIL("unknown argument ", a, "; see the usage at the top of examples/gpt/main.cpp");
  }
  if (files.empty()) files = default_corpus();

  // Every rank runs this: thread ranks by default (--ranks or EPL_NUM_RANKS), MPI processes
  // under epl-launch. The global batch is divided among the ranks; the model is replicated.
  epl::launch(argc, argv, [&](auto& comm) {
    using Comm = std::remove_cvref_t<decltype(comm)>;
    epl::device::Cpu cpu(comm.rank());
    auto text = epl::data::TokenDataset::from_text(files);
    auto files_here = epl::data::slice_files(files, {comm.rank(), comm.size()}, cfg);
    if (files_here.size() != files.size()) text = epl::data::TokenDataset::from_text(files_here);
    epl::data::WindowLoader loader(text, shape.context, batch, 1234, {comm.rank(), comm.size()});
    epl::Trainer<epl::Replicate<1, gpt::Gpt>, epl::optim::AdamW, epl::nn::SoftmaxCrossEntropy, epl::device::Cpu, Comm> trainer(
        cpu, comm, cfg, epl::Replicate<1, gpt::Gpt>(gpt::make_gpt(shape)), epl::optim::AdamW({.lr = 2e-3, .weight_decay = 0.0}),
        {.seed = 42, .clip_norm = 1.0});
    epl::log_rank(comm.rank(), "of ", comm.size(), ": ", cpu.id().str(), ", ", cpu.threads(), " thread(s), ", files_here.size(),
                  " file(s), ", batch / comm.size(), " of each batch's ", batch, " windows");
    if (comm.rank() == 0)
      std::printf("gpt: %lld parameters, %lld layers, dim %lld, context %lld, global batch %lld on %d rank(s) x %d thread(s), "
                  "%lld MiB of text in %zu files\n",
                  static_cast<long long>(epl::nn::parameter_count(trainer.model())), static_cast<long long>(shape.layers),
                  static_cast<long long>(shape.dim), static_cast<long long>(shape.context), static_cast<long long>(batch), comm.size(),
                  cpu.threads(), static_cast<long long>(text.size() >> 20), files.size());
    for (int s = 1; s <= steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      double loss = trainer.step(loader.next(cpu));
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (comm.rank() == 0) epl::print_progress(s, loss, static_cast<double>(batch * shape.context) / secs, "tokens", cpu.id());
    }
  }, {.ranks = ranks, .threads_per_rank = threads});
  return 0;
} catch (const epl::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
