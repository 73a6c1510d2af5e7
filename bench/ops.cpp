// The CPU device's memory-bound operations at gpt-mini's shapes (batch 8, context 256, width
// 384, 6 heads, vocabulary 4096) against the memory limit of the core they run on (#39): each
// op's bytes a second beside a STREAM-like copy of as many bytes, timed in the same rounds.
//
// An op's bytes are the least it must move: each input read once and each output written once
// (the causal softmax reads the lower triangle of its scores, t (t + 1) / 2 a head, and writes
// the whole t x t of probabilities, zeros above the diagonal, since the next GEMM reads them).
// The copy of the same bytes (half read, half written) on the same threads (the faster of memcpy
// and an element-wise copy on the device's threads) is the op's limit:
// "of copy" is the op's bytes a second over the copy's. An op far below it spends its time
// computing (GELU's tanh, softmax's exp) or walks memory badly.
//
// Rounds alternate op, copy, op, copy ... (7 rounds after one that warms pages and caches);
// medians. A table on stderr, JSON on stdout (and in PATH with --json=PATH).
//   bench_ops [--threads=N] [--rounds=N] [--json=PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <epl/epl.hpp>

#include "common.hpp"

namespace {

struct Op {
  std::string name, shape;
  double bytes;                 // the least the op moves
  std::function<void()> run;
};

struct Row {
  std::string name, shape;
  double bytes, op_s, copy_s;
};
}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 7;
  std::FILE* json = nullptr;  // opened first: a path that cannot be written fails before the runs
  const char* usage = "bench_ops [--threads=N] [--rounds=N] [--json=PATH]";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) threads = static_cast<int>(bench::int_arg("bench_ops", a, 10, 1, 1024));
    else if (a.rfind("--rounds=", 0) == 0) rounds = static_cast<int>(bench::int_arg("bench_ops", a, 9, 1, 1000));
    else if (a.rfind("--json=", 0) == 0 && !json) {
      json = std::fopen(a.substr(7).c_str(), "w");
      if (!json) {
        std::fprintf(stderr, "bench_ops: cannot write %s\n", a.substr(7).c_str());
        return 2;
      }
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: %s\n", usage);
      return 0;
    } else {
      std::fprintf(stderr, "bench_ops: unknown argument %s; usage: %s\n", a.c_str(), usage);
      return 2;
    }
  }
  using epl::DType;
  using epl::Tensor;
  epl::device::Cpu cpu(0, threads);
  constexpr std::int64_t kBatch = 8, kContext = 256, kDim = 384, kHeads = 6, kVocab = 4096;
  constexpr std::int64_t kRows = kBatch * kContext, kHidden = 4 * kDim, kMaps = kBatch * kHeads;
  auto filled = [&](epl::Shape s, double lo, double hi) {
    Tensor t = cpu.empty(s, DType::kF32);
    auto* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(lo + (hi - lo) * static_cast<double>((i * 2654435761u) % 1000) / 1000);
    return t;
  };
  constexpr double f = 4;  // bytes of an f32

  // layer norm over [rows, width]
  Tensor x = filled({kRows, kDim}, -2, 2), gamma = filled({kDim}, 0.5, 1.5), beta = filled({kDim}, -0.1, 0.1);
  Tensor y = cpu.empty({kRows, kDim}, DType::kF32), mean = cpu.empty({kRows}, DType::kF32), rstd = cpu.empty({kRows}, DType::kF32);
  Tensor dy = filled({kRows, kDim}, -1, 1), dx = cpu.empty({kRows, kDim}, DType::kF32);
  Tensor dgamma = cpu.empty({kDim}, DType::kF32), dbeta = cpu.empty({kDim}, DType::kF32);
  // GELU over the MLP's hidden [rows, 4 width]
  Tensor h = filled({kRows, kHidden}, -3, 3), gh = cpu.empty({kRows, kHidden}, DType::kF32);
  Tensor dgh = filled({kRows, kHidden}, -1, 1), dh = cpu.empty({kRows, kHidden}, DType::kF32);
  // causal softmax over [batch heads, t, t]
  Tensor s = filled({kMaps, kContext, kContext}, -4, 4), p = cpu.empty({kMaps, kContext, kContext}, DType::kF32);
  Tensor dp = filled({kMaps, kContext, kContext}, -1, 1), ds = cpu.empty({kMaps, kContext, kContext}, DType::kF32);
  // cross-entropy over [rows, vocabulary]
  Tensor logits = filled({kRows, kVocab}, -5, 5), dlogits = cpu.empty({kRows, kVocab}, DType::kF32);
  Tensor targets = cpu.empty({kRows}, DType::kI64);
  for (std::int64_t i = 0; i < kRows; ++i) targets.data<std::int64_t>()[i] = (i * 7919) % kVocab;
  // AdamW over a parameter arena the size of gpt-mini's (about 14M)
  constexpr std::int64_t kParams = 14 << 20;
  Tensor w = filled({kParams}, -0.1, 0.1), g = filled({kParams}, -1e-3, 1e-3), m = cpu.zeros({kParams}, DType::kF32),
         v = cpu.zeros({kParams}, DType::kF32);
  std::int64_t step = 0;

  const double n_x = kRows * kDim, n_h = kRows * kHidden, n_logits = kRows * kVocab;
  const double lower = kMaps * kContext * (kContext + 1) / 2.0, whole = kMaps * kContext * kContext;
  const double scale = 0.125;
  volatile double sink = 0;
  std::vector<Op> ops = {
      {"layer_norm", "2048x384", f * 2 * n_x, [&] { cpu.layer_norm(x, gamma, beta, y, mean, rstd, 1e-5); }},
      {"layer_norm_backward", "2048x384", f * 3 * n_x,
       [&] { cpu.layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta); }},
      {"gelu", "2048x1536", f * 2 * n_h, [&] { cpu.gelu(h, gh); }},
      {"gelu_backward", "2048x1536", f * 3 * n_h, [&] { cpu.gelu_backward(h, dgh, dh); }},
      {"softmax_causal", "48x256x256", f * (lower + whole), [&] { cpu.softmax_causal(s, p, scale); }},
      {"softmax_causal_backward", "48x256x256", f * (2 * lower + whole), [&] { cpu.softmax_causal_backward(p, dp, ds, scale); }},
      {"cross_entropy", "2048x4096", f * n_logits, [&] { sink = sink + cpu.cross_entropy(logits, targets); }},
      {"cross_entropy_backward", "2048x4096", f * 2 * n_logits,
       [&] { cpu.cross_entropy_backward(logits, targets, dlogits, 1.0 / kRows); }},
      {"adamw_update", "14.7M", f * 7 * kParams,
       [&] { cpu.adamw_update(w, g, m, v, 1e-4, 0.9, 0.95, 1e-8, 0.1, ++step); }},
  };
  cpu.softmax_causal(s, p, scale);  // the backward reads real probabilities

  std::vector<Row> rows;
  for (auto& op : ops) {
    const auto n = static_cast<std::int64_t>(op.bytes / (2 * f));  // a copy of as many bytes
    Tensor from = filled({n}, 0, 1), to = cpu.empty({n}, DType::kF32);
    std::vector<double> t_op, t_copy;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms the pages and caches and is not kept
      const double a = bench::seconds(op.run);
      // the faster of memcpy (one thread) and a copy on the device's threads, as the ops run
      const double b = std::min(bench::seconds([&] { cpu.copy(from, to); }),
                                bench::seconds([&] { cpu.map(to, [](float e) { return e; }, from); }));
      if (r == 0) continue;
      t_op.push_back(a);
      t_copy.push_back(b);
    }
    rows.push_back({op.name, op.shape, op.bytes, bench::median(t_op), bench::median(t_copy)});
  }

  const std::string name = bench::cpu_name();
  std::fprintf(stderr, "memory-bound ops at gpt-mini's shapes, f32, %d thread(s), %s, medians of %d alternating rounds\n", threads,
               name.c_str(), rounds);
  std::fprintf(stderr, "%-26s %-11s %9s %9s %9s %9s %8s\n", "op", "shape", "MB", "ms", "GB/s", "copy GB/s", "of copy");
  std::string out = "{\"bench\":\"ops\",\"cpu\":\"" + name + "\",\"threads\":" + std::to_string(threads) + ",\"ops\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double gbs = r.bytes / r.op_s / 1e9, copy = r.bytes / r.copy_s / 1e9;
    std::fprintf(stderr, "%-26s %-11s %9.1f %9.3f %9.1f %9.1f %7.0f%%\n", r.name.c_str(), r.shape.c_str(), r.bytes / 1e6, r.op_s * 1e3,
                 gbs, copy, 100 * gbs / copy);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"op\":\"%s\",\"shape\":\"%s\",\"bytes\":%.0f,\"ms\":%.4f,\"gb_s\":%.2f,\"copy_gb_s\":%.2f}",
                  i ? "," : "", r.name.c_str(), r.shape.c_str(), r.bytes, r.op_s * 1e3, gbs, copy);
    out += buf;
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
  if (json) {
    std::fprintf(json, "%s\n", out.c_str());
    std::fclose(json);
  }
  return 0;
}
