// Sequence parallelism (split.sequence_parallel) against plain tensor parallelism: the split GPT
// of examples/gpt (gpt::SplitGpt<2>: embedding and head by vocabulary, blocks by heads and Mlp
// columns) on 2 thread ranks, one thread each. Per mode: the median step time, the peak
// activation bytes of rank 0 in a step (the allocator's accounting), and the bytes rank 0 sends
// over the tensor axis in a step (the communicator's count); alternating rounds (tensor, sequence,
// tensor, ...). Prints a table and writes JSON.
//   bench_sequence_parallel [--rounds=5] [--steps=4] [--context=256] [--batch=8] [--json=sequence_parallel.json]
#include <epl/epl.hpp>
#include <epl/comm/threads/run_threads.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "../examples/gpt/gpt.hpp"
#include "common.hpp"
#include "epl/core/files.hpp"

namespace {
using bench::cpu_name;
using bench::median;

struct Result {
  double seconds = 0;
  std::int64_t activation_peak = 0, sent = 0;
  double loss = 0;
};

Result run(bool sequence, const gpt::Shape& shape, std::int64_t batch, int steps, const epl::data::TokenDataset& ds) {
  Result out;
  std::vector<double> secs;
  epl::comm::run_threads(2, [&](epl::comm::ThreadCommunicator& c) {
    epl::Context ctx(c, c.rank(), 1);
    epl::Config cfg;
    cfg.set(epl::keys::sequence_parallel, sequence);
    epl::Trainer<gpt::SplitGpt<2>, epl::optim::AdamW> t(ctx, cfg, gpt::make_split_gpt<2>(shape), epl::optim::AdamW({.lr = 1e-3}),
                                                        {.seed = 1});
    epl::data::WindowLoader loader(ds, shape.context, batch, 3, t.data_shard());
    for (int s = 0; s < steps + 1; ++s) {
      const auto b = loader.next(ctx.cpu());
      const auto id = ctx.cpu().id();
      epl::memory_account(id).reset_peaks();
      const auto held = epl::memory_stats(id).current_of(epl::MemoryCategory::kActivations);
      const auto sent = t.mesh().tensor().stats().bytes_sent;
      c.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      const double loss = t.step(b);
      c.barrier();
      if (s > 0 && c.rank() == 0) {
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        out.activation_peak = epl::memory_stats(id).peak_of(epl::MemoryCategory::kActivations) - held;
        out.sent = t.mesh().tensor().stats().bytes_sent - sent;
        out.loss = loss;
      }
    }
  }, {.threads_per_rank = 1, .report = false});  // main prints the error once
  out.seconds = median(secs);
  return out;
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> rounds{"rounds", 5, "alternating rounds (each: both modes once)", {.min = 1, .max = 100}};
  const epl::Flag<std::int64_t> steps{"steps", 4, "timed steps per run (their median)", {.min = 1, .max = 1000}};
  const epl::Flag<std::int64_t> context{"context", 256, "tokens per window (the sequence)", {.min = 2, .max = 1 << 16}};
  const epl::Flag<std::int64_t> batch{"batch", 8, "windows per global batch", {.min = 1, .max = 1 << 16}};
  const epl::Flag<std::string> json{"json", "sequence_parallel.json", "where the results go"};
  const auto cfg = epl::Config::from_args(argc, argv, rounds, steps, context, batch, json);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("bench_sequence_parallel", "Sequence parallelism against tensor parallelism: time, activations, bytes.").c_str(),
               stdout);
    return 0;
  }
  const gpt::Shape shape{.vocab = 256, .context = cfg.get(context), .layers = 4, .heads = 4, .dim = 128};
  std::vector<std::int32_t> tokens(1 << 18);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 256);
  const auto ds = epl::data::TokenDataset::from_tokens(tokens, 256);
  const char* names[] = {"tensor parallel", "+ sequence parallel"};
  std::map<int, std::vector<double>> times;
  std::map<int, Result> last;
  for (std::int64_t r = 0; r < cfg.get(rounds); ++r)
    for (int m = 0; m < 2; ++m) {
      last[m] = run(m == 1, shape, cfg.get(batch), static_cast<int>(cfg.get(steps)), ds);
      times[m].push_back(last[m].seconds);
    }
  std::printf("bench_sequence_parallel: gpt::SplitGpt<2> (vocab 256, context %lld, 4 layers, dim 128, 4 heads), global batch %lld, "
              "2 thread ranks x 1 thread on %s; %lld alternating rounds, medians\n",
              static_cast<long long>(shape.context), static_cast<long long>(cfg.get(batch)), cpu_name().c_str(),
              static_cast<long long>(cfg.get(rounds)));
  std::printf("%-22s %10s %18s %18s %12s\n", "run", "step ms", "activations MiB", "tensor KiB sent", "last loss");
  std::ostringstream out;
  out << "{\"bench\": \"sequence_parallel\", \"cpu\": \"" << cpu_name() << "\", \"context\": " << shape.context
      << ", \"batch\": " << cfg.get(batch) << ", \"runs\": [";
  for (int m = 0; m < 2; ++m) {
    const Result& l = last[m];
    std::printf("%-22s %10.2f %18.2f %18.1f %12.6f\n", names[m], 1e3 * median(times[m]), l.activation_peak / 1048576.0, l.sent / 1024.0,
                l.loss);
    out << (m ? ", " : "") << "{\"run\": \"" << names[m] << "\", \"step_s\": " << median(times[m])
        << ", \"activation_peak_bytes\": " << l.activation_peak << ", \"tensor_bytes_sent\": " << l.sent << ", \"loss\": " << l.loss
        << ", \"rounds_s\": [";
    for (std::size_t i = 0; i < times[m].size(); ++i) out << (i ? ", " : "") << times[m][i];
    out << "]}";
  }
  out << "]}\n";
  epl::files::write_file(cfg.get(json), out.str(), "benchmark results file");
  std::printf("activations %.3fx, bytes %.4fx, time %.3fx of tensor parallelism's\n",
              static_cast<double>(last[1].activation_peak) / static_cast<double>(last[0].activation_peak),
              static_cast<double>(last[1].sent) / static_cast<double>(last[0].sent), median(times[1]) / median(times[0]));
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sequence_parallel: %s\n", e.what());
  return 2;
}
