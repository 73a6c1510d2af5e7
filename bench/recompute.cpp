// Gradient checkpointing's price and saving: examples/gpt's model with each block an
// epl::Recompute boundary, trained on one device with its activations kept
// (gradient_checkpoint.type = ""), recomputed at the marks ("collection") and at the segments the
// library chooses ("auto"), alternating A B C A B C ... for `rounds` rounds; prints the median
// step time of each, the recompute overheads, and the peak activation bytes of a step, for
// gpt-mini's width at two depths.
//   bench_recompute [--threads=1] [--rounds=5] [--steps=4] [--json=FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../examples/gpt/gpt.hpp"
#include "epl/core/files.hpp"

namespace {
using gpt::RecomputedGpt;

struct Result {
  double seconds = 0;                  // median step time
  std::int64_t activation_peak = 0;    // bytes, the largest of a step
};

Result run(const gpt::Shape& shape, const char* type, int threads, int steps) {
  epl::device::Cpu cpu(0, threads);
  epl::Config cfg;
  cfg.set("gradient_checkpoint.type", type);
  epl::Trainer<RecomputedGpt, epl::optim::AdamW> t(cpu, cfg, gpt::make_recomputed_gpt(shape), epl::optim::AdamW({.lr = 1e-3}), {.seed = 1});
  std::vector<std::int32_t> tokens(20000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * i + 7 * i) % 251);
  auto ds = epl::data::TokenDataset::from_tokens(tokens, 256);
  epl::data::WindowLoader loader(ds, shape.context, 8, 3);
  (void)t.step(loader.next(cpu));  // warm-up
  std::vector<double> times;
  epl::memory_account(cpu.id()).reset_peaks();
  for (int s = 0; s < steps; ++s) {
    auto batch = loader.next(cpu);
    const auto t0 = std::chrono::steady_clock::now();
    (void)t.step(batch);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], epl::memory_stats(cpu.id()).peak_of(epl::MemoryCategory::kActivations)};
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> threads{"threads", 1, "OpenMP threads", {.min = 1, .max = 256}};
  const epl::Flag<std::int64_t> rounds{"rounds", 5, "alternating rounds", {.min = 1, .max = 1000}};
  const epl::Flag<std::int64_t> steps{"steps", 4, "timed steps per run", {.min = 1, .max = 1000}};
  const epl::Flag<std::string> json{"json", "", "write the rows to this file"};
  auto cfg = epl::Config::from_args(argc, argv, threads, rounds, steps, json);
  std::string rows;
  std::printf("%-26s %12s %12s %9s %12s %9s %14s %14s %14s\n", "model", "keep s/step", "collection", "overhead", "auto",
              "overhead", "keep act. MiB", "collection MiB", "auto MiB");
  for (std::int64_t layers : {4, 12}) {
    const gpt::Shape shape{.vocab = 256, .context = 64, .layers = layers, .heads = 4, .dim = 128};
    std::vector<double> keep, marked, chosen;
    Result k, a, c;
    for (std::int64_t r = 0; r < cfg.get(rounds); ++r) {
      k = run(shape, "", static_cast<int>(cfg.get(threads)), static_cast<int>(cfg.get(steps)));
      a = run(shape, "collection", static_cast<int>(cfg.get(threads)), static_cast<int>(cfg.get(steps)));
      c = run(shape, "auto", static_cast<int>(cfg.get(threads)), static_cast<int>(cfg.get(steps)));
      keep.push_back(k.seconds);
      marked.push_back(a.seconds);
      chosen.push_back(c.seconds);
    }
    const double mk = median(keep), ma = median(marked), mc = median(chosen), mib = 1024.0 * 1024.0;
    const std::string name = "gpt " + std::to_string(layers) + " blocks, dim 128";
    std::printf("%-26s %12.4f %12.4f %8.1f%% %12.4f %8.1f%% %14.2f %14.2f %14.2f\n", name.c_str(), mk, ma, 100 * (ma / mk - 1), mc,
                100 * (mc / mk - 1), static_cast<double>(k.activation_peak) / mib, static_cast<double>(a.activation_peak) / mib,
                static_cast<double>(c.activation_peak) / mib);
    rows += (rows.empty() ? "" : ",\n") + std::string("  {\"model\": \"") + name + "\", \"keep_s\": " + std::to_string(mk) +
            ", \"collection_s\": " + std::to_string(ma) + ", \"auto_s\": " + std::to_string(mc) +
            ", \"keep_activation_bytes\": " + std::to_string(k.activation_peak) +
            ", \"collection_activation_bytes\": " + std::to_string(a.activation_peak) +
            ", \"auto_activation_bytes\": " + std::to_string(c.activation_peak) + "}";
  }
  if (!cfg.get(json).empty()) epl::files::write_file(cfg.get(json), "[\n" + rows + "\n]\n", "benchmark results file");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
