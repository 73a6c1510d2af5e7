// Fused gradient all-reduce: equal to a plain mean, bucket limits kept, fp16 within its
// precision, staging allocated once, incomplete buckets reported.
#include <optional>

#include "../helpers.hpp"
#include "epl/comm/buckets.hpp"
#include "epl/comm/run_threads.hpp"

using namespace epl;

namespace {
std::vector<Tensor> grads_of(int rank, const std::vector<std::int64_t>& sizes, device::Cpu& d) {
  std::vector<Tensor> g;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    Tensor t = d.empty({sizes[k]}, DType::kF32, MemoryCategory::kGradients);
    for (std::int64_t i = 0; i < sizes[k]; ++i) t.span<float>()[i] = static_cast<float>(0.01 * (rank + 1) * ((i + k) % 13) - 0.05);
    g.push_back(t);
  }
  return g;
}
double mean_value(int n, std::size_t k, std::int64_t i) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += static_cast<float>(0.01 * (r + 1) * ((i + k) % 13) - 0.05);
  return s / n;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("buckets: fused mean and sum equal the element-wise reduction, for 1 and several buckets") {
  const std::vector<std::int64_t> sizes = {1000, 10, 4097, 333, 1, 2048};
  for (int n : {2, 3, 4})
    for (int splits : {1, 3, 5})
      for (auto op : {comm::ReduceOp::kMean, comm::ReduceOp::kSum})
        comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
          device::Cpu d(40 + c.rank());
          auto g = grads_of(c.rank(), sizes, d);
          std::optional<comm::GradientBuckets<comm::ThreadCommunicator>> b;
          b.emplace(c, g, comm::BucketOptions{.max_splits = splits, .op = op});
          CHECK(b->buckets() <= static_cast<std::size_t>(splits));
          CHECK(b->bucket_of(0) == 0);  // the first gradient produced leaves in the first bucket
          for (int step = 0; step < 2; ++step) {
            if (step == 1) {
              g = grads_of(c.rank(), sizes, d);
              b.emplace(c, g, comm::BucketOptions{.max_splits = splits, .op = op});
            }
            for (std::size_t k = 0; k < g.size(); ++k) b->ready(k);
            b->finish();
            for (std::size_t k = 0; k < g.size(); ++k)
              for (std::int64_t i : {std::int64_t{0}, sizes[k] / 2, sizes[k] - 1}) {
                double want = mean_value(n, k, i) * (op == comm::ReduceOp::kSum ? n : 1);
                CHECK(g[k].span<float>()[i] == doctest::Approx(want).epsilon(1e-6));
              }
          }
        });
}

TEST_CASE("buckets: fp16 compression with scaling stays within half precision") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Cpu d(50 + c.rank());
    auto g = grads_of(c.rank(), {5000, 700}, d);
    comm::GradientBuckets<comm::ThreadCommunicator> b(c, g, {.max_splits = 2, .fp16 = true, .fp16_scale = 128});
    b.ready(0);
    b.ready(1);
    b.finish();
    for (std::int64_t i = 0; i < 5000; i += 97) CHECK(g[0].span<float>()[i] == doctest::Approx(mean_value(2, 0, i)).epsilon(2e-3).scale(0.01));
  });
}

TEST_CASE("buckets: staging is allocated once and reused across steps") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Cpu d(60 + c.rank());
    auto g = grads_of(c.rank(), {4096, 4096, 4096}, d);
    comm::GradientBuckets<comm::ThreadCommunicator> b(c, g, {.max_splits = 3});
    const auto comm_bytes = memory_stats(d.id()).current_of(MemoryCategory::kCommunication);
    CHECK(comm_bytes == 3 * 4096 * 4);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t k = 0; k < 3; ++k) b.ready(k);
      b.finish();
    }
    CHECK(memory_stats(d.id()).current_of(MemoryCategory::kCommunication) == comm_bytes);
    CHECK(c.stats().operations == 9);
  });
}

TEST_CASE("buckets: finishing with gradients never marked ready is an error") {
  CHECK_THROWS_WITH_AS(comm::run_threads(1, [&](comm::ThreadCommunicator& c) {
    device::Cpu d;
    auto g = grads_of(0, {10, 10}, d);
    comm::GradientBuckets<comm::ThreadCommunicator> b(c, g, {.max_splits = 2});
    b.ready(0);
    b.finish();
  }), doctest::Contains("bucket 1 has 0 of 1 gradients ready"), Error);
}
}
