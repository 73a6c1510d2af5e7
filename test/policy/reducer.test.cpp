// The bucketed all-reduce reducer over an arena: equal to a plain mean or sum, bucket limits
// kept, buckets contiguous ranges reduced in place (no staging in full precision), fp16 within
// its precision with staging allocated once, a group of one with nothing to do, incomplete
// buckets reported.
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/policy/reducer.hpp"

using namespace epl;

namespace test_policy_reducer {

namespace {
// A "model" of parameters with the given sizes, whose gradients the test fills by hand.
struct Params {
  std::vector<nn::Parameter> ps;
  template <class V> void visit(V&& v) {
    for (std::size_t i = 0; i < ps.size(); ++i) v(std::to_string(i), ps[i]);
  }
};
Params params_of(const std::vector<std::int64_t>& sizes) {
  Params m;
  for (auto n : sizes) m.ps.emplace_back(Shape{n}, nn::Init::zeros());
  return m;
}
float grad_value(int rank, std::size_t k, std::int64_t i) { return static_cast<float>(0.01 * (rank + 1) * ((i + k) % 13) - 0.05); }
void fill_grads(Params& m, int rank) {
  for (std::size_t k = 0; k < m.ps.size(); ++k)
    for (std::int64_t i = 0; i < m.ps[k].numel(); ++i) m.ps[k].grad.span<float>()[i] = grad_value(rank, k, i);
}
double mean_value(int n, std::size_t k, std::int64_t i) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += grad_value(r, k, i);
  return s / n;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("reducer: fused mean and sum equal the element-wise reduction, for 1 and several buckets") {
  const std::vector<std::int64_t> sizes = {1000, 10, 4097, 333, 1, 2048};
  for (int n : {2, 3})
    for (int splits : {1, 3, 5})
      for (auto op : {comm::ReduceOp::kMean, comm::ReduceOp::kSum})
        comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
          device::Cpu d(40 + c.rank());
          auto group = comm::Communicator::borrow(c);
          auto m = params_of(sizes);
          auto arena = param::materialize(m, d);
          policy::AllReduceReducer<device::Cpu> r(d, group, arena, {.max_splits = splits, .op = op});
          CHECK(r.buckets() <= static_cast<std::size_t>(splits));
          CHECK(r.bucket_range(0).begin == 0);  // the last parameter (first in backward) leaves in bucket 0
          for (int step = 0; step < 2; ++step) {
            fill_grads(m, c.rank());
            for (auto it = m.ps.rbegin(); it != m.ps.rend(); ++it) r.ready(*it);  // backward order
            r.finish();
            for (std::size_t k = 0; k < sizes.size(); ++k)
              for (std::int64_t i : {std::int64_t{0}, sizes[k] / 2, sizes[k] - 1}) {
                double want = mean_value(n, k, i) * (op == comm::ReduceOp::kSum ? n : 1);
                CHECK(m.ps[k].grad.span<float>()[i] == doctest::Approx(want).epsilon(1e-6));
              }
          }
        });
}

TEST_CASE("reducer: buckets are contiguous ranges of the arena, reduced in place with no staging") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Cpu d(60 + c.rank());
    auto group = comm::Communicator::borrow(c);
    auto m = params_of({4096, 4096, 4096});
    auto arena = param::materialize(m, d);
    const auto before = memory_stats(d.id()).current_of(MemoryCategory::kCommunication);
    policy::AllReduceReducer<device::Cpu> r(d, group, arena, {.max_splits = 3});
    CHECK(memory_stats(d.id()).current_of(MemoryCategory::kCommunication) == before);  // nothing staged
    REQUIRE(r.buckets() == 3);
    for (std::size_t k = 0; k + 1 < r.buckets(); ++k) CHECK(r.bucket_range(k).end == r.bucket_range(k + 1).begin);
    CHECK(r.bucket_range(2).end == arena.size());
    for (int step = 0; step < 3; ++step) {
      r.ready_all();
      r.finish();
    }
    CHECK(c.stats().operations == 9);
    CHECK(c.stats().bytes_sent == 3 * arena.size() * 4);  // 2(n-1)/n = 1 buffer per step for n = 2
  });
}

TEST_CASE("reducer: fp16 compression with scaling stays within half precision; its staging is allocated once") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Cpu d(50 + c.rank());
    auto group = comm::Communicator::borrow(c);
    auto m = params_of({5000, 700});
    auto arena = param::materialize(m, d);
    policy::AllReduceReducer<device::Cpu> r(d, group, arena, {.max_splits = 2, .fp16 = true, .fp16_scale = 128});
    const auto staged = memory_stats(d.id()).current_of(MemoryCategory::kCommunication);
    CHECK(staged >= arena.size() * 2);
    for (int step = 0; step < 2; ++step) {
      fill_grads(m, c.rank());
      r.ready_all();
      r.finish();
      for (std::int64_t i = 0; i < 5000; i += 97)
        CHECK(m.ps[0].grad.span<float>()[i] == doctest::Approx(mean_value(2, 0, i)).epsilon(2e-3).scale(0.01));
    }
    CHECK(memory_stats(d.id()).current_of(MemoryCategory::kCommunication) == staged);
  });
}

TEST_CASE("reducer: a group of one has nothing to reduce and moves nothing") {
  auto solo = comm::ThreadCommunicator::solo();
  auto group = comm::Communicator::borrow(solo);
  auto m = params_of({10, 20});
  auto arena = param::materialize(m, test::cpu());
  fill_grads(m, 0);
  policy::AllReduceReducer<device::Cpu> r(test::cpu(), group, arena);
  r.ready_all();
  r.finish();
  CHECK(m.ps[1].grad.span<float>()[3] == grad_value(0, 1, 3));
  CHECK(solo.stats().operations == 0);
}

TEST_CASE("reducer: finishing with gradients never marked ready is an error naming the bucket") {
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Cpu d(70 + c.rank());
    auto group = comm::Communicator::borrow(c);
    auto m = params_of({10, 10});
    auto arena = param::materialize(m, d);
    policy::AllReduceReducer<device::Cpu> r(d, group, arena, {.max_splits = 2});
    r.ready(m.ps[1]);
    r.finish();
  }, {.report = false}), doctest::Contains("gradient bucket 1 has 0 of 1 gradients ready"), Error);
}
}
}  // namespace test_policy_reducer
