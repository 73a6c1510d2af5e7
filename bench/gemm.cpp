// SGEMM GFLOP/s of the CPU backend against the machine's peak and against Eigen, in one process.
// Each case alternates three timings seven times: epl's gemm (its AVX-512 kernel), Eigen's own
// product on the same threads, and a register-resident FMA loop on every thread (the physical
// limit of the vector units). The medians are reported, and each GEMM's share of the peak is
// the median of its ratio to the peak timed beside it: this machine's speed drifts by tens of
// percent within a minute, so a peak measured once is not a fair denominator. One JSON line.
// On an AVX512-BF16 target the same cases also time the GEMM AMP runs (operands rounded to bf16,
// VDPBF16PS, f32 accumulation) against a VDPBF16PS loop's peak, timed beside it the same way.
//   bench_gemm [--threads=N]
#include <immintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <epl/epl.hpp>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// One thread's throughput of `op` on 12 independent accumulator chains (enough to hide its
// latency), each instruction worth `flop` floating-point operations.
template <class V, class Op>
double chains_gflops(long iters, V zero, Op op, double flop) {
  V acc[12];
  for (auto& a : acc) a = zero;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i)
    for (auto& a : acc) a = op(a);
  const double s = seconds_since(t0);
  volatile float sink = 0;
  for (auto& a : acc) sink = sink + reinterpret_cast<float*>(&a)[0];
  return 12.0 * flop * static_cast<double>(iters) / s / 1e9;
}
// FMA: 16 (AVX-512) or 8 lanes of fp32, 2 FLOP each.
double fma_loop_gflops(long iters) {
#if defined(__AVX512F__)
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  return chains_gflops(iters, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_fmadd_ps(a, x, y); }, 16 * 2.0);
#else
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  return chains_gflops(iters, _mm256_setzero_ps(), [&](__m256 a) { return _mm256_fmadd_ps(a, x, y); }, 8 * 2.0);
#endif
}
// VDPBF16PS: 16 lanes, each two products and two adds.
double dpbf16_loop_gflops(long iters) {
#if defined(__AVX512BF16__)
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(1e-3f));
  return chains_gflops(iters, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_dpbf16_ps(a, x, x); }, 16 * 4.0);
#else
  (void)iters;
  return 0;
#endif
}
// The FMA (or VDPBF16PS) loop on every thread at once (the machine's peak for `threads` cores).
double peak_gflops(int threads, bool bf16 = false) {
  double total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : total)
#endif
  total += bf16 ? dpbf16_loop_gflops(5'000'000) : fma_loop_gflops(5'000'000);
  (void)threads;
  return total;
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--threads=", 0) == 0) threads = std::stoi(std::string(argv[i]).substr(10));
  epl::device::Cpu cpu(0, threads);
  Eigen::setNbThreads(threads);
  struct Case { std::int64_t m, n, k; bool ta, tb; const char* what; };
  const Case cases[] = {{1024, 1024, 1024, false, false, "square 1024"},
                        {2048, 1152, 384, false, true, "gpt-mini qkv forward (x W^T)"},
                        {2048, 384, 1536, false, false, "gpt-mini mlp dx (dy W)"},
                        {1536, 384, 2048, true, false, "gpt-mini mlp dW (dy^T x)"},
                        {2048, 4096, 384, false, true, "gpt-mini lm head"}};
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<double> peaks, bf16_peaks;
  constexpr bool bf16 = epl::detail::cpu::kNativeBF16Gemm;
  std::printf("{\"threads\": %d, \"cases\": [", threads);
  for (std::size_t c = 0; c < std::size(cases); ++c) {
    const auto& k = cases[c];
    auto a = cpu.zeros(k.ta ? epl::Shape{k.k, k.m} : epl::Shape{k.m, k.k}, epl::DType::kF32);
    auto b = cpu.zeros(k.tb ? epl::Shape{k.n, k.k} : epl::Shape{k.k, k.n}, epl::DType::kF32);
    auto out = cpu.zeros({k.m, k.n}, epl::DType::kF32);
    cpu.fill(a, 0.5);
    cpu.fill(b, 0.25);
    const Eigen::Map<const Mat> ea(a.data<float>(), a.dim(0), a.dim(1)), eb(b.data<float>(), b.dim(0), b.dim(1));
    Eigen::Map<Mat> ec(out.data<float>(), k.m, k.n);
    auto eigen = [&] {
      if (!k.ta && !k.tb) ec.noalias() = ea * eb;
      else if (!k.ta) ec.noalias() = ea * eb.transpose();
      else if (!k.tb) ec.noalias() = ea.transpose() * eb;
      else ec.noalias() = ea.transpose() * eb.transpose();
    };
    const double flop = 2.0 * static_cast<double>(k.m * k.n * k.k) / 1e9;
    std::vector<double> epl_gf, eigen_gf, epl_share, eigen_share, bf16_gf, bf16_share;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cpu.gemm(a, k.ta, b, k.tb, out);
      const double e = flop / seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      eigen();
      const double g = flop / seconds_since(t0);
      const double p = peak_gflops(threads);
      epl_gf.push_back(e);
      eigen_gf.push_back(g);
      epl_share.push_back(e / p);
      eigen_share.push_back(g / p);
      peaks.push_back(p);
      if (bf16) {
        t0 = std::chrono::steady_clock::now();
        cpu.gemm(a, k.ta, b, k.tb, out, 1, 0, epl::DType::kBF16);
        const double h = flop / seconds_since(t0);
        const double hp = peak_gflops(threads, true);
        bf16_gf.push_back(h);
        bf16_share.push_back(h / hp);
        bf16_peaks.push_back(hp);
      }
    }
    std::printf("%s{\"case\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"gflops\": %.1f, \"of_peak\": %.3f, "
                "\"eigen_gflops\": %.1f, \"eigen_of_peak\": %.3f",
                c ? ", " : "", k.what, (long long)k.m, (long long)k.n, (long long)k.k, median(epl_gf), median(epl_share),
                median(eigen_gf), median(eigen_share));
    if (bf16) std::printf(", \"bf16_gflops\": %.1f, \"bf16_of_peak\": %.3f", median(bf16_gf), median(bf16_share));
    std::printf("}");
  }
  std::printf("], \"peak_gflops\": %.1f", median(peaks));
  if (bf16) std::printf(", \"bf16_peak_gflops\": %.1f", median(bf16_peaks));
  std::printf("}\n");
}
