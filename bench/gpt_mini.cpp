// Training throughput of gpt-mini (vocab 4096, context 256, 6 layers, 6 heads, width 384,
// global batch 8, fp32, AdamW) on random tokens, on one device, data parallel over thread ranks,
// or pipelined. Prints one JSON line:
//   bench_gpt_mini [--threads=N] [--ranks=R] [--steps=N] [--warmup=N]
//                  [--stages=S --micro=M --schedule=PreferBackward] [--amp]
// --amp trains with mixed precision (amp.level O1, epl::Amp<epl::amp::BF16>): every GEMM's
// operands rounded to bf16, f32 master weights, multiplied on the kernel epl chooses for this CPU
// or on --bf16_kernel=rounded-f32|avx512-bf16|amx.
// With R > 1, each rank has N threads and 8/R of the batch; "overlap" is the median fraction of
// gradient all-reduce time hidden behind the backward pass. With S > 1 the model is cut into S
// stages (auto.auto_parallel) over the R ranks (R / S replicas), M micro-batches a step;
// "peak_mib" is the largest rank's peak memory, "peak_mib_ranks" every rank's.
// "limit_tokens_per_s" is the physical limit: the tokens/s of gpt::gemm_flops_per_token's work at
// the peak rate of the instruction the run multiplies with (FMA, or AMP's bf16 kernel's) on all
// its threads, that peak timed before and after the steps (the larger taken); everything but the
// GEMMs counted as free. On a loaded machine both timings can come out low, and a run can pass it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "../examples/gpt/gpt.hpp"
#include "common.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "peak.hpp"

#ifndef BENCH_IMPL
#define BENCH_IMPL "epl"
#endif

namespace {
const gpt::Shape kShape{.vocab = 4096, .context = 256, .layers = 6, .heads = 6, .dim = 384};
constexpr std::int64_t kBatch = 8;
epl::data::TokenDataset random_tokens() {
  std::vector<std::int32_t> tokens(1 << 20);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 4096);
  return epl::data::TokenDataset::from_tokens(tokens, 4096);
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
// Runs warmup + steps with trainer and loader; returns the timed step seconds (and overlaps).
template <class T, class L, class Sync>
std::vector<double> run(T& trainer, L& loader, const epl::device::Cpu& cpu, int warmup, int steps, double& loss, Sync&& sync,
                        std::vector<double>* overlaps = nullptr) {
  std::vector<double> secs;
  for (int s = 0; s < warmup + steps; ++s) {
    auto b = loader.next(cpu);
    sync();
    auto t0 = std::chrono::steady_clock::now();
    loss = trainer.step(b);
    if (s >= warmup) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if constexpr (requires { trainer.last_overlap(); })
      if (overlaps && s >= warmup) overlaps->push_back(trainer.last_overlap());
  }
  return secs;
}
}  // namespace

