// The multi-rank device matrix on device::Isolated: thread ranks whose buffers live in a memory
// space host code cannot touch train every strategy and policy equal to one device and to the CPU,
// so every host access and staging copy a GPU run would trip on shows up here first.
#include <doctest/doctest.h>

#include "../helpers.hpp"
#include "../multirank_matrix.hpp"
#include "epl/device/isolated/isolated.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("isolated matrix: every strategy and policy on 2 and 4 ranks of separate memory equals one device and the CPU") {
  // device::Isolated runs the CPU's kernels: one device of it equals the CPU exactly
  test::matrix::run_all([](int r) { return std::make_unique<device::Isolated>(120 + r); }, 1e-5, 1e-12, 1e-5);
  test::matrix::print_table("device::Isolated");
}
}

TEST_SUITE("cpu") {
TEST_CASE("isolated trainer: a host batch, mixed devices in one data-parallel group, and a backend without a lane are errors") {
  using T = Trainer<gpt::Gpt, optim::AdamW, Policies<>, nn::SoftmaxCrossEntropy, device::Isolated>;
  // a batch in host memory handed to a trainer on device memory
  {
    device::Isolated d(130);
    T t(d, Config{}, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
    auto ds = test::matrix::corpus();
    data::WindowLoader loader(ds, 8, 4, 1, t.data_shard());
    CHECK_THROWS_WITH_AS(t.step(loader.next(test::cpu())), doctest::Contains("the batch's inputs are in cpu:0 memory, and this rank "
                                                                             "trains on isolated:130: make the batch on the device"), Error);
    CHECK(std::isfinite(t.step(loader.next(d))));  // the same batch on the device trains
  }
  // rank 0 on device memory, rank 1 on its CPU: one data-parallel group over two memory spaces
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 132 + c.rank());
    if (c.rank() == 0) {
      device::Isolated d(134);
      T t(ctx, d, Config{}, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
    } else {
      Trainer<gpt::Gpt, optim::AdamW> t(ctx, Config{}, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
    }
  }, {.report = false}), doctest::Contains("rank 1 passes host memory, rank 0 device memory; the ranks of a group move buffers of one "
                                           "memory space"), Error);
}
}
