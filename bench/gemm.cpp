// SGEMM GFLOP/s of the CPU backend against the machine's peak and against Eigen, in one process.
// Each case alternates its timings seven times: epl's f32 gemm (its AVX-512 or AVX2 kernel, as the
// build's -march gives; Eigen's without either), Eigen's own
// product on the same threads, a register-resident FMA loop on every thread (the physical limit
// of the vector units), then AMP's bf16 GEMM on each kernel this CPU runs (rounded-f32: FMA on
// operands rounded as packed; avx512-bf16: VDPBF16PS; amx: TDPBF16PS tiles), each beside its own
// instruction's peak loop. The medians are reported, and each GEMM's share of its peak is the
// median of its ratio to the peak timed beside it: this machine's speed drifts by tens of
// percent within a minute, so a peak measured once is not a fair denominator. A table on stderr,
// one JSON line on stdout.
//   bench_gemm [--threads=N]
//   bench_gemm --parts   where one thread's GEMM spends its time (#39): the build's f32 register
//                        kernel alone, its panels resident in L1, against the FMA peak; then per
//                        shape and format (f32; bf16 where AVX512-BF16 is compiled; AMX where it runs) the shares of
//                        packing B, packing A and the kernels (sgemm::Parts)
//   bench_gemm --attention [--threads=N] [--amp]   one gpt-mini attention layer's six GEMMs, dense
//                        against skipping the causal triangle (device::Triangle); then the layer's
//                        whole attention, unfused against a head at a time (attention_heads);
//                        --amp: in bf16, on the kernel AMP chooses
#include <Eigen/Core>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <epl/epl.hpp>
#include <epl/device/cpu/bf16_kernel.hpp>

#include "common.hpp"
#include "peak.hpp"

