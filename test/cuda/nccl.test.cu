// NCCL with one rank per GPU: on a one-GPU machine a group of one, through each store.
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "epl/comm/nccl/nccl.cuh"
#include "epl/comm/threads/run_threads.hpp"
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
TEST_CASE("nccl one rank: sends grouped with the next receive (to itself), all_to_all, reduce_scatter, and work ordered after the compute stream") {
  device::Cuda gpu;
  comm::InProcessStore store;
  comm::NcclCommunicator c(store, 0, 1, gpu);
  CHECK(c.stream() != gpu.stream());  // a communication stream of its own
  std::vector<float> host(1 << 20);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 97);
  Tensor x = gpu.empty({1 << 20}, DType::kF32), y = gpu.zeros({1 << 20}, DType::kF32), z = gpu.zeros({1 << 20}, DType::kF32);
  gpu.upload(host.data(), x);
  // two sends to itself, queued, then their receives: each receive takes the oldest into its group
  auto s1 = c.isend(x, 0, 0), s2 = c.isend(x.slice(0, 1000), 0, 0);
  CHECK_THROWS_WITH_AS(s2.wait(), doctest::Contains("post the receive (irecv) before waiting for the send"), Error);
  c.irecv(y, 0, 0).wait();
  c.recv(z.slice(0, 1000), 0, 0);
  s1.wait();
  std::vector<float> back(host.size());
  gpu.download(y, back.data());
  CHECK(back == host);
  gpu.download(z.slice(0, 1000), back.data());
  CHECK(std::equal(back.begin(), back.begin() + 1000, host.begin()));
  // MoE's exchange and ZeRO's collectives on device buffers, in a group of one
  c.all_to_all(x, z);
  gpu.download(z, back.data());
  CHECK(back == host);
  Tensor part = gpu.empty({1 << 20}, DType::kF32);
  c.reduce_scatter(x, part, ReduceOp::kSum);
  c.all_gather_async(part, z).wait();
  gpu.download(z, back.data());
  CHECK(back == host);
  // an asynchronous all_reduce issued right after a kernel on the compute stream reduces what the kernel wrote
  gpu.fill(x, 2.5);
  c.all_reduce_async(x, z, ReduceOp::kMax).wait();
  gpu.download(z, back.data());
  CHECK(back[123456] == 2.5f);
  CHECK_THROWS_WITH_AS(c.isend(x, 0, 7), doctest::Contains("NCCL has no tags"), Error);
}
TEST_CASE("nccl: two ranks on one GPU are refused by name, before NCCL's own failure") {
  comm::InProcessStore store;
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& t) {
    device::Cuda gpu(0, t.rank() + 1);
    comm::NcclCommunicator c(store, t.rank(), 2, gpu);
  }, {.report = false}), doctest::Contains("are both on the GPU at PCI"), Error);
}
TEST_CASE("nccl trainer: ZeRO 3 over an NCCL communicator of one rank equals the GPU alone") {
  device::Cuda gpu;
  comm::InProcessStore store;
  comm::NcclCommunicator nccl(store, 0, 1, gpu);
  Context ctx(nccl);
  const test::Run over = test::train<Policies<Zero<3>>>(gpu, gpt::make_gpt(test::shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), Config{}, 3, &ctx);
  const test::Run alone = test::train<Policies<Zero<3>>>(gpu, gpt::make_gpt(test::shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), Config{}, 3);
  CHECK(test::rel(over.losses, alone.losses) < 1e-6);
  CHECK(test::rel(over.params, alone.params) < 1e-6);
}
}
