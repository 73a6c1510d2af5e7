// The update phase of a mixed-precision, clipped step over a flat arena of f32 parameters, the
// two ways epl has done it: (A) AMP's unscale and the clip coefficient each a pass that rewrites
// the gradients, then AdamW; (B) AdamW reading each gradient times their product (#36). Both are
// memory-bound: A moves 44 bytes an element (two read-write passes over g, then AdamW's reads of
// p, g, m, v and writes of p, m, v), B 28. The physical limit beside them is a copy of the arena
// on the same threads (8 bytes an element), timed in the same rounds. Rounds alternate A, B, copy
// seven times; the medians are reported. A table on stderr, one JSON line on stdout.
//   bench_update [--elements=N] [--threads=N]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <epl/epl.hpp>

#include "common.hpp"


int main(int argc, char** argv) {
  std::int64_t n = 16 << 20;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--elements=", 0) == 0) n = bench::int_arg("bench_update", a, 11, 1, std::int64_t{1} << 34);
    else if (a.rfind("--threads=", 0) == 0) threads = static_cast<int>(bench::int_arg("bench_update", a, 10, 1, 1024));
    else {
      std::fprintf(stderr, "bench_update: unknown argument %s; use --elements=N --threads=N\n", a.c_str());
      return 2;
    }
  }
  epl::device::Cpu cpu(0, threads);
  using epl::DType;
  auto filled = [&](double v) {
    epl::Tensor t = cpu.empty({n}, DType::kF32);
    cpu.fill(t, v);
    return t;
  };
  epl::Tensor p = filled(0.5), g = filled(3e3), m = filled(0), v = filled(0), copy = filled(0);
  const double unscale = 1.0 / 65536, clip = 0.7;
  std::vector<double> a, b, c;
  std::int64_t step = 0;
  for (int round = 0; round < 8; ++round) {  // round 0 warms the pages and caches and is not kept
    const double ta = bench::seconds([&] {
      cpu.scale(g, unscale);
      cpu.scale(g, clip);
      cpu.adamw_update(p, g, m, v, 1e-4, 0.9, 0.95, 1e-8, 0.1, ++step);
    });
    cpu.scale(g, 1 / (unscale * clip));  // the next rounds read the same gradients
    const double tb = bench::seconds([&] { cpu.adamw_update(p, g, m, v, 1e-4, 0.9, 0.95, 1e-8, 0.1, ++step, unscale * clip); });
    const double tc = bench::seconds([&] { cpu.copy(p, copy); });
    if (round == 0) continue;
    a.push_back(ta);
    b.push_back(tb);
    c.push_back(tc);
  }
  const double ma = bench::median(a), mb = bench::median(b), mc = bench::median(c);
  const double gb = static_cast<double>(n) * 4 / 1e9;  // one f32 arena in GB
  std::fprintf(stderr, "update phase of an AMP + clipped AdamW step, %lld f32 elements, %d thread(s), %s\n", static_cast<long long>(n),
               threads, bench::cpu_name().c_str());
  std::fprintf(stderr, "%-44s %10s %10s\n", "", "ms", "GB/s");
  std::fprintf(stderr, "%-44s %10.2f %10.1f\n", "A: unscale pass, clip pass, AdamW", ma * 1e3, 11 * gb / ma);
  std::fprintf(stderr, "%-44s %10.2f %10.1f\n", "B: AdamW reading g x factor (epl now)", mb * 1e3, 7 * gb / mb);
  std::fprintf(stderr, "%-44s %10.2f %10.1f\n", "copy of the arena (the memory limit)", mc * 1e3, 2 * gb / mc);
  std::fprintf(stderr, "B is %.2fx A; B at %.0f%% of the copy's bandwidth\n", ma / mb, 100 * (7 * gb / mb) / (2 * gb / mc));
  std::printf("{\"bench\":\"update\",\"cpu\":\"%s\",\"threads\":%d,\"elements\":%lld,\"separate_ms\":%.3f,\"fused_ms\":%.3f,"
              "\"copy_ms\":%.3f,\"speedup\":%.3f}\n",
              bench::cpu_name().c_str(), threads, static_cast<long long>(n), ma * 1e3, mb * 1e3, mc * 1e3, ma / mb);
  return 0;
}
