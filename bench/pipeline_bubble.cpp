// The pipeline bubble, measured against theory. Each stage is made of synthetic layers that
// take a fixed time (a sleep: forward F, backward 2F, of which F is weight-gradient work that a
// zero-bubble schedule leaves for its W pass), so more thread ranks than cores do not distort the
// result. For each schedule, p in {2, 4} and m in {4, 8, 16}, a step's bubble is 1 - (time rank r
// spent in forward, backward and weight passes) / (the step's time), averaged over ranks and
// steps; theory is (p - 1) / (m + p - 1) for GPipe and 1F1B, (p - 1) / (v m + p - 1) for the
// interleaved schedule with v chunks per rank (Narayanan et al., 2021) and (p - 1) / (3m + p - 1)
// for ZB-H1 (Qi et al., 2024): strategy::theoretical_bubble of each schedule.
//   bench_pipeline_bubble [--forward_ms=2] [--steps=4] [--json=FILE] [--trace_dir=DIR]
// Prints a table; --json writes the rows; --trace_dir writes the p = 4, m = 8 runs' Chrome
// traces (tools/trace_svg.py draws them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "epl/comm/threads/run_threads.hpp"
#include "epl/core/files.hpp"
#include "epl/epl.hpp"

namespace {
namespace nn = epl::nn;

// A layer that takes a fixed time: forward sleeps f, backward 2f (f for the input gradient, f for
// its weight gradient, which nn::weight_gradient runs now or in a W pass); it passes its input
// through and holds one parameter (so the reducer and optimizer have work, as in a real stage).
struct Sleep {
  nn::Parameter w{epl::Shape{1}, nn::Init::zeros()};
  std::chrono::microseconds f{2000};
  template <class V> void visit(V&& v) { v("w", w); }
  template <class Ctx> epl::Tensor forward(Ctx& ctx, const epl::Tensor& x) {
    std::this_thread::sleep_for(f);
    epl::Tensor y = ctx.empty_like(x);
    ctx.device().copy(x, y);
    return y;
  }
  template <class Ctx> epl::Tensor backward(Ctx& ctx, const epl::Tensor& dy) {
    std::this_thread::sleep_for(f);
    nn::weight_gradient(ctx, [d = f] { std::this_thread::sleep_for(d); });
    epl::Tensor dx = ctx.empty_like(dy);
    ctx.device().copy(dy, dx);
    return dx;
  }
};

struct Row {
  std::string schedule;
  int p = 0, m = 0, v = 1;
  double measured = 0, theory = 0, step_ms = 0;
};

double theory(const std::string& schedule, int p, int m, int v) {
  return epl::strategy::theoretical_bubble(epl::strategy::schedule_named(schedule), p, m, v);
}

Row measure(const std::string& schedule, int p, int m, double forward_ms, int steps, const std::string& trace) {
  const int v = epl::strategy::schedule_named(schedule).virtual_stages ? 2 : 1;
  // 4 layers of equal cost per rank, each 1/4 of a stage's forward time (interleaved: each of
  // the rank's v chunks holds 4 / v of them)
  const int layers = 4 * p;
  const auto f = std::chrono::microseconds(static_cast<std::int64_t>(forward_ms * 1000 / 4));
  epl::Config cfg;
  cfg.set(epl::keys::num_stages, p).set(epl::keys::auto_parallel, true).set(epl::keys::pipeline_strategy, schedule);
  // the busy time comes from the trace's spans; a run not asked to keep its trace writes it to a
  // file of the temp folder, removed after (the trace key refuses /dev/null, a device)
  const std::string file = trace.empty() ? (std::filesystem::temp_directory_path() / ("epl_bubble_" + schedule + "_p" + std::to_string(p) +
                                                                                     "_m" + std::to_string(m) + "_" + std::to_string(::getpid()) + ".json")).string()
                                         : trace;
  cfg.set(epl::keys::num_micro_batch, m).set(epl::keys::trace, file);
  struct Removed {  // the temporary trace goes when the run ends, a throwing one too
    std::string file;
    ~Removed() {
      std::error_code ignored;
      if (!file.empty()) std::filesystem::remove(file, ignored);
    }
  } removed{trace.empty() ? file : std::string()};
  std::vector<double> bubbles, step_secs;
  std::mutex mutex;
  epl::comm::run_threads(p, [&](epl::comm::ThreadCommunicator& c) {
    epl::Context ctx(c, -1, 1);
    nn::Repeat<Sleep> model(layers, [&](std::int64_t) { return Sleep{nn::Parameter(epl::Shape{1}, nn::Init::zeros()), f}; });
    epl::Trainer<nn::Repeat<Sleep>, epl::optim::SGD> trainer(ctx, cfg, std::move(model), epl::optim::SGD({.lr = 1e-3}));
    const auto& cpu = ctx.cpu();
    epl::Tensor x = cpu.zeros({m, 4}, epl::DType::kF32), y = cpu.zeros({m}, epl::DType::kI32);
    for (int s = 0; s < steps + 1; ++s) {  // the first step warms up
      c.barrier();
      const std::size_t before = trainer.timeline()->spans().size();
      const auto t0 = std::chrono::steady_clock::now();
      (void)trainer.step({x, y});
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s == 0) continue;
      double busy = 0;
      const auto spans = trainer.timeline()->spans();
      for (std::size_t i = before; i < spans.size(); ++i)
        if (spans[i].category == "forward" || spans[i].category == "backward" || spans[i].category == "weight")
          busy += spans[i].duration_us * 1e-6;
      std::lock_guard lock(mutex);
      bubbles.push_back(1 - busy / secs);
      step_secs.push_back(secs);
    }
  }, {.threads_per_rank = 1, .report = false});  // main prints the error once
  Row r{schedule, p, m, v};
  for (double b : bubbles) r.measured += b / static_cast<double>(bubbles.size());
  std::sort(step_secs.begin(), step_secs.end());
  r.step_ms = step_secs[step_secs.size() / 2] * 1e3;
  r.theory = theory(schedule, p, m, v);
  return r;
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<double> forward_ms{"forward_ms", 2.0, "a stage's forward time per micro-batch (backward: twice)", {.min = 0.1, .max = 1000}};
  const epl::Flag<std::int64_t> steps{"steps", 4, "timed steps per configuration (after one warm-up step)", {.min = 1}};
  const epl::Flag<std::string> json{"json", "", "write the rows to this file"};
  const epl::Flag<std::string> trace_dir{"trace_dir", "", "write the p = 4, m = 8 runs' traces here"};
  auto cfg = epl::Config::from_args(argc, argv, forward_ms, steps, json, trace_dir);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("bench_pipeline_bubble", "The pipeline bubble of each schedule against theory.").c_str(), stdout);
    return 0;
  }
  std::vector<Row> rows;
  std::printf("%-15s %2s %3s %2s %10s %9s %9s %9s\n", "schedule", "p", "m", "v", "bubble", "theory", "ratio", "step ms");
  for (const auto& entry : epl::strategy::kSchedules)
    for (int p : {2, 4})
      for (int m : {4, 8, 16}) {
        const std::string schedule(entry.name);
        std::string trace;
        if (!cfg.get(trace_dir).empty() && p == 4 && m == 8) trace = cfg.get(trace_dir) + "/pipeline_" + schedule + ".json";
        Row r = measure(schedule, p, m, cfg.get(forward_ms), static_cast<int>(cfg.get(steps)), trace);
        std::printf("%-15s %2d %3d %2d %9.1f%% %8.1f%% %9.2f %9.1f\n", r.schedule.c_str(), r.p, r.m, r.v, 100 * r.measured,
                    100 * r.theory, r.measured / r.theory, r.step_ms);
        std::fflush(stdout);
        rows.push_back(r);
      }
  if (!cfg.get(json).empty()) {
    std::ostringstream out;
    out << "[\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      char line[256];
      std::snprintf(line, sizeof line,
                    "{\"schedule\": \"%s\", \"p\": %d, \"m\": %d, \"v\": %d, \"bubble\": %.4f, \"theory\": %.4f, \"step_ms\": %.2f}%s\n",
                    r.schedule.c_str(), r.p, r.m, r.v, r.measured, r.theory, r.step_ms, i + 1 < rows.size() ? "," : "");
      out << line;
    }
    out << "]\n";
    epl::files::write_file(cfg.get(json), out.str(), "benchmark results file");
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
