// The CUDA backend against the CPU backend on the same inputs.
#include <doctest/doctest.h>

#include <cmath>

#include "epl/device/cpu/cpu.hpp"
#include "epl/device/cuda/cuda.cuh"
#include "epl/device/device.hpp"

using namespace epl;

static_assert(device_math<device::Cuda>);

namespace {
device::Cpu cpu;
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
