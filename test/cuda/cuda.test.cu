// The CUDA backend against the CPU backend on the same inputs.
#include <doctest/doctest.h>

#include <cmath>

#include "epl/device/cpu/cpu.hpp"
#include "epl/device/cuda/cuda.cuh"
#include "epl/device/device.hpp"

using namespace epl;

namespace test_cuda_cuda {

static_assert(device_math<device::Cuda>);

namespace {
device::CpuF64 cpu;  // f32 and f64, as the CUDA device
Tensor host_random(Shape s, std::uint64_t seed, DType t = DType::kF32) {
  Tensor x = cpu.empty(s, DType::kF64);
  auto key = stream_key(seed, 1);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.span<double>()[i] = 2 * uniform01(key, i) - 1;
  Tensor y = cpu.empty(s, t);
  cpu.cast(x, y);
  return y;
}
Tensor to_gpu(const device::Cuda& g, const Tensor& h) {
  Tensor d = g.empty(h.shape(), h.dtype());
  g.upload(h.raw(), d);
  return d;
}
Tensor to_host(const device::Cuda& g, const Tensor& d) {
  Tensor h = cpu.empty(d.shape(), d.dtype());
  g.download(d, h.raw());
  return h;
}
double max_diff(const Tensor& a, const Tensor& b) {
  Tensor x = cpu.empty(a.shape(), DType::kF64), y = cpu.empty(b.shape(), DType::kF64);
  cpu.cast(a, x);
  cpu.cast(b, y);
  double m = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::abs(x.span<double>()[i] - y.span<double>()[i]));
  return m;
}
}  // namespace