namespace {
using K = epl::device::CpuBf16Kernel;
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
using bench::Peak, bench::peak_gflops, bench::peak_of;
struct Series {
  std::vector<double> gflops, share;
  void add(double g, double peak) {
    gflops.push_back(g);
    share.push_back(g / peak);
  }
};
struct Case { std::int64_t m, n, k; bool ta, tb; const char* what; };
constexpr Case kCases[] = {{1024, 1024, 1024, false, false, "square 1024"},
                           {2048, 1152, 384, false, true, "gpt-mini qkv forward (x W^T)"},
                           {2048, 384, 1536, false, false, "gpt-mini mlp dx (dy W)"},
                           {1536, 384, 2048, true, false, "gpt-mini mlp dW (dy^T x)"},
                           {2048, 4096, 384, false, true, "gpt-mini lm head"}};

#if EPL_SGEMM_F32
#if EPL_SGEMM_F32 == 512
using F32Format = epl::detail::cpu::sgemm::F32<>;
#else
using F32Format = epl::detail::cpu::sgemm::avx2::F32<>;
#endif
// The register kernel alone: `steps` k a call on the same panels (resident in L1), C one tile.
double kernel_gflops(std::int64_t steps) {
  using F = F32Format;
  std::vector<float> a(static_cast<std::size_t>(F::kMR * steps + 16), 0.5f), b(static_cast<std::size_t>(F::kNR * steps + 16), 0.25f),
      c(F::kMR * F::kNR);
  float* bp = b.data() + (64 - reinterpret_cast<std::uintptr_t>(b.data()) % 64) / 4 % 16;  // the kernel loads B aligned
  const long calls = 12'800'000 / steps;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) F::kernel<float>(steps, a.data(), bp, c.data(), F::kNR, F::kMR, F::kNR, 1.f, i > 0 ? epl::detail::cpu::sgemm::Store::kAdd : epl::detail::cpu::sgemm::Store::kOverwrite);
  return 2.0 * F::kMR * F::kNR * static_cast<double>(steps * calls) / seconds_since(t0) / 1e9;
}
// Per shape, the shares of one thread's GEMM in the format Fmt that packing B, packing A and the
// kernels take, and the whole and the kernels against the peak of the instruction Fmt multiplies with.
template <class Fmt>
void parts_of(const char* format, Peak instruction) {
  using bench::median;
  std::printf("{\"format\": \"%s\", \"cases\": [", format);
  std::fprintf(stderr, "%-30s %9s %9s %9s %14s   (%s)\n", "case (medians of 7)", "of peak", "pack B", "pack A", "kernels, peak", format);
  for (std::size_t i = 0; i < std::size(kCases); ++i) {
    const Case& k = kCases[i];
    // operands from the device's allocator, in the memory a training step's GEMMs get (huge pages)
    epl::device::Cpu cpu(0, 1);
    auto a = cpu.zeros({k.m, k.k}, epl::DType::kF32), b = cpu.zeros({k.k, k.n}, epl::DType::kF32), c = cpu.zeros({k.m, k.n}, epl::DType::kF32);
    cpu.fill(a, 0.5);
    cpu.fill(b, 0.25);
    std::vector<double> all, pb, pa, kern;
    const double flop = 2.0 * static_cast<double>(k.m * k.n * k.k) / 1e9;
    for (int r = 0; r < 7; ++r) {
      epl::detail::cpu::sgemm::Parts p;
      epl::detail::cpu::sgemm::gemm<Fmt>(k.ta, k.tb, k.m, k.n, k.k, 1.f, a.data<float>(), k.ta ? k.m : k.k, b.data<float>(),
                                              k.tb ? k.k : k.n, 0.f, c.data<float>(), k.n, &p);
      const double peak = peak_gflops(1, instruction), total = p.pack_b + p.pack_a + p.kernels;
      all.push_back(flop / total / peak);
      pb.push_back(p.pack_b / total);
      pa.push_back(p.pack_a / total);
      kern.push_back(flop / p.kernels / peak);
    }
    std::fprintf(stderr, "%-30s %8.0f%% %8.1f%% %8.1f%% %13.0f%%\n", k.what, 100 * median(all), 100 * median(pb), 100 * median(pa),
                 100 * median(kern));
    std::printf("%s{\"case\": \"%s\", \"of_peak\": %.3f, \"pack_b_share\": %.3f, \"pack_a_share\": %.3f, \"kernels_of_peak\": %.3f}",
                i ? ", " : "", k.what, median(all), median(pb), median(pa), median(kern));
  }
  std::printf("]}");
}
int parts() {
  using bench::median;
  std::fprintf(stderr, "%s, 1 thread; epl's f32 kernel here: %s (%d x %d of C in registers)\n", bench::cpu_name().c_str(),
               epl::detail::cpu::f32_kernel(), F32Format::kMR, F32Format::kNR);
  std::printf("{\"cpu\": \"%s\", \"f32_kernel\": \"%s\", \"kernel_in_l1\": [", bench::cpu_name().c_str(), epl::detail::cpu::f32_kernel());
  for (std::int64_t steps : {64, 256, 384}) {
    std::vector<double> share;
    for (int r = 0; r < 7; ++r) {
      const double g = kernel_gflops(steps);
      share.push_back(g / peak_gflops(1, Peak::kFma));
    }
    std::fprintf(stderr, "the kernel alone, %3lld k a call, panels in L1: %3.0f%% of the FMA peak\n", static_cast<long long>(steps),
                 100 * median(share));
    std::printf("%s{\"k\": %lld, \"of_peak\": %.3f}", steps == 64 ? "" : ", ", static_cast<long long>(steps), median(share));
  }
  std::printf("], \"formats\": [");
  parts_of<F32Format>("f32", Peak::kFma);
#if EPL_SGEMM_BF16
  std::printf(", ");
  parts_of<epl::detail::cpu::sgemm::BF16>("bf16 (avx512-bf16)", Peak::kDpbf16);
#endif
#if EPL_SGEMM_AMX
  if (epl::detail::cpu::bf16_kernel_runs(K::kAmx)) {
    std::printf(", ");
    parts_of<epl::detail::cpu::sgemm::Amx<>>("bf16 (amx)", Peak::kAmx);
  }
#endif
  std::printf("]}\n");
  return 0;
}
#else
int parts() {
  std::fprintf(stderr, "bench_gemm --parts: this build has no packed f32 kernel (AVX-512 or AVX2 with FMA and F16C): Eigen multiplies\n");
  return 2;
}
#endif

