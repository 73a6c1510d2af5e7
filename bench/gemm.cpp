// SGEMM GFLOP/s of the CPU backend (Eigen) against the machine's peak, measured here with a
// register-resident FMA loop (the physical limit of one core's vector units). One JSON line.
//   bench_gemm [--threads=N]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <epl/epl.hpp>

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// 12 independent accumulator chains hide FMA latency; 16 (AVX-512) or 8 lanes of fp32, 2 FLOP each.
double fma_peak_gflops() {
#if defined(__AVX512F__)
  using V = __m512;
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm512_set1_ps(x); };
  constexpr int lanes = 16;
#else
  using V = __m256;
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm256_set1_ps(x); };
  constexpr int lanes = 8;
#endif
  V acc[12];
  for (auto& a : acc) a = set(0.f);
  const V x = set(0.999999f), y = set(1e-7f);
  const long iters = 50'000'000;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i)
    for (auto& a : acc) a = fma(a, x, y);
  double s = seconds_since(t0);
  float sink = 0;
  for (auto& a : acc) sink += reinterpret_cast<float*>(&a)[0];
  std::fprintf(stderr, "(sink %g)\n", sink);
  return 12.0 * lanes * 2.0 * iters / s / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--threads=", 0) == 0) threads = std::stoi(std::string(argv[i]).substr(10));
  epl::device::Cpu cpu(0, threads);
  const double peak = fma_peak_gflops() * threads;
  struct Case { std::int64_t m, n, k; bool ta, tb; const char* what; };
  const Case cases[] = {{1024, 1024, 1024, false, false, "square 1024"},
                        {2048, 1152, 384, false, true, "gpt-mini qkv forward (x W^T)"},
                        {2048, 384, 1536, false, false, "gpt-mini mlp dx (dy W)"},
                        {1536, 384, 2048, true, false, "gpt-mini mlp dW (dy^T x)"},
                        {2048, 4096, 384, false, true, "gpt-mini lm head"}};
#ifndef BENCH_IMPL
#define BENCH_IMPL "epl"
#endif
  std::printf("{\"impl\": \"" BENCH_IMPL "\", \"threads\": %d, \"peak_gflops\": %.1f, \"cases\": [", threads, peak);
  for (std::size_t c = 0; c < std::size(cases); ++c) {
    const auto& k = cases[c];
    auto a = cpu.zeros(k.ta ? epl::Shape{k.k, k.m} : epl::Shape{k.m, k.k}, epl::DType::kF32);
    auto b = cpu.zeros(k.tb ? epl::Shape{k.n, k.k} : epl::Shape{k.k, k.n}, epl::DType::kF32);
    auto out = cpu.zeros({k.m, k.n}, epl::DType::kF32);
    cpu.fill(a, 0.5);
    cpu.fill(b, 0.25);
    std::vector<double> times;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cpu.gemm(a, k.ta, b, k.tb, out);
      times.push_back(seconds_since(t0));
    }
    std::sort(times.begin(), times.end());
    double gf = 2.0 * k.m * k.n * k.k / times[3] / 1e9;
    std::printf("%s{\"case\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"gflops\": %.1f, \"of_peak\": %.3f}", c ? ", " : "",
                k.what, (long long)k.m, (long long)k.n, (long long)k.k, gf, gf / peak);
  }
  std::printf("]}\n");
}
