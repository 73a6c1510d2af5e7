// Thread ranks sharing one GPU: each rank its own device::Cuda (its own stream and memory
// account), their buffers moved by the ranks' lanes (stream-ordered device-to-device copies and
// reduction kernels): every strategy and policy on 2 and 4 ranks equals one GPU and the CPU. The
// same matrix runs on device::Isolated in CI (test/isolated).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>

#include "../multirank_matrix.hpp"
#include "epl/device/cuda/cuda.cuh"

using namespace epl;

namespace test_cuda_multirank {

TEST_SUITE("cuda") {
TEST_CASE("cuda thread ranks sharing one GPU: every strategy and policy on 2 and 4 ranks equals one GPU and the CPU") {
  // f32: the GPU sums in other orders than the CPU (1e-4, as the one-GPU tests); AMP: bf16 GEMMs
  test::matrix::run_all([](int r) { return std::make_unique<device::Cuda>(0, r + 1); }, 1e-4, 1e-4, 2e-3);
  test::matrix::print_table("device::Cuda: thread ranks sharing GPU 0");
}
TEST_CASE("cuda thread ranks: each rank's memory on an account of its own; the lanes' all_reduce against a device-to-device copy") {
  constexpr std::int64_t kCount = std::int64_t{32} << 20;  // 128 MiB of f32
  double copy_s = 0;
  {
    device::Cuda d(0, 9);
    Tensor a = d.zeros({kCount}, DType::kF32), b = d.zeros({kCount}, DType::kF32);
    d.synchronize();
    for (int rep = 0; rep < 6; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      d.copy(a, b);
      d.synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) copy_s = copy_s == 0 ? s : std::min(copy_s, s);
    }
  }
  for (int n : {2, 4}) {
    std::vector<double> seconds(static_cast<std::size_t>(n), 0);
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      device::Cuda d(0, 20 + c.rank());
      c.attach(d.lane());
      Tensor x = d.empty({kCount}, DType::kF32);
      d.fill(x, 1.0 + c.rank());
      d.synchronize();
      CHECK(memory_stats(d.id()).current_of(MemoryCategory::kActivations) == kCount * 4);  // this rank's own account
      double best = 0;
      for (int rep = 0; rep < 6; ++rep) {
        c.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        c.all_reduce(x, comm::ReduceOp::kSum);
        d.synchronize();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) best = best == 0 ? s : std::min(best, s);
      }
      std::vector<float> first(4);
      d.download(x.slice(0, 4), first.data());
      float expect = static_cast<float>(n * (n + 1) / 2);  // 1 + .. + n after the first; each later one multiplies by n
      for (int rep = 1; rep < 6; ++rep) expect *= static_cast<float>(n);
      CHECK(first[0] == doctest::Approx(expect));
      seconds[static_cast<std::size_t>(c.rank())] = best;
    });
    const double s = *std::max_element(seconds.begin(), seconds.end());
    const double bytes = 2.0 * (n - 1) / n * kCount * 4;  // what a ring moves per rank
    std::printf("all_reduce of 128 MiB on %d thread ranks sharing the GPU: %.2f ms, %.0f GB/s bus bandwidth; a device-to-device "
                "copy of 128 MiB: %.2f ms, %.0f GB/s (read + write)\n",
                n, s * 1e3, bytes / s / 1e9, copy_s * 1e3, 2.0 * kCount * 4 / copy_s / 1e9);
  }
}
}
}  // namespace test_cuda_multirank
