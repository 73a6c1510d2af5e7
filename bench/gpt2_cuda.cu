// GPT-2 124M (vocab 50257, context 1024, 12 layers, 12 heads, width 768, untied head) trained on
// one GPU with AdamW on random tokens. Prints one JSON line:
//   bench_gpt2_cuda [--batch=B] [--steps=N] [--warmup=N] [--f32]
// By default with mixed precision (amp.level O1, epl::Amp<epl::amp::BF16>): every GEMM multiplies
// bf16 on the tensor cores and accumulates in f32; weights, activations and optimizer state are
// f32. --f32 multiplies f32. bench/gpt2_cuda.sh runs it against PyTorch (bench/gpt2_torch.py).
#include <chrono>
#include <cstdio>
#include <string>

#include "../examples/gpt/gpt.hpp"
#include "common.hpp"
#include "epl/device/cuda/cuda.cuh"

int main(int argc, char** argv) {
  std::int64_t batch = 16;
  int steps = 10, warmup = 3;
  bool amp = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--batch=", 0) == 0) batch = std::stoll(a.substr(8));
    else if (a.rfind("--steps=", 0) == 0) steps = std::stoi(a.substr(8));
    else if (a.rfind("--warmup=", 0) == 0) warmup = std::stoi(a.substr(9));
    else if (a == "--f32") amp = false;
    else {
      std::fprintf(stderr, "bench_gpt2_cuda: unknown argument %s (--batch=B --steps=N --warmup=N --f32)\n", a.c_str());
      return 2;
    }
  }
  const gpt::Shape shape{.vocab = 50257, .context = 1024, .layers = 12, .heads = 12, .dim = 768};
  epl::device::Cuda gpu;
  epl::Config cfg;
  cfg.set(epl::keys::amp_level, amp ? "O1" : "");
  epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<epl::Amp<epl::amp::BF16>>, epl::nn::SoftmaxCrossEntropy, epl::device::Cuda>
      trainer(gpu, cfg, gpt::make_gpt(shape), epl::optim::AdamW({.lr = 6e-4, .weight_decay = 0.1}), {.seed = 1, .clip_norm = 1.0});
  std::vector<std::int32_t> tokens(1 << 22);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 50257);
  const auto ds = epl::data::TokenDataset::from_tokens(tokens, 50257);
  epl::data::WindowLoader loader(ds, shape.context, batch, 11);
  std::vector<double> secs;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    auto b = loader.next(gpu);
    gpu.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    loss = trainer.step(b);  // reads the loss back: the step's work has finished
    if (s >= warmup) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double step = bench::median(secs);
  std::int64_t params = 0;
  epl::nn::for_each_parameter(trainer.model(), [&](epl::nn::Parameter& p) { params += p.value.numel(); });
  std::printf("{\"impl\": \"epl%s\", \"batch\": %lld, \"context\": %lld, \"params\": %lld, \"step_ms\": %.2f, \"tokens_per_s\": %.0f, "
              "\"peak_gib\": %.2f, \"loss\": %.4f}\n",
              amp ? " amp bf16" : " f32", static_cast<long long>(batch), static_cast<long long>(shape.context),
              static_cast<long long>(params), step * 1e3, static_cast<double>(batch * shape.context) / step,
              static_cast<double>(epl::memory_stats(gpu.id()).total_peak) / (1 << 30), loss);
}
