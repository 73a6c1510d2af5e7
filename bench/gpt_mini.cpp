// Single-device training throughput of gpt-mini (vocab 4096, context 256, 6 layers, 6 heads,
// width 384, batch 8, fp32, AdamW) on random tokens. Prints one JSON line:
//   bench_gpt_mini [--threads=N] [--steps=N] [--warmup=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "../examples/gpt/gpt.hpp"

int main(int argc, char** argv) {
  int threads = 1, steps = 6, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) threads = std::stoi(a.substr(10));
    if (a.rfind("--steps=", 0) == 0) steps = std::stoi(a.substr(8));
    if (a.rfind("--warmup=", 0) == 0) warmup = std::stoi(a.substr(9));
  }
  const gpt::Shape shape{.vocab = 4096, .context = 256, .layers = 6, .heads = 6, .dim = 384};
  const std::int64_t batch = 8;
  epl::device::Cpu cpu(0, threads);
  epl::Trainer<gpt::Gpt, epl::optim::AdamW> trainer(cpu, epl::Config{}, gpt::make_gpt(shape), epl::optim::AdamW({.lr = 1e-4}));
  std::vector<std::int32_t> tokens(1 << 20);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 4096);
  auto ds = epl::data::TokenDataset::from_tokens(tokens, 4096);
  epl::data::WindowLoader loader(ds, shape.context, batch, 3);
  std::vector<double> secs;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    auto b = loader.next(cpu);
    auto t0 = std::chrono::steady_clock::now();
    loss = trainer.step(b);
    if (s >= warmup) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  const auto params = epl::nn::parameter_count(trainer.model());
  const double tps = static_cast<double>(batch * shape.context) / median;
#ifndef BENCH_IMPL
#define BENCH_IMPL "epl"
#endif
  std::printf("{\"impl\": \"" BENCH_IMPL "\", \"threads\": %d, \"params\": %lld, \"tokens_per_s\": %.1f, \"gflops\": %.1f, "
              "\"step_s\": %.4f, \"loss\": %.4f, \"peak_mib\": %.1f}\n",
              threads, static_cast<long long>(params), tps, tps * gpt::flops_per_token(shape, params) / 1e9, median, loss,
              static_cast<double>(epl::memory_stats(cpu.id()).total_peak) / 1048576.0);
}
