// NCCL with one rank per GPU: on a one-GPU machine a group of one, through each store.
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "epl/comm/nccl/nccl.cuh"
#include "train_helpers.hpp"

using namespace epl;
using comm::Buffer;
using comm::ReduceOp;

TEST_SUITE("nccl") {
TEST_CASE("nccl: a one-rank group reduces, gathers, broadcasts and splits, bootstrapped through a file store") {
  device::Cuda gpu;
  auto dir = std::filesystem::temp_directory_path() / ("epl_nccl_" + std::to_string(::getpid()));
  comm::FileStore store(dir, "run");
  comm::NcclCommunicator c(store, 0, 1, gpu);
  CHECK(c.size() == 1);
  std::vector<float> host = {1, 2, 3, 4};
  Tensor x = gpu.empty({4}, DType::kF32), y = gpu.empty({4}, DType::kF32);
  gpu.upload(host.data(), x);
  c.all_reduce(x, y, ReduceOp::kMean);
  std::vector<float> back(4);
  gpu.download(y, back.data());
  CHECK(back == host);
  c.all_gather(x, y);
  c.broadcast(y, 0);
  c.all_reduce_async(x, x, ReduceOp::kSum).wait();
  gpu.download(x, back.data());
  CHECK(back == host);
  auto sub = c.split(0, 0);
  CHECK(sub.size() == 1);
  CHECK_THROWS_WITH_AS(c.send(x, 0, 3), doctest::Contains("has no tags"), Error);
  store.clear();
  std::filesystem::remove_all(dir);
}
TEST_CASE("nccl trainer: over an NCCL communicator of one rank, the same as alone") {
  device::Cuda gpu;
  auto dir = std::filesystem::temp_directory_path() / ("epl_nccl_trainer_" + std::to_string(::getpid()));
  comm::FileStore store(dir, "run");
  comm::NcclCommunicator nccl(store, 0, 1, gpu);
  Context ctx(nccl);
  const test::Run over = test::train<Policies<Zero<1>>>(gpu, gpt::make_gpt(test::shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), Config{}, 3, &ctx);
  const test::Run alone = test::train<Policies<Zero<1>>>(gpu, gpt::make_gpt(test::shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), Config{}, 3);
  CHECK(test::rel(over.losses, alone.losses) < 1e-6);
  CHECK(test::rel(over.params, alone.params) < 1e-6);
  store.clear();
  std::filesystem::remove_all(dir);
}
}