TEST_SUITE("cuda") {
TEST_CASE("cuda gemm equals the CPU gemm for every transpose, f32 and f64") {
  device::Cuda g;
  for (DType t : {DType::kF32, DType::kF64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = host_random(ta ? Shape{33, 17} : Shape{17, 33}, 1, t), b = host_random(tb ? Shape{29, 33} : Shape{33, 29}, 2, t);
        Tensor c = host_random({17, 29}, 3, t);
        Tensor dc = to_gpu(g, c);
        g.gemm(to_gpu(g, a), ta, to_gpu(g, b), tb, dc, 0.5, 2.0);
        cpu.gemm(a, ta, b, tb, c, 0.5, 2.0);
        CHECK(max_diff(to_host(g, dc), c) < (t == DType::kF32 ? 1e-4 : 1e-12));
      }
}
TEST_CASE("cuda gemm under AMP rounds the operands as the CPU does (bf16, f16), rows of any length, every transpose") {
  device::Cuda g;
  for (DType low : {DType::kBF16, DType::kF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        // k = 45 and n = 29: operand rows that are no multiple of 8 elements (the padded copies)
        Tensor a = host_random(ta ? Shape{45, 17} : Shape{17, 45}, 1), b = host_random(tb ? Shape{29, 45} : Shape{45, 29}, 2);
        Tensor c = host_random({17, 29}, 3);
        Tensor dc = to_gpu(g, c);
        g.gemm(to_gpu(g, a), ta, to_gpu(g, b), tb, dc, 1.0, 0.5, low);
        cpu.gemm(a, ta, b, tb, c, 1.0, 0.5, low);
        CHECK(max_diff(to_host(g, dc), c) < 1e-5);
      }
  // rows of n = 65537 (padded to 65544): the product is computed 1024 rows at a time into a padded
  // buffer and copied back, here in two blocks, c read (beta) and written in each
  for (bool ta : {false, true}) {
    CAPTURE(ta);
    const std::int64_t m = 1030, n = 65537, k = 13;
    Tensor a = host_random(ta ? Shape{k, m} : Shape{m, k}, 6), b = host_random({n, k}, 7), c = host_random({m, n}, 8);
    Tensor dc = to_gpu(g, c);
    g.gemm(to_gpu(g, a), ta, to_gpu(g, b), true, dc, 0.5, 2.0, DType::kBF16);
    cpu.gemm(a, ta, b, true, c, 0.5, 2.0, DType::kBF16);
    CHECK(max_diff(to_host(g, dc), c) < 1e-5);
  }
  Tensor a = host_random({3, 40, 64}, 4), b = host_random({3, 40, 64}, 5), c = cpu.zeros({3, 40, 40}, DType::kF32);
  Tensor dc = g.zeros({3, 40, 40}, DType::kF32);
  g.gemm_batched(to_gpu(g, a), false, to_gpu(g, b), true, dc, 0.125, 0.0, DType::kBF16);
  cpu.gemm_batched(a, false, b, true, c, 0.125, 0.0, DType::kBF16);
  CHECK(max_diff(to_host(g, dc), c) < 1e-5);
}
TEST_CASE("cuda gemm_bias: the bias added by the GEMM's epilogue equals gemm then add_row_vector on the CPU") {
  device::Cuda g;
  struct Case {
    std::int64_t m, n, k;
  };
  // n a multiple of 8 (the epilogue on c itself), odd n (on the padded rows, bias padded with
  // zeros), and rows of n past the padded buffer (two blocks)
  for (Case s : {Case{64, 96, 40}, Case{33, 77, 45}, Case{1030, 65537, 13}})
    for (DType low : {DType::kBF16, DType::kF16, DType::kF32}) {
      CAPTURE(s.n);
      CAPTURE(name_of(low));
      Tensor x = host_random({s.m, s.k}, 11), w = host_random({s.n, s.k}, 12), bias = host_random({s.n}, 13), c = cpu.zeros({s.m, s.n}, DType::kF32);
      Tensor dc = g.empty({s.m, s.n}, DType::kF32);
      g.fill(dc, std::nan(""));
      g.gemm_bias(to_gpu(g, x), false, to_gpu(g, w), true, dc, to_gpu(g, bias), low);
      cpu.gemm(x, false, w, true, c, 1.0, 0.0, low);
      cpu.add_row_vector(c, bias);
      CHECK(max_diff(to_host(g, dc), c) < (low == DType::kF32 ? 1e-4 : 1e-5));
    }
  device::Cuda h;
  CHECK_THROWS_WITH_AS(h.gemm_bias(h.zeros({4, 8}, DType::kF32), false, h.zeros({16, 8}, DType::kF32), true, h.empty({4, 16}, DType::kF32),
                                   h.zeros({15}, DType::kF32), DType::kBF16),
                       doctest::Contains("gemm_bias: bias [15]"), Error);
}
TEST_CASE("cuda gemm_batched equals the CPU") {
  device::Cuda g;
  Tensor a = host_random({6, 8, 16}, 4), b = host_random({6, 8, 16}, 5), c = cpu.empty({6, 8, 8}, DType::kF32);
  Tensor dc = g.empty({6, 8, 8}, DType::kF32);
  g.gemm_batched(to_gpu(g, a), false, to_gpu(g, b), true, dc);
  cpu.gemm_batched(a, false, b, true, c);
  CHECK(max_diff(to_host(g, dc), c) < 1e-5);
}
TEST_CASE("cuda element-wise kernels and casts equal the CPU") {
  device::Cuda g;
  Tensor a = host_random({1000, 3}, 6), b = host_random({1000, 3}, 7), v = host_random({3}, 8);
  Tensor da = to_gpu(g, a), db = to_gpu(g, b), dout = g.empty(a.shape(), DType::kF32);
  Tensor out = cpu.empty(a.shape(), DType::kF32);
  g.add(da, db, dout);
  cpu.add(a, b, out);
  CHECK(max_diff(to_host(g, dout), out) == 0);
  g.mul(da, db, dout);
  cpu.mul(a, b, out);
  CHECK(max_diff(to_host(g, dout), out) == 0);
  g.axpy(0.25, da, db);
  cpu.axpy(0.25, a, b);
  CHECK(max_diff(to_host(g, db), b) < 1e-6);
  g.add_row_vector(da, to_gpu(g, v));
  cpu.add_row_vector(a, v);
  CHECK(max_diff(to_host(g, da), a) < 1e-6);
  g.gelu(da, dout);
  cpu.gelu(a, out);
  CHECK(max_diff(to_host(g, dout), out) < 1e-6);
  g.relu_backward(da, db, dout);
  cpu.relu_backward(a, b, out);
  CHECK(max_diff(to_host(g, dout), out) == 0);
  {  // a NaN passes through relu on the GPU as on the CPU (PyTorch's rule)
    Tensor n = cpu.empty({2}, DType::kF32), r = cpu.empty({2}, DType::kF32);
    n.span<float>()[0] = std::nanf("");
    n.span<float>()[1] = -1;
    Tensor dn = to_gpu(g, n), dr = g.empty({2}, DType::kF32);
    g.relu(dn, dr);
    const Tensor back = to_host(g, dr);
    CHECK(std::isnan(back.span<float>()[0]));
    CHECK(back.span<float>()[1] == 0);
  }
  for (DType t : {DType::kF16, DType::kBF16}) {
    Tensor dh = g.empty(a.shape(), t), h = cpu.empty(a.shape(), t);
    g.cast(da, dh);
    cpu.cast(a, h);
    CHECK(max_diff(to_host(g, dh), h) == 0);
  }
  g.fill(dout, 3.5);
  CHECK(to_host(g, dout).span<float>()[2999] == 3.5f);
}
TEST_CASE("cuda memory is accounted per device") {
  device::Cuda g;
  auto before = memory_stats(g.id()).current_of(MemoryCategory::kParameters);
  Tensor p = g.empty({1024}, DType::kF32, MemoryCategory::kParameters);
  CHECK(memory_stats(g.id()).current_of(MemoryCategory::kParameters) - before == 4096);
}
}

TEST_SUITE("cuda") {
TEST_CASE("cuda host pool: pinned memory on its own account, copied both ways and reached by the device's kernels") {
  device::Cuda g;
  const DeviceId pool{DeviceKind::kHost, g.id().index};
  const auto before = memory_stats(pool).current_of(MemoryCategory::kParameters);
  Tensor h = g.host_zeros({1000}, DType::kF32, MemoryCategory::kParameters);
  CHECK(h.device() == pool);
  CHECK(memory_stats(pool).current_of(MemoryCategory::kParameters) - before == 4000);
  Tensor src = host_random({1000}, 9);
  Tensor d = to_gpu(g, src);
  g.copy(d, h);       // device to pinned host
  g.axpy(1.0, d, h);  // a kernel writing pinned host memory: h = 2 src
  Tensor back = g.empty({1000}, DType::kF32);
  g.copy(h, back);    // pinned host to device
  Tensor twice = cpu.empty({1000}, DType::kF32);
  cpu.fill(twice, 0.0);
  cpu.axpy(2.0, src, twice);
  CHECK(max_diff(to_host(g, back), twice) < 1e-6);
  g.synchronize();
  CHECK(max_diff(h, twice) < 1e-6);  // and the host reads it directly
}
TEST_CASE("cuda copy_ahead: a copy on the copy stream after the queued work, awaited by the stream's later work") {
  device::Cuda g;
  Tensor src = host_random({1 << 20}, 11);
  Tensor pool = g.host_empty({1 << 20}, DType::kF32, MemoryCategory::kParameters);
  Tensor d = to_gpu(g, src);
  g.copy(d, pool);                        // queued on the stream: copy_ahead must see it
  g.scale(d, 3.0);                        // and this too, before its copy reads d below
  Tensor on_device = g.empty({1 << 20}, DType::kF32);
  const auto ticket = g.copy_ahead(pool, on_device);  // host pool to device, on the copy stream
  Tensor tripled = g.empty({1 << 20}, DType::kF32);
  const auto ticket2 = g.copy_ahead(d, tripled);
  g.await(ticket);
  g.await(ticket2);
  g.axpy(1.0, on_device, tripled);        // after both copies: 3 src + src
  Tensor four = cpu.empty({1 << 20}, DType::kF32);
  cpu.fill(four, 0.0);
  cpu.axpy(4.0, src, four);
  CHECK(max_diff(to_host(g, tripled), four) < 1e-5);
  CHECK(max_diff(to_host(g, on_device), src) == 0);
}
}

namespace {
Tensor host_ids(Shape s, std::int64_t limit, std::uint64_t seed, DType t) {
  Tensor x = cpu.empty(s, t);
  auto key = stream_key(seed, 2);
  visit_index(t, [&]<class I>() {
    for (std::int64_t i = 0; i < x.numel(); ++i) x.span<I>()[i] = static_cast<I>(uniform01(key, i) * static_cast<double>(limit));
  });
  return x;
}
Tensor host_zeros(Shape s, DType t = DType::kF32) { return cpu.zeros(s, t); }
// Runs op on the GPU (on uploaded copies of the inputs) and on the CPU, and returns the largest
// difference over the outputs, relative where a value is past 1 (the outputs' host tensors are both the CPU's inputs and results).
template <class Op>
double on_both(const device::Cuda& g, std::vector<Tensor> host, std::vector<int> outputs, Op op) {
  std::vector<Tensor> dev;
  for (auto& h : host) dev.push_back(to_gpu(g, h));
  op(g, dev);
  op(cpu, host);
  double worst = 0;  // relative to values past 1
  for (int o : outputs) {
    const Tensor a = to_host(g, dev[static_cast<std::size_t>(o)]), &b = host[static_cast<std::size_t>(o)];
    Tensor x = cpu.empty(a.shape(), DType::kF64), y = cpu.empty(b.shape(), DType::kF64);
    cpu.cast(a, x);
    cpu.cast(b, y);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, std::abs(x.span<double>()[i] - y.span<double>()[i]) / std::max(1.0, std::abs(y.span<double>()[i])));
  }
  g.synchronize();
  return worst;
}
}  // namespace

TEST_SUITE("cuda") {
TEST_CASE("cuda layer norm, forward and backward, equals the CPU (rows shorter and longer than a warp)") {
  device::Cuda g;
  for (std::int64_t cols : {7, 70, 1000}) {
    CAPTURE(cols);
    const std::int64_t rows = 37;
    auto fwd = [&](const auto& d, std::vector<Tensor>& t) { d.layer_norm(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5); };
    CHECK(on_both(g, {host_random({rows, cols}, 1), host_random({cols}, 2), host_random({cols}, 3), host_zeros({rows, cols}),
                      host_zeros({rows}), host_zeros({rows})}, {3, 4, 5}, fwd) < 2e-5);
    auto bwd = [&](const auto& d, std::vector<Tensor>& t) {
      d.layer_norm(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5);
      d.layer_norm_backward(t[0], t[1], t[4], t[5], t[6], t[7], t[8], t[9]);
    };
    CHECK(on_both(g, {host_random({rows, cols}, 1), host_random({cols}, 2), host_random({cols}, 3), host_zeros({rows, cols}),
                      host_zeros({rows}), host_zeros({rows}), host_random({rows, cols}, 4), host_zeros({rows, cols}),
                      host_random({cols}, 5), host_random({cols}, 6)}, {7, 8, 9}, bwd) < 1e-4);
  }
}
TEST_CASE("cuda causal and row softmax, forward and backward, equal the CPU") {
  device::Cuda g;
  for (std::int64_t t : {5, 45, 100}) {
    CAPTURE(t);
    auto causal = [&](const auto& d, std::vector<Tensor>& x) {
      d.softmax_causal(x[0], x[1], 0.3);
      d.softmax_causal_backward(x[1], x[2], x[3], 0.3);
    };
    CHECK(on_both(g, {host_random({3, t, t}, 1), host_zeros({3, t, t}), host_random({3, t, t}, 2), host_random({3, t, t}, 9)}, {1, 3},
                  causal) < 1e-6);
    auto rows = [&](const auto& d, std::vector<Tensor>& x) {
      d.softmax_rows(x[0], x[1]);
      d.softmax_rows_backward(x[1], x[2], x[3]);
    };
    CHECK(on_both(g, {host_random({11, t}, 3), host_zeros({11, t}), host_random({11, t}, 4), host_zeros({11, t})}, {1, 3}, rows) < 1e-6);
  }
}
#if EPL_CUDNN_FRONTEND
namespace {
// Causal attention in double on the host, per (batch, head): o, each row's log-sum-exp, and the
// gradients of <o, dout> with respect to q, k and v, all read from and written to the token-major
// layouts of device::Cuda::attention_causal ([b, t, 3 w] for q | k | v, [b, t, w] for o).
struct AttentionRef {
  std::vector<double> o, lse, dqkv;
};
AttentionRef attention_ref(const std::vector<double>& qkv, const std::vector<double>& dout, std::int64_t b, std::int64_t t,
                           std::int64_t heads, std::int64_t hd, double scale) {
  const std::int64_t w = heads * hd;
  AttentionRef r{std::vector<double>(static_cast<std::size_t>(b * t * w)), std::vector<double>(static_cast<std::size_t>(b * heads * t)),
                 std::vector<double>(qkv.size())};
  auto at = [&](std::int64_t n, std::int64_t i, std::int64_t part, std::int64_t h) { return static_cast<std::size_t>((n * t + i) * 3 * w + part * w + h * hd); };
  std::vector<double> p(static_cast<std::size_t>(t * t)), dp(static_cast<std::size_t>(t * t));
  for (std::int64_t n = 0; n < b; ++n)
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < t; ++i) {
        double m = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < hd; ++e) s += qkv[at(n, i, 0, h) + e] * qkv[at(n, j, 1, h) + e];
          p[i * t + j] = s * scale;
          m = std::max(m, s * scale);
        }
        for (std::int64_t j = 0; j <= i; ++j) sum += (p[i * t + j] = std::exp(p[i * t + j] - m));
        r.lse[static_cast<std::size_t>((n * heads + h) * t + i)] = m + std::log(sum);
        for (std::int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += (p[i * t + j] / sum) * qkv[at(n, j, 2, h) + e];
          r.o[static_cast<std::size_t>((n * t + i) * w + h * hd + e)] = acc;
        }
        for (std::int64_t j = 0; j <= i; ++j) p[i * t + j] /= sum;
      }
      for (std::int64_t i = 0; i < t; ++i) {  // dP = dO V^T, dS = P (dP - rowsum(P dP))
        double rowsum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < hd; ++e) s += dout[static_cast<std::size_t>((n * t + i) * w + h * hd + e)] * qkv[at(n, j, 2, h) + e];
          dp[i * t + j] = s;
          rowsum += s * p[i * t + j];
        }
        for (std::int64_t j = 0; j <= i; ++j) dp[i * t + j] = p[i * t + j] * (dp[i * t + j] - rowsum) * scale;
      }
      for (std::int64_t i = 0; i < t; ++i)
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t e = 0; e < hd; ++e) {
            r.dqkv[at(n, i, 0, h) + e] += dp[i * t + j] * qkv[at(n, j, 1, h) + e];                                   // dQ = dS K
            r.dqkv[at(n, j, 1, h) + e] += dp[i * t + j] * qkv[at(n, i, 0, h) + e];                                   // dK = dS^T Q
            r.dqkv[at(n, j, 2, h) + e] += p[i * t + j] * dout[static_cast<std::size_t>((n * t + i) * w + h * hd + e)];  // dV = P^T dO
          }
    }
  return r;
}
std::vector<double> doubles(const Tensor& x) {
  Tensor y = cpu.empty(x.shape(), DType::kF64);
  cpu.cast(x, y);
  return {y.span<double>().begin(), y.span<double>().end()};
}
double rel_norm(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}
}  // namespace

