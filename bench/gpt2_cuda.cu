// GPT-2 124M (vocab 50257, context 1024, 12 layers, 12 heads, width 768, untied head) trained on
// one GPU with AdamW on random tokens. Prints one JSON line:
//   bench_gpt2_cuda [--batch=B] [--steps=N] [--warmup=N] [--f32] [--text=FILE]
// --text trains on a file's bytes instead (vocabulary 256; batches of consecutive windows, step s
// taking windows s B .. s B + B - 1, as bench/gpt2_torch.py --text does) from the first step, and
// the line carries every step's loss: bench/gpt2_curve.sh compares the curves.
// By default with mixed precision (amp.level O1, epl::Amp<epl::amp::BF16>): every GEMM multiplies
// bf16 on the tensor cores and accumulates in f32; weights, activations and optimizer state are
// f32. --f32 multiplies f32. bench/gpt2_cuda.sh runs it against PyTorch (bench/gpt2_torch.py).
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../examples/gpt/gpt.hpp"
#include "common.hpp"
#include "epl/device/cuda/cuda.cuh"

namespace {
constexpr const char* kUsage = "bench_gpt2_cuda [--batch=B] [--steps=N] [--warmup=N] [--f32] [--text=FILE]";
int run(int argc, char** argv);
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // an epl::Error (no GPU, out of memory, ...) is a message, not an abort
    std::fprintf(stderr, "bench_gpt2_cuda: %s\n", e.what());
    return 1;
  }
}

namespace {
// A JSON string's body: quotes, backslashes and control characters escaped.
std::string json_escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

int run(int argc, char** argv) {
  std::int64_t batch = 16;
  int steps = 10, warmup = 3;
  bool amp = true, text_given = false;
  std::string text;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--batch=", 0) == 0) batch = bench::int_arg("bench_gpt2_cuda", a, 8, 1, 1 << 16);
    else if (a.rfind("--steps=", 0) == 0) steps = static_cast<int>(bench::int_arg("bench_gpt2_cuda", a, 8, 1, 1 << 20));
    else if (a.rfind("--warmup=", 0) == 0) warmup = static_cast<int>(bench::int_arg("bench_gpt2_cuda", a, 9, 0, 1 << 20));
    else if (a == "--f32") amp = false;
    else if (a.rfind("--text=", 0) == 0) text = a.substr(7), text_given = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: %s\n", kUsage);
      return 0;
    } else {
      std::fprintf(stderr, "bench_gpt2_cuda: unknown argument %s; usage: %s\n", a.c_str(), kUsage);
      return 2;
    }
  }
  std::vector<std::int32_t> bytes;  // --text: the file's bytes
  if (text_given) {
    std::error_code ec;
    if (text.empty() || !std::filesystem::is_regular_file(text, ec)) {
      std::fprintf(stderr, "bench_gpt2_cuda: --text=%s is not a readable file; give a text file's path\n", text.c_str());
      return 2;
    }
    std::ifstream in(text, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "bench_gpt2_cuda: --text=%s cannot be opened; give a readable text file\n", text.c_str());
      return 2;
    }
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    for (auto& b : bytes) b &= 0xff;  // the chars' bytes, unsigned
    if (bytes.size() <= 2 * 1024 + 2) {
      std::fprintf(stderr, "bench_gpt2_cuda: --text=%s has %zu bytes; it needs more than 2050\n", text.c_str(), bytes.size());
      return 2;
    }
    warmup = 0;  // the curve from the first step
  }
  const gpt::Shape shape{.vocab = text.empty() ? 50257 : 256, .context = 1024, .layers = 12, .heads = 12, .dim = 768};
  epl::device::Cuda gpu;
  epl::Config cfg;
  cfg.set(epl::keys::amp_level, amp ? "O1" : "");
  epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<epl::Amp<epl::amp::BF16>>, epl::nn::SoftmaxCrossEntropy, epl::device::Cuda>
      trainer(gpu, cfg, gpt::make_gpt(shape), epl::optim::AdamW({.lr = 6e-4, .weight_decay = 0.1}), {.seed = 1, .clip_norm = 1.0});
  std::vector<std::int32_t> tokens(1 << 22);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 50257);
  const auto ds = epl::data::TokenDataset::from_tokens(tokens, 50257);
  epl::data::WindowLoader loader(ds, shape.context, batch, 11);
  std::vector<double> secs, losses;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    auto b = loader.next(gpu);
    if (!bytes.empty()) {  // consecutive windows of the text, wrapping around
      const std::int64_t t = shape.context, span = static_cast<std::int64_t>(bytes.size()) - t - 1;
      std::vector<std::int32_t> x(static_cast<std::size_t>(batch * t)), y(x.size());
      for (std::int64_t i = 0; i < batch; ++i) {
        const std::int64_t start = ((s * batch + i) * t) % span;
        for (std::int64_t j = 0; j < t; ++j) {
          x[static_cast<std::size_t>(i * t + j)] = bytes[static_cast<std::size_t>(start + j)];
          y[static_cast<std::size_t>(i * t + j)] = bytes[static_cast<std::size_t>(start + j + 1)];
        }
      }
      gpu.upload(x.data(), b.inputs);
      gpu.upload(y.data(), b.targets);
    }
    gpu.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    loss = trainer.step(b);  // reads the loss back: the step's work has finished
    if (s >= warmup) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    losses.push_back(loss);
  }
  const double step = bench::median(secs);
  std::int64_t params = 0;
  epl::nn::for_each_parameter(trainer.model(), [&](epl::nn::Parameter& p) { params += p.value.numel(); });
  std::string curve;  // --text: every step's loss
  if (!text.empty()) {
    curve = ", \"text\": \"" + json_escaped(text) + "\", \"losses\": [";
    for (std::size_t i = 0; i < losses.size(); ++i) curve += (i ? ", " : "") + std::to_string(losses[i]);
    curve += "]";
  }
  std::printf("{\"impl\": \"epl%s\", \"batch\": %lld, \"context\": %lld, \"params\": %lld, \"step_ms\": %.2f, \"tokens_per_s\": %.0f, "
              "\"peak_gib\": %.2f, \"loss\": %.4f%s}\n",
              amp ? " amp bf16" : " f32", static_cast<long long>(batch), static_cast<long long>(shape.context),
              static_cast<long long>(params), step * 1e3, static_cast<double>(batch * shape.context) / step,
              static_cast<double>(epl::memory_stats(gpu.id()).total_peak) / (1 << 30), loss, curve.c_str());
  return 0;
}
}  // namespace
