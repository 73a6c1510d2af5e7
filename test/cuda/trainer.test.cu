// Training on the GPU equals training on the CPU: the same model, data, seed and steps on
// device::Cuda and device::Cpu give the same losses and parameters (f32, relative 1e-4: the two
// devices sum in different orders; AdamW's eps is 1e-3, so that parameters whose gradients are
// rounding noise do not amplify it to whole steps), for each policy one GPU can run.
#include <doctest/doctest.h>

#include "train_helpers.hpp"

using namespace epl;

namespace test_cuda_trainer {
using test::Run;
using test::rel;
using test::shape;
using test::train;

namespace {
template <class Policy, class Model, class Optimizer>
void same_on_both(Model model, Optimizer opt, Config cfg, double tol = 1e-4) {
  device::Cuda gpu;
  device::Cpu host;
  const Run g = train<Policy>(gpu, model, opt, cfg, 4), c = train<Policy>(host, model, opt, cfg, 4);
  CAPTURE(c.losses);
  CAPTURE(g.losses);
  CHECK(rel(g.losses, c.losses) < tol);
  CHECK(rel(g.params, c.params) < tol);
  CHECK(c.losses.back() < c.losses.front());  // it learns
}
struct DropoutNet {
  nn::Embedding tok;
  nn::Linear up;
  nn::GELU act;
  nn::Dropout drop;
  nn::Linear down;
};
}  // namespace

TEST_SUITE("cuda") {
TEST_CASE("cuda trainer: the GPT trained with AdamW, clipping and two micro-batches equals the CPU") {
  Config cfg;
  cfg.set("pipeline.num_micro_batch", 2);
  same_on_both<Policies<>>(gpt::make_gpt(shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), cfg);
}
TEST_CASE("cuda trainer: ZeRO 1, 2 and 3, recomputation and offload equal the CPU") {
  same_on_both<Policies<Zero<1>>>(gpt::make_gpt(shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), Config{});
  same_on_both<Policies<Zero<3>>>(gpt::make_gpt(shape()), optim::Momentum({.lr = 0.1, .momentum = 0.9}), Config{});
  Config rc;
  rc.set("gradient_checkpoint.type", "auto");
  same_on_both<Policies<>>(gpt::make_gpt(shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), rc);
  Config off;
  off.set("zero.level", "v2");
  off.set("offload.level", "v0");
  same_on_both<Policies<Zero<3>, Offload<offload::V0>>>(gpt::make_gpt(shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), off);
}
TEST_CASE("cuda trainer: bf16 mixed precision on the tensor cores follows the CPU's rounded GEMMs") {
  Config cfg;
  cfg.set("amp.level", "O1");
  same_on_both<Policies<Amp<amp::BF16>>>(gpt::make_gpt(shape()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), cfg, 2e-3);
}
TEST_CASE("cuda trainer: dropout keyed as on the CPU, and SGD with Nesterov momentum") {
  DropoutNet net{nn::Embedding(96, 64), nn::Linear(64, 256), nn::GELU{}, nn::Dropout(0.2), nn::Linear(256, 96)};
  same_on_both<Policies<>>(net, optim::Momentum({.lr = 0.05, .momentum = 0.9, .nesterov = true}), Config{});
}
TEST_CASE("cuda trainer: a token id past the vocabulary is an error naming it, not garbage") {
  device::Cuda gpu;
  Trainer<gpt::Gpt, optim::AdamW, Policies<>, nn::SoftmaxCrossEntropy, device::Cuda> t(gpu, Config{}, gpt::make_gpt(shape()),
                                                                                      optim::AdamW({}));
  std::vector<std::int32_t> in(2 * 40, 3), out(2 * 40, 4);
  in[17] = 500;
  Batch b{gpu.empty({2, 40}, DType::kI32), gpu.empty({2, 40}, DType::kI32)};
  gpu.upload(in.data(), b.inputs);
  gpu.upload(out.data(), b.targets);
  CHECK_THROWS_WITH_AS(t.step(b), doctest::Contains("id 500 outside [0, 96)"), Error);
}
}
}  // namespace test_cuda_trainer
