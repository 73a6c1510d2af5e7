// The multi-rank device matrix on device::Isolated: thread ranks whose buffers live in a memory
// space host code cannot touch train every strategy and policy equal to one device and to the CPU,
// so every host access and staging copy a GPU run would trip on shows up here first.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

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
                                                                             "trains on isolated:130: make the batch on this rank's "
                                                                             "device"), Error);
    device::Isolated other(131);  // another device's memory: on GPUs another GPU, or another rank's slot
    CHECK_THROWS_WITH_AS(t.step(loader.next(other)), doctest::Contains("the batch's inputs are in isolated:131 memory"), Error);
    CHECK_THROWS_WITH_AS(t.evaluate(loader.next(test::cpu())), doctest::Contains("the batch's inputs are in cpu:0 memory"), Error);
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

TEST_SUITE("cpu") {
TEST_CASE("isolated: what a stranger tried — a tensor outliving its device, two ranks on one device, a call on one rank, a lane-less world") {
  // a tensor outlives the device object that made it: its bytes go back to the process's pool of that id
  Tensor kept;
  {
    device::Isolated d(140);
    kept = d.zeros({4}, DType::kF32);
  }
  {
    device::Isolated again(140);
    std::vector<float> h(4, 1.0f);
    again.download(kept, h.data());
    CHECK(h == std::vector<float>(4, 0.0f));
  }
  kept = Tensor();
  CHECK_THROWS_WITH_AS(device::Isolated(-1), doctest::Contains("the index must be non-negative"), Error);
  // a Buffer longer than its memory, given to the lane
  {
    device::Isolated d(141);
    Tensor x = d.zeros({4}, DType::kF32), y = d.zeros({1 << 16}, DType::kF32);
    CHECK_THROWS_WITH_AS(d.lane()->copy(y.raw(), x.raw(), 4 << 16), doctest::Contains("a Buffer's count is larger than its memory"), Error);
  }
  using T = Trainer<gpt::Gpt, optim::AdamW, Policies<>, nn::SoftmaxCrossEntropy, device::Isolated>;
  // two thread ranks on one device object: one GPU slot trained by two threads
  {
    device::Isolated shared(142);
    CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 143 + c.rank());
      T t(ctx, shared, Config{}, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
      c.barrier();  // both trainers alive at once
    }, {.report = false}), doctest::Contains("isolated:142 is trained on by two threads at once"), Error);
  }
  // gather_parameters on rank 0 only fails at once on both ranks, naming it
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(145 + c.rank());
    Context ctx(c, 145 + c.rank());
    T t(ctx, d, Config{}, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
    auto ds = test::matrix::corpus();
    data::WindowLoader loader(ds, 8, 4, 1, t.data_shard());
    if (c.rank() == 0) t.gather_parameters();
    (void)t.step(loader.next(d));
  }, {.report = false}), doctest::Contains("rank 0 called trainer.gather_parameters() at step 0 while rank 1 called trainer.step()"), Error);
  // device buffers through the world handle (what epl::launch gives) without a lane: every rank fails in step, told to attach
  std::atomic<int> failed{0};
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(147 + c.rank());
    Context ctx(c, 147 + c.rank());
    try {
      if (c.rank() == 0) ctx.world().all_reduce(d.zeros({4}, DType::kF32), comm::ReduceOp::kSum);
      else {
        float x = 1;
        ctx.world().all_reduce(comm::Buffer(&x, 1, DType::kF32), comm::ReduceOp::kSum);
      }
    } catch (const Error& e) {
      if (std::string(e.what()).find("attach the device's lane") != std::string::npos) ++failed;
    }
  });
  CHECK(failed == 2);
  // parameters gathered on every rank, then a step, an evaluation and a save: the replicas' copies
  // are compared through the device's download (ZeRO 3, and without ZeRO), not read by host code
  const auto dir = std::filesystem::temp_directory_path() / ("epl-isolated-gathered-" + std::to_string(::getpid()));
  for (const char* level : {"", "v2"}) {
    CAPTURE(level);
    std::filesystem::remove_all(dir);
    std::vector<double> losses(2);
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      device::Isolated d(149 + c.rank());
      Context ctx(c, 149 + c.rank());
      Config cfg;
      cfg.set("zero.level", level);
      Trainer<gpt::Gpt, optim::AdamW, Policies<Zero<3>>, nn::SoftmaxCrossEntropy, device::Isolated> t(
          ctx, d, cfg, gpt::make_gpt(test::matrix::shape()), optim::AdamW({}));
      auto ds = test::matrix::corpus();
      data::WindowLoader loader(ds, 8, 4, 1, t.data_shard());
      (void)t.step(loader.next(d));
      t.gather_parameters();
      (void)t.save(dir);
      (void)t.evaluate(loader.next(d));
      t.gather_parameters();
      losses[static_cast<std::size_t>(c.rank())] = t.step(loader.next(d));
    });
    CHECK(std::isfinite(losses[0]));
    CHECK(losses[0] == losses[1]);
  }
  std::filesystem::remove_all(dir);
}
}