TEST_CASE("cuda fused attention (cuDNN SDPA), forward and backward, equals causal attention in double on the same half inputs") {
  device::Cuda g;
  struct Case {
    std::int64_t b, t, heads, hd;
  };
  for (DType half : {DType::kBF16, DType::kF16})
    for (Case c : {Case{2, 40, 2, 24}, Case{2, 257, 4, 64}, Case{1, 128, 2, 128}}) {
      CAPTURE(name_of(half));
      CAPTURE(c.t);
      CAPTURE(c.hd);
      const std::int64_t w = c.heads * c.hd;
      const double scale = 1 / std::sqrt(static_cast<double>(c.hd));
      // the inputs in the half type (as the layer rounds them), and the reference on exactly those values
      Tensor qkv = cpu.empty({c.b, c.t, 3 * w}, half), dout = cpu.empty({c.b, c.t, w}, half);
      cpu.cast(host_random(qkv.shape(), 31), qkv);
      cpu.cast(host_random(dout.shape(), 32), dout);
      const AttentionRef ref = attention_ref(doubles(qkv), doubles(dout), c.b, c.t, c.heads, c.hd, scale);
      Tensor dqkv = to_gpu(g, qkv), o = g.empty({c.b, c.t, w}, half), stats = g.empty({c.b, c.heads, c.t}, DType::kF32);
      Tensor dq = g.empty(qkv.shape(), half);
      g.fill(o, std::nan(""));  // every element must be written
      g.fill(dq, std::nan(""));
      REQUIRE(g.attention_causal(dqkv, o, stats, c.heads, scale));  // cuDNN ran it: nothing fell back
      REQUIRE(g.attention_causal_backward(dqkv, o, stats, to_gpu(g, dout), dq, c.heads, scale));
      const double eo = rel_norm(doubles(to_host(g, o)), ref.o), el = rel_norm(doubles(to_host(g, stats)), ref.lse),
                   ed = rel_norm(doubles(to_host(g, dq)), ref.dqkv);
      MESSAGE(name_of(half), " b ", c.b, " t ", c.t, " heads ", c.heads, " of ", c.hd, ": |o - ref| / |ref| ", eo, ", log-sum-exp ", el,
              ", d(q, k, v) ", ed);
      // the probabilities are rounded to the half type before they multiply v (as the unfused
      // path rounds them for its GEMM): bf16 keeps 8 bits, f16 11
      const double tol = half == DType::kBF16 ? 1e-2 : 2e-3;
      CHECK(eo < tol);
      CHECK(el < 1e-5);
      CHECK(ed < 2 * tol);
    }
}
TEST_CASE("cuda fused attention: a head size cuDNN cannot stride runs unfused; wrong dtypes and shapes are errors naming them") {
  device::Cuda g;
  Tensor qkv = g.zeros({2, 16, 3 * 24}, DType::kBF16), o = g.empty({2, 16, 24}, DType::kBF16), stats = g.empty({2, 2, 16}, DType::kF32);
  CHECK_FALSE(g.attention_causal(g.zeros({2, 16, 3 * 12}, DType::kBF16), g.empty({2, 16, 12}, DType::kBF16), stats, 2, 0.3));  // heads of 6
  CHECK_THROWS_WITH_AS((void)g.attention_causal(g.zeros({2, 16, 72}, DType::kF32), g.empty({2, 16, 24}, DType::kF32), stats, 2, 0.3),
                       doctest::Contains("must both be bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS((void)g.attention_causal(qkv, g.empty({2, 16, 25}, DType::kBF16), stats, 2, 0.3), doctest::Contains("[b, t, 3 width]"),
                       Error);
  CHECK_THROWS_WITH_AS((void)g.attention_causal(qkv, o, g.empty({2, 16}, DType::kF32), 2, 0.3), doctest::Contains("must be f32 [b, heads, t]"),
                       Error);
}
#endif
TEST_CASE("cuda embedding, its backward over repeated ids and a vocabulary part, equal the CPU for i32 and i64 ids") {
  device::Cuda g;
  for (DType it : {DType::kI32, DType::kI64}) {
    auto whole = [&](const auto& d, std::vector<Tensor>& x) {
      d.embedding(x[0], x[1], x[2]);
      d.embedding_backward(x[0], x[3], x[4]);
    };
    CHECK(on_both(g, {host_ids({4, 25}, 13, 1, it), host_random({13, 40}, 2), host_zeros({4, 25, 40}), host_random({4, 25, 40}, 3),
                      host_random({13, 40}, 4)}, {2, 4}, whole) < 1e-5);
    auto part = [&](const auto& d, std::vector<Tensor>& x) {  // rows [5, 10) of a vocabulary of 13
      d.embedding(x[0], x[1], x[2], 5, 13);
      d.embedding_backward(x[0], x[3], x[4], 5, 13);
    };
    CHECK(on_both(g, {host_ids({4, 25}, 13, 1, it), host_random({5, 40}, 2), host_random({4, 25, 40}, 7), host_random({4, 25, 40}, 3),
                      host_zeros({5, 40})}, {2, 4}, part) < 1e-5);
  }
}
TEST_CASE("cuda gather_rows, scatter_add_rows, row_dot and row_max equal the CPU") {
  device::Cuda g;
  auto ops = [&](const auto& d, std::vector<Tensor>& x) {
    d.gather_rows(x[0], x[1], x[2]);
    d.scatter_add_rows(x[2], x[1], x[3], x[4]);
    d.scatter_add_rows(x[2], x[1], Tensor{}, x[4]);
    d.row_dot(x[2], x[5], x[6]);
    d.row_max(x[2], x[7]);
  };
  CHECK(on_both(g, {host_random({9, 50}, 1), host_ids({30}, 9, 2, DType::kI64), host_zeros({30, 50}), host_random({30}, 3),
                    host_random({9, 50}, 4), host_random({30, 50}, 5), host_zeros({30}), host_zeros({30})}, {2, 4, 6, 7}, ops) < 1e-5);
}
TEST_CASE("cuda cross-entropy, whole and vocabulary-parallel, equals the CPU") {
  device::Cuda g;
  for (DType it : {DType::kI32, DType::kI64}) {
    const Tensor logits = host_random({23, 300}, 1), targets = host_ids({23}, 300, 2, it);
    const double cpu_loss = cpu.cross_entropy(logits, targets);
    const Tensor dl = to_gpu(g, logits), dt = to_gpu(g, targets);
    CHECK(std::abs(g.cross_entropy(dl, dt) - cpu_loss) < 1e-5 * std::abs(cpu_loss));
    auto bwd = [&](const auto& d, std::vector<Tensor>& x) { d.cross_entropy_backward(x[0], x[1], x[2], 0.25); };
    CHECK(on_both(g, {logits, targets, host_zeros({23, 300})}, {2}, bwd) < 1e-7);
    // classes [100, 200) of 300, with the whole rows' maxima
    auto part = [&](const auto& d, std::vector<Tensor>& x) {
      d.row_max(x[0], x[2]);
      d.cross_entropy_stats(x[0], x[1], x[2], x[3], x[4], 100, 300);
      d.cross_entropy_part_backward(x[0], x[1], x[2], x[3], x[5], 100, 0.5);
    };
    CHECK(on_both(g, {host_random({23, 100}, 3), targets, host_zeros({23}), host_zeros({23}), host_zeros({23}), host_zeros({23, 100})},
                  {2, 3, 4, 5}, part) < 1e-5);
  }
}
TEST_CASE("cuda dropout draws the CPU's mask bit for bit, whole and by columns") {
  device::Cuda g;
  auto ops = [&](const auto& d, std::vector<Tensor>& x) {
    d.dropout(x[0], x[1], 0.3, 77, 1000);
    d.dropout_columns(x[2], x[3], 0.4, 78, 50, 96, 32);
  };
  CHECK(on_both(g, {host_random({70, 33}, 1), host_zeros({70, 33}), host_random({12, 40}, 2), host_zeros({12, 40})}, {1, 3}, ops) == 0);
}
TEST_CASE("cuda head permutes, column sums and sums of squares equal the CPU") {
  device::Cuda g;
  auto ops = [&](const auto& d, std::vector<Tensor>& x) {
    d.permute_heads(x[0], x[1], 8, true);   // heads 2 x 12 from columns 8 .. 32 of rows of 40
    d.permute_heads(x[2], x[1], 4, false);
    d.sum_rows(x[0], x[3]);
    d.sum_rows(x[0], x[4], 0.5);
  };
  CHECK(on_both(g, {host_random({3, 7, 40}, 1), host_zeros({3, 2, 7, 12}), host_random({3, 7, 40}, 2), host_random({40}, 3),
                    host_random({40}, 4)}, {1, 2, 3, 4}, ops) < 1e-5);
  const Tensor big = host_random({1000, 77}, 5);
  CHECK(std::abs(g.sum_squares(to_gpu(g, big)) - cpu.sum_squares(big)) < 1e-6 * cpu.sum_squares(big));
  CHECK(g.sum_squares(g.empty({0}, DType::kF32)) == 0);
}
TEST_CASE("cuda SGD, momentum and AdamW updates equal the CPU over several steps, reading the gradients with a factor") {
  device::Cuda g;
  for (const double gs : {1.0, 0.37}) {  // AMP's unscale times the clip coefficient
    CAPTURE(gs);
    auto ops = [&](const auto& d, std::vector<Tensor>& x) {
      for (int s = 1; s <= 3; ++s) {
        d.sgd_update(x[0], x[1], 0.1, 0.01, gs);
        d.momentum_update(x[2], x[1], x[3], 0.1, 0.9, 0.01, s == 2, gs);
        d.adamw_update(x[4], x[1], x[5], x[6], 1e-2, 0.9, 0.999, 1e-8, 0.1, s, gs);
      }
    };
    CHECK(on_both(g, {host_random({5000}, 1), host_random({5000}, 2), host_random({5000}, 3), host_zeros({5000}), host_random({5000}, 4),
                      host_zeros({5000}), host_zeros({5000})}, {0, 2, 3, 4, 5, 6}, ops) < 1e-6);
  }
}
TEST_CASE("cuda: an id outside the vocabulary found by a kernel is an error at the next synchronisation, then cleared") {
  device::Cuda g;
  std::vector<std::int32_t> bad = {1, 2, 99, 3};
  Tensor ids = g.empty({4}, DType::kI32), table = to_gpu(g, host_random({10, 8}, 1)), out = g.empty({4, 8}, DType::kF32);
  g.upload(bad.data(), ids);
  g.embedding(ids, table, out);
  CHECK_THROWS_WITH_AS(g.synchronize(), doctest::Contains("embedding: id 99 outside [0, 10)"), Error);
  g.synchronize();  // reported once
  Tensor logits = to_gpu(g, host_random({4, 10}, 2));
  g.upload(std::vector<std::int32_t>{1, 2, -4, 3}.data(), ids);
  CHECK_THROWS_WITH_AS((void)g.cross_entropy(logits, ids), doctest::Contains("cross_entropy targets: id -4 outside [0, 10)"), Error);
  std::vector<std::int64_t> rows = {0, 12};
  Tensor index = g.empty({2}, DType::kI64), picked = g.empty({2, 8}, DType::kF32);
  g.upload(rows.data(), index);
  g.gather_rows(table, index, picked);
  CHECK_THROWS_WITH_AS(g.synchronize(), doctest::Contains("row 12 outside [0, 10)"), Error);
}
TEST_CASE("cuda lane: a reduction of 3 and of 20 sources, in place, sum, max and mean, bf16 in f32, and copies after the compute stream") {
  device::Cuda g(0, 3);
  const auto lane = g.lane();
  for (int n : {3, 20}) {
    CAPTURE(n);
    std::vector<Tensor> hs, ds;
    for (int k = 0; k < n; ++k) {
      hs.push_back(host_random({1000}, 40 + k));
      ds.push_back(to_gpu(g, hs.back()));
    }
    std::vector<const void*> src;
    for (const auto& d : ds) src.push_back(d.raw());
    // the sum in rank order, into the last source (in place)
    Tensor want = cpu.zeros({1000}, DType::kF32), most = cpu.empty({1000}, DType::kF32);
    cpu.copy(hs[0], most);
    for (int k = 0; k < n; ++k) {
      cpu.add(want, hs[static_cast<std::size_t>(k)], want);
      for (int i = 0; i < 1000; ++i) most.span<float>()[i] = std::max(most.span<float>()[i], hs[static_cast<std::size_t>(k)].span<float>()[i]);
    }
    Tensor out = g.empty({1000}, DType::kF32);
    lane->after(lane->ready());
    lane->reduce(out.raw(), src, 1000, DType::kF32, device::Reduction::kMax, 1);
    lane->reduce(ds.back().raw(), src, 1000, DType::kF32, device::Reduction::kSum, n);  // the mean, in place
    lane->complete();
    CHECK(max_diff(to_host(g, out), most) == 0);
    cpu.scale(want, 1.0 / n);
    CHECK(max_diff(to_host(g, ds.back()), want) < 1e-6);
  }
  // bf16 sources combine in f32 and round once
  Tensor a = g.empty({4}, DType::kBF16), b = g.empty({4}, DType::kBF16);
  g.fill(a, 1.0);
  g.fill(b, 1.0 / 256);  // 1 + 1/256 is not a bf16; 1 + 2/256 is
  const void* ab[] = {a.raw(), b.raw(), b.raw()};
  lane->after(lane->ready());  // after the fills on the compute stream
  lane->reduce(a.raw(), ab, 4, DType::kBF16, device::Reduction::kSum, 1);
  lane->complete();
  CHECK(max_diff(to_host(g, a), [&] { Tensor t = cpu.empty({4}, DType::kF32); cpu.fill(t, 1.0 + 2.0 / 256); return t; }()) == 0);
  // a copy on the lane follows the compute stream's work when it waits for its mark
  Tensor big = g.empty({1 << 22}, DType::kF32), dst = g.zeros({1 << 22}, DType::kF32);
  g.fill(big, 3.0);
  lane->after(lane->ready());
  lane->copy(dst.raw(), big.raw(), big.bytes());
  lane->complete();
  float last = 0;
  g.download(dst.slice((1 << 22) - 1, 1 << 22), &last);
  CHECK(last == 3.0f);
  CHECK(g.id().str() == "cuda:0/3");
}
}
}  // namespace test_cuda_cuda