// One gpt-mini attention layer's six batched GEMMs (48 heads of 256 x 256 scores, head size 64),
// dense against device::Triangle (#39: causal attention skips its upper triangle), alternating
// 11 times; medians. The probabilities are zero above the diagonal, as the softmax leaves them.
int attention(int threads, epl::DType inputs) {
  using epl::device::Triangle;
  using bench::median;
  epl::device::Cpu cpu(0, threads);
  const std::int64_t bh = 48, t = 256, hd = 64;
  auto q = cpu.zeros({bh, t, hd}, epl::DType::kF32), k = cpu.zeros({bh, t, hd}, epl::DType::kF32), out = cpu.zeros({bh, t, hd}, epl::DType::kF32);
  auto p = cpu.zeros({bh, t, t}, epl::DType::kF32), s = cpu.zeros({bh, t, t}, epl::DType::kF32);
  cpu.fill(q, 0.5), cpu.fill(k, 0.25);
  for (std::int64_t i = 0; i < bh * t; ++i)
    for (std::int64_t j = 0; j <= i % t; ++j) p.data<float>()[i * t + j] = 1.0f / static_cast<float>(i % t + 1);
  struct Op { const char* what; const epl::Tensor *a, *b, *c; bool ta, tb; Triangle tri; };
  const Op ops[] = {{"scores q k^T", &q, &k, &s, false, true, Triangle::kLowerC}, {"out p v", &p, &k, &out, false, false, Triangle::kLowerA},
                    {"dp = do v^T", &q, &k, &s, false, true, Triangle::kLowerC}, {"dv = p^T do", &p, &k, &out, true, false, Triangle::kUpperA},
                    {"dq = ds k", &p, &k, &out, false, false, Triangle::kLowerA}, {"dk = ds^T q", &p, &q, &out, true, false, Triangle::kUpperA}};
  std::fprintf(stderr, "%s, %d thread(s): one gpt-mini attention layer's GEMMs (%lld x %lld x %lld, %lld rows a block), %s, "
               "medians of 11\n",
               bench::cpu_name().c_str(), threads, static_cast<long long>(bh), static_cast<long long>(t), static_cast<long long>(hd),
               static_cast<long long>(epl::detail::cpu::kTriangleRows), std::string(epl::name_of(inputs)).c_str());
  std::fprintf(stderr, "%-16s %10s %12s %8s\n", "gemm", "dense ms", "triangle ms", "ratio");
  std::printf("{\"cpu\": \"%s\", \"threads\": %d, \"inputs\": \"%s\", \"rows\": %lld, \"ops\": [", bench::cpu_name().c_str(), threads,
              std::string(epl::name_of(inputs)).c_str(), static_cast<long long>(epl::detail::cpu::kTriangleRows));
  double dense_total = 0, triangle_total = 0;
  for (std::size_t i = 0; i < std::size(ops); ++i) {
    const Op& o = ops[i];
    std::vector<double> dense, triangle;
    for (int r = 0; r < 11; ++r) {
      dense.push_back(1e3 * bench::seconds([&] { cpu.gemm_batched(*o.a, o.ta, *o.b, o.tb, *o.c, 1, 0, inputs); }));
      triangle.push_back(1e3 * bench::seconds([&] { cpu.gemm_batched(*o.a, o.ta, *o.b, o.tb, *o.c, 1, 0, inputs, o.tri); }));
    }
    dense_total += median(dense), triangle_total += median(triangle);
    std::fprintf(stderr, "%-16s %10.3f %12.3f %8.2f\n", o.what, median(dense), median(triangle), median(triangle) / median(dense));
    std::printf("%s{\"gemm\": \"%s\", \"dense_ms\": %.4f, \"triangle_ms\": %.4f}", i ? ", " : "", o.what, median(dense), median(triangle));
  }
  std::fprintf(stderr, "%-16s %10.3f %12.3f %8.2f\n", "all six", dense_total, triangle_total, triangle_total / dense_total);
  // The layer's whole attention, forward and backward, from qkv [8, 256, 3 x 384] (the same 48
  // heads): the unfused ops (heads moved out and back, the triangles above, the softmax and its
  // backward, each over all heads in memory) against device::Cpu::attention_heads (a head at a
  // time in the cache; bench_gpt_mini runs it), alternating 11 times.
  const std::int64_t b = 8, heads = bh / b, dim = heads * hd;
  const double scale = 0.125;
  auto h = cpu.empty({b, t, 3 * dim}, epl::DType::kF32), dout = cpu.empty({b, t, dim}, epl::DType::kF32);
  for (std::int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5);
  for (std::int64_t i = 0; i < dout.numel(); ++i) dout.data<float>()[i] = static_cast<float>((i * 104729 % 1000) / 1000.0 - 0.5);
  auto o = cpu.empty({b, t, dim}, epl::DType::kF32), dh = cpu.empty(h.shape(), epl::DType::kF32);
  const epl::Shape batched{bh, t, hd};
  auto like = [&](const epl::Tensor& x) { return cpu.empty(x.shape(), epl::DType::kF32); };
  auto q4 = cpu.empty({b, heads, t, hd}, epl::DType::kF32), k4 = like(q4), v4 = like(q4), d4 = like(q4), dp = like(p), ds = like(p);
  auto unfused = [&] {
    cpu.permute_heads(h, q4, 0, true), cpu.permute_heads(h, k4, dim, true), cpu.permute_heads(h, v4, 2 * dim, true);
    cpu.gemm_batched(q4.view(batched), false, k4.view(batched), true, s, 1, 0, inputs, Triangle::kLowerC);
    cpu.softmax_causal(s, p, scale);
    cpu.gemm_batched(p, false, v4.view(batched), false, out, 1, 0, inputs, Triangle::kLowerA);
    cpu.permute_heads(o, out.view({b, heads, t, hd}), 0, false);
    cpu.permute_heads(dout, d4, 0, true);
    cpu.gemm_batched(d4.view(batched), false, v4.view(batched), true, dp, 1, 0, inputs, Triangle::kLowerC);
    cpu.gemm_batched(p, true, d4.view(batched), false, out, 1, 0, inputs, Triangle::kUpperA);
    cpu.permute_heads(dh, out.view({b, heads, t, hd}), 2 * dim, false);
    cpu.softmax_causal_backward(p, dp, ds, scale);
    cpu.gemm_batched(ds, false, k4.view(batched), false, out, 1, 0, inputs, Triangle::kLowerA);
    cpu.permute_heads(dh, out.view({b, heads, t, hd}), 0, false);
    cpu.gemm_batched(ds, true, q4.view(batched), false, out, 1, 0, inputs, Triangle::kUpperA);
    cpu.permute_heads(dh, out.view({b, heads, t, hd}), dim, false);
  };
  auto fused = [&] {
    if (!cpu.attention_heads(h, o, heads, scale, inputs) || !cpu.attention_heads_backward(h, dout, dh, heads, scale, inputs))
      std::fprintf(stderr, "bench_gemm: attention_heads declined (no packed kernel here)\n");
  };
  std::vector<double> unfused_ms, fused_ms;
  for (int r = 0; r < 11; ++r) {
    unfused_ms.push_back(1e3 * bench::seconds(unfused));
    fused_ms.push_back(1e3 * bench::seconds(fused));
  }
  std::fprintf(stderr, "the layer's attention, forward and backward: unfused %.3f ms, a head at a time %.3f ms, ratio %.2f\n",
               median(unfused_ms), median(fused_ms), median(fused_ms) / median(unfused_ms));
  std::printf("], \"layer\": {\"unfused_ms\": %.4f, \"heads_ms\": %.4f}}\n", median(unfused_ms), median(fused_ms));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  bool attention_only = false, parts_only = false, amp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) threads = static_cast<int>(bench::int_arg("bench_gemm", arg, 10, 1, 1024));
    else if (arg == "--parts") parts_only = true;
    else if (arg == "--attention") attention_only = true;
    else if (arg == "--amp") amp = true;
    else {
      std::fprintf(stderr, "bench_gemm: unknown argument %s; use --threads=N, --parts or --attention [--amp]\n", arg.c_str());
      return 2;
    }
  }
  if (parts_only && (attention_only || threads != 1)) {
    std::fprintf(stderr, "bench_gemm: --parts times one thread's GEMMs alone: give it without --attention or --threads\n");
    return 2;
  }
  if (parts_only) return parts();
  if (amp && !attention_only) {
    std::fprintf(stderr, "bench_gemm: --amp goes with --attention (the other tables time every bf16 kernel already)\n");
    return 2;
  }
  if (attention_only) return attention(threads, amp ? epl::DType::kBF16 : epl::DType::kF32);
  epl::device::Cpu cpu(0, threads);
  Eigen::setNbThreads(threads);
  const auto& cases = kCases;
  std::vector<K> kernels;
  for (K k : {K::kRoundedF32, K::kAvx512Bf16, K::kAmx})
    if (epl::detail::cpu::bf16_kernel_runs(k)) kernels.push_back(k);
  const auto& choice = epl::detail::cpu::bf16_choice();
  std::fprintf(stderr, "%s, %d thread(s); epl's f32 kernel here: %s; AMP's bf16 kernel here: %s (VDPBF16PS / FMA measured %.2f)\n",
               bench::cpu_name().c_str(), threads, epl::detail::cpu::f32_kernel(), epl::device::name(choice.kernel), choice.dpbf16_over_fma);
  std::fprintf(stderr, "%-30s %16s %16s", "case (GFLOP/s, of its peak)", "epl f32", "eigen f32");
  for (K k : kernels) std::fprintf(stderr, " %16s", (std::string("bf16 ") + epl::device::name(k)).c_str());
  std::fprintf(stderr, "\n");
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<double> fma_peaks;              // every FMA peak timed, for the run's median
  std::map<K, std::vector<double>> bf16_peaks;  // and each bf16 kernel's instruction's
  std::printf("{\"cpu\": \"%s\", \"threads\": %d, \"f32_kernel\": \"%s\", \"bf16_kernel\": \"%s\", \"dpbf16_over_fma\": %.3f, \"cases\": [",
              bench::cpu_name().c_str(), threads, epl::detail::cpu::f32_kernel(), epl::device::name(choice.kernel), choice.dpbf16_over_fma);
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
    Series f32, eig;
    std::map<K, Series> bf16;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cpu.gemm(a, k.ta, b, k.tb, out);
      const double e = flop / seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      eigen();
      const double g = flop / seconds_since(t0);
      const double p = peak_gflops(threads, Peak::kFma);
      f32.add(e, p);
      eig.add(g, p);
      fma_peaks.push_back(p);
      for (K kernel : kernels) {
        epl::device::Cpu::use_bf16_kernel(kernel);
        t0 = std::chrono::steady_clock::now();
        cpu.gemm(a, k.ta, b, k.tb, out, 1, 0, epl::DType::kBF16);
        const double h = flop / seconds_since(t0);
        const double hp = peak_gflops(threads, peak_of(kernel));
        bf16[kernel].add(h, hp);
        bf16_peaks[kernel].push_back(hp);
      }
      epl::device::Cpu::use_bf16_kernel(std::nullopt);
    }
    using bench::median;
    std::fprintf(stderr, "%-30s %9.1f (%3.0f%%) %9.1f (%3.0f%%)", k.what, median(f32.gflops), 100 * median(f32.share), median(eig.gflops),
                 100 * median(eig.share));
    for (K kernel : kernels) std::fprintf(stderr, " %9.1f (%3.0f%%)", median(bf16[kernel].gflops), 100 * median(bf16[kernel].share));
    std::fprintf(stderr, "\n");
    std::printf("%s{\"case\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"gflops\": %.1f, \"of_peak\": %.3f, "
                "\"eigen_gflops\": %.1f, \"eigen_of_peak\": %.3f, \"bf16\": {",
                c ? ", " : "", k.what, (long long)k.m, (long long)k.n, (long long)k.k, median(f32.gflops), median(f32.share),
                median(eig.gflops), median(eig.share));
    for (std::size_t i = 0; i < kernels.size(); ++i)
      std::printf("%s\"%s\": {\"gflops\": %.1f, \"of_peak\": %.3f}", i ? ", " : "", epl::device::name(kernels[i]),
                  median(bf16[kernels[i]].gflops), median(bf16[kernels[i]].share));
    std::printf("}}");
  }
  std::printf("], \"peak_gflops\": {\"fma\": %.1f", bench::median(fma_peaks));
  std::fprintf(stderr, "peaks (GFLOP/s, %d thread(s)): FMA %.1f", threads, bench::median(fma_peaks));
  for (const auto& [kernel, peaks] : bf16_peaks) {
    if (kernel == K::kRoundedF32) continue;  // its peak is FMA's
    const char* what = kernel == K::kAmx ? "tdpbf16ps" : "vdpbf16ps";
    std::printf(", \"%s\": %.1f", what, bench::median(peaks));
    std::fprintf(stderr, ", %s %.1f", what, bench::median(peaks));
  }
  std::printf("}}\n");
  std::fprintf(stderr, "\n");
}
