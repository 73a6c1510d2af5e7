// Replicate over MPI processes: the GPT trained on the processes of this mpirun equals the same
// run on one device with the same global batch (each process also runs the reference itself).
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/mpi/mpi.hpp"

using namespace epl;

extern epl::comm::MpiCommunicator* g_world;

namespace test_comm_mpi_dp {

TEST_SUITE("mpi") {
TEST_CASE("mpi: Replicate over MPI processes equals one device, with accumulation and fp16") {
  auto& world = *g_world;
  const gpt::Shape shape{.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16};
  const std::int64_t global_batch = 8;
  for (std::int64_t micro : {1, 2}) {
    if (global_batch % (world.size() * micro) != 0) continue;
    Config cfg;
    cfg.set("pipeline.num_micro_batch", micro);
    device::Cpu cpu;
    auto ds = test::token_corpus(4000);
    Trainer<gpt::Gpt, optim::Momentum> one(cpu, cfg, gpt::make_gpt(shape), optim::Momentum({.lr = 0.05}), {.seed = 3, .clip_norm = 0.5});
    data::WindowLoader whole(ds, 8, global_batch, 17);
    Context ctx(world);
    Trainer<gpt::Gpt, optim::Momentum> dp(ctx, cfg, gpt::make_gpt(shape), optim::Momentum({.lr = 0.05}),
                                          {.seed = 3, .clip_norm = 0.5, .check_replicas_every = 1});
    data::WindowLoader part(ds, 8, global_batch, 17, data::Shard{world.rank(), world.size()});
    for (int s = 0; s < 5; ++s) {
      double a = one.step(whole.next(cpu)), b = dp.step(part.next(cpu));
      CHECK(b == doctest::Approx(a).epsilon(1e-5));
    }
    CAPTURE(micro);
    CHECK(test::max_rel_diff(test::flat_params(dp.model()), test::flat_params(one.model())) < 1e-5);
  }
}
}

TEST_SUITE("mpi") {
TEST_CASE("mpi: ZeRO stages 1, 2 and 3 over MPI processes equal the same run without ZeRO, with accumulation") {
  auto& world = *g_world;
  const gpt::Shape shape{.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16};
  const std::int64_t global_batch = 8;
  auto run = [&](const char* level, std::int64_t micro) {
    Config cfg;
    cfg.set("zero.level", level);
    cfg.set("pipeline.num_micro_batch", micro);
    Context ctx(world);
    Trainer<gpt::Gpt, optim::AdamW, Policies<Zero<3>>> t(ctx, cfg, gpt::make_gpt(shape), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                                         {.seed = 3, .clip_norm = 0.5, .check_replicas_every = 1});
    auto ds = test::token_corpus(4000);
    data::WindowLoader part(ds, 8, global_batch, 17, t.data_shard());
    std::vector<double> losses;
    for (int s = 0; s < 4; ++s) losses.push_back(t.step(part.next(ctx.cpu())));
    t.gather_parameters();
    return std::pair{losses, test::flat_params(t.model())};
  };
  for (std::int64_t micro : {1, 2}) {
    if (global_batch % (world.size() * micro) != 0) continue;
    const auto plain = run("", micro);
    for (const char* level : {"v0", "v1", "v2"}) {
      CAPTURE(micro);
      CAPTURE(level);
      const auto zero = run(level, micro);
      CHECK(test::max_rel_diff(zero.first, plain.first) <= 1e-6);
      CHECK(test::max_rel_diff(zero.second, plain.second) <= 1e-6);
    }
  }
}
}
}  // namespace test_comm_mpi_dp