int main(int argc, char** argv) try {
  int threads = 1, ranks = 1, steps = 6, warmup = 2, stages = 1, micro = 1;
  std::string schedule = "PreferBackward";
  bool amp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto arg = [&](const char* flag, int lo, int hi) {  // --flag=N, N from lo to hi, else a message and exit 2
      return static_cast<int>(bench::int_arg("bench_gpt_mini", a, std::string(flag).size(), lo, hi));
    };
    if (a.rfind("--stages=", 0) == 0) stages = arg("--stages=", 1, 64);
    else if (a.rfind("--micro=", 0) == 0) micro = arg("--micro=", 1, 4096);
    else if (a.rfind("--schedule=", 0) == 0) schedule = a.substr(11);
    else if (a.rfind("--threads=", 0) == 0) threads = arg("--threads=", 1, 1024);
    else if (a.rfind("--ranks=", 0) == 0) ranks = arg("--ranks=", 1, 64);
    else if (a.rfind("--steps=", 0) == 0) steps = arg("--steps=", 1, 1000000);
    else if (a.rfind("--warmup=", 0) == 0) warmup = arg("--warmup=", 0, 1000000);
    else if (a == "--amp") amp = true;
    else if (a.rfind("--bf16_kernel=", 0) == 0) {
      using K = epl::device::CpuBf16Kernel;
      const std::string k = a.substr(14);
      if (k != "amx" && k != "avx512-bf16" && k != "rounded-f32") {
        std::fprintf(stderr, "bench_gpt_mini: --bf16_kernel=%s: choose amx, avx512-bf16 or rounded-f32\n", k.c_str());
        return 2;
      }
      epl::device::Cpu::use_bf16_kernel(k == "amx" ? K::kAmx : k == "avx512-bf16" ? K::kAvx512Bf16 : K::kRoundedF32);
    } else {
      std::fprintf(stderr, "bench_gpt_mini: unknown argument %s; use --threads=N --ranks=R --steps=N --warmup=N --amp "
                           "--bf16_kernel=K --stages=S --micro=M --schedule=NAME\n", a.c_str());
      return 2;
    }
  }
  // the peak of the instruction the run multiplies with, timed before the steps and after them:
  // the larger is the limit (a neighbour's load makes a timing low, never high)
  auto peak_kind = [&] { return amp ? bench::peak_of(epl::device::Cpu::bf16_kernel()) : bench::Peak::kFma; };
  double peak_gflops = bench::peak_gflops(ranks * threads, peak_kind());
  auto ds = random_tokens();
  double loss = 0, step_s = 0, overlap = -1;
  std::int64_t params = 0;
  double peak = 0;
  std::vector<double> peaks(static_cast<std::size_t>(ranks));
  epl::Config cfg;
  cfg.set(epl::keys::num_micro_batch, micro);
  cfg.set(epl::keys::amp_level, amp ? "O1" : "");
  if (stages > 1) cfg.set(epl::keys::num_stages, stages).set(epl::keys::auto_parallel, true).set(epl::keys::pipeline_strategy, schedule);
  if (ranks == 1) {
    epl::device::Cpu cpu(0, threads);
    epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<epl::Amp<epl::amp::BF16>>> trainer(cpu, cfg, gpt::make_gpt(kShape),
                                                                                          epl::optim::AdamW({.lr = 1e-4}));
    epl::data::WindowLoader loader(ds, kShape.context, kBatch, 3);
    step_s = median(run(trainer, loader, cpu, warmup, steps, loss, [] {}));
    params = epl::nn::parameter_count(trainer.model());
    peak = peaks[0] = static_cast<double>(epl::memory_stats(cpu.id()).total_peak);
  } else {
    epl::comm::run_threads(ranks, [&](epl::comm::ThreadCommunicator& c) {
      epl::Context ctx(c, c.rank(), threads);
      const auto& cpu = ctx.cpu();
      epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<epl::Amp<epl::amp::BF16>>> trainer(ctx, cfg, gpt::make_gpt(kShape), epl::optim::AdamW({.lr = 1e-4}));
      epl::data::WindowLoader loader(ds, kShape.context, kBatch, 3, trainer.data_shard());
      std::vector<double> overlaps;
      double l = 0;
      auto secs = run(trainer, loader, cpu, warmup, steps, l, [&] { c.barrier(); }, &overlaps);
      peaks[static_cast<std::size_t>(c.rank())] = static_cast<double>(epl::memory_stats(cpu.id()).total_peak);
      if (c.rank() == 0) {
        step_s = median(secs);
        overlap = median(overlaps);
        loss = l;
        params = epl::nn::parameter_count(trainer.model());
      }
    }, {.threads_per_rank = threads, .report = false});  // main prints the error once
    peak = *std::max_element(peaks.begin(), peaks.end());
  }
  const double tps = static_cast<double>(kBatch * kShape.context) / step_s;
  peak_gflops = std::max(peak_gflops, bench::peak_gflops(ranks * threads, peak_kind()));
  const double limit = peak_gflops * 1e9 / gpt::gemm_flops_per_token(kShape);
  std::string impl = ranks == 1 ? std::string(BENCH_IMPL) + (amp ? std::string(" amp bf16 ") + epl::device::name(epl::device::Cpu::bf16_kernel()) : "") : std::string(BENCH_IMPL) + " dp " + std::to_string(ranks) + "x" + std::to_string(threads);
  if (stages > 1)
    impl = std::string(BENCH_IMPL) + " pp " + std::to_string(stages) + (ranks > stages ? "x dp " + std::to_string(ranks / stages) : "") +
           " " + schedule + " m" + std::to_string(micro);
  std::string per_rank;
  for (double p : peaks) per_rank += (per_rank.empty() ? "" : ", ") + std::to_string(p / 1048576.0);
  std::printf("{\"impl\": \"%s\", \"threads\": %d, \"ranks\": %d, \"params\": %lld, \"tokens_per_s\": %.1f, \"gflops\": %.1f, "
              "\"step_s\": %.4f, \"loss\": %.4f, \"peak_mib\": %.1f, \"peak_mib_ranks\": [%s], \"overlap\": %.3f, \"limit_tokens_per_s\": %.1f}\n",
              impl.c_str(), threads, ranks, static_cast<long long>(params), tps, tps * gpt::flops_per_token(kShape, params) / 1e9, step_s,
              loss, peak / 1048576.0, per_rank.c_str(), overlap, limit);
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt_mini: %s\n", e.what());
  return 2;
}
