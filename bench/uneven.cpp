// Uneven devices (cluster.rank_speeds = measure) against the even split: 2 thread ranks, one
// thread each, rank 1's GEMMs made --slow times slower (testing::Throttled), training a GPT of
// examples/gpt's kind data parallel and as a 2-stage pipeline. Alternating rounds (even,
// balanced, even, balanced, ...), median step time of each; prints a table and writes JSON.
//   bench_uneven [--slow=2] [--rounds=5] [--steps=4] [--json=uneven.json]
#include <epl/epl.hpp>
#include <epl/comm/threads/run_threads.hpp>
#include <epl/testing/throttled.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "../examples/gpt/gpt.hpp"
#include "common.hpp"
#include "epl/core/files.hpp"

namespace {
using Device = epl::testing::Throttled<epl::device::Cpu>;
const gpt::Shape kShape{.vocab = 256, .context = 64, .layers = 4, .heads = 4, .dim = 128};
constexpr std::int64_t kBatch = 24;

using bench::cpu_name;
using bench::median;

struct Result {
  double seconds = 0;
  std::vector<std::int64_t> rows;
  std::vector<std::size_t> units;
};

// One run on 2 thread ranks: warm-up, then `steps` timed steps; the median step, each rank's rows and units.
Result run(const epl::Config& cfg, double slow, int steps, const epl::data::TokenDataset& ds) {
  Result out;
  out.rows.resize(2);
  out.units.resize(2);
  std::vector<double> secs;
  epl::comm::run_threads(2, [&](epl::comm::ThreadCommunicator& c) {
    epl::Context ctx(c, c.rank(), 1);
    const Device device(c.rank() == 1 ? slow : 1.0, c.rank(), 1);
    epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<>, epl::nn::SoftmaxCrossEntropy, Device> t(
        ctx, device, cfg, gpt::make_gpt(kShape), epl::optim::AdamW({.lr = 1e-3}), {.seed = 1});
    epl::data::WindowLoader loader(ds, kShape.context, kBatch, 3, t.data_shard());
    for (int s = 0; s < steps + 1; ++s) {
      const auto b = loader.next(device);
      c.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      t.step(b);
      c.barrier();
      if (s > 0 && c.rank() == 0) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      out.rows[static_cast<std::size_t>(c.rank())] = b.inputs.dim(0);
    }
    std::size_t units = 0;
    for (const auto& chunk : t.local_chunks()) units += chunk.units().size();
    out.units[static_cast<std::size_t>(c.rank())] = units;
  }, {.threads_per_rank = 1, .report = false});  // main prints the error once
  out.seconds = median(secs);
  return out;
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<double> slow{"slow", 2.0, "how many times slower rank 1's GEMMs run", {.min = 1, .max = 100}};
  const epl::Flag<std::int64_t> rounds{"rounds", 5, "alternating rounds (each: every mode once)", {.min = 1, .max = 100}};
  const epl::Flag<std::int64_t> steps{"steps", 4, "timed steps per run (their median)", {.min = 1, .max = 1000}};
  const epl::Flag<std::string> json{"json", "uneven.json", "where the results go"};
  const auto cfg = epl::Config::from_args(argc, argv, slow, rounds, steps, json);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("bench_uneven", "Uneven devices: batch shares and stage cuts by measured speed against the even split.").c_str(), stdout);
    return 0;
  }
  std::vector<std::int32_t> tokens(1 << 18);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * 256);
  const auto ds = epl::data::TokenDataset::from_tokens(tokens, 256);
  auto mode = [](bool pipeline, bool balanced) {
    epl::Config c;
    if (pipeline) c.set("pipeline.num_stages", 2).set("auto.auto_parallel", true).set("pipeline.num_micro_batch", 4);
    if (balanced) c.set("cluster.rank_speeds", "measure");
    return c;
  };
  const char* names[] = {"data parallel, even", "data parallel, by speed", "pipeline, even", "pipeline, by speed"};
  std::map<int, std::vector<double>> times;
  std::map<int, Result> last;
  for (std::int64_t r = 0; r < cfg.get(rounds); ++r)
    for (int m = 0; m < 4; ++m) {
      last[m] = run(mode(m >= 2, m % 2 == 1), cfg.get(slow), static_cast<int>(cfg.get(steps)), ds);
      times[m].push_back(last[m].seconds);
    }
  std::printf("bench_uneven: gpt (vocab 256, context 64, 4 layers, dim 128), global batch %lld, 2 thread ranks x 1 thread on %s, "
              "rank 1's GEMMs %.1fx slower; %lld alternating rounds, medians\n",
              static_cast<long long>(kBatch), cpu_name().c_str(), cfg.get(slow), static_cast<long long>(cfg.get(rounds)));
  std::printf("%-26s %10s %12s %12s %14s\n", "run", "step ms", "rows r0/r1", "units r0/r1", "vs even");
  std::ostringstream out;
  out << "{\"bench\": \"uneven\", \"cpu\": \"" << cpu_name() << "\", \"slow\": " << cfg.get(slow) << ", \"runs\": [";
  for (int m = 0; m < 4; ++m) {
    const double med = median(times[m]), even = median(times[m - m % 2]);
    std::printf("%-26s %10.2f %7lld/%-4lld %7zu/%-4zu %13.2fx\n", names[m], 1e3 * med, static_cast<long long>(last[m].rows[0]),
                static_cast<long long>(last[m].rows[1]), last[m].units[0], last[m].units[1], even / med);
    out << (m ? ", " : "") << "{\"run\": \"" << names[m] << "\", \"step_s\": " << med << ", \"speedup_over_even\": " << even / med
        << ", \"rows\": [" << last[m].rows[0] << ", " << last[m].rows[1] << "], \"units\": [" << last[m].units[0] << ", "
        << last[m].units[1] << "], \"rounds_s\": [";
    for (std::size_t i = 0; i < times[m].size(); ++i) out << (i ? ", " : "") << times[m][i];
    out << "]}";
  }
  out << "]}\n";
  epl::files::write_file(cfg.get(json), out.str(), "benchmark results file");
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_uneven: %s\n", e.what());
  return 2;
}
