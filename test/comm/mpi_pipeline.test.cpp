// Pipeline over MPI processes: the GPT cut into stages across the processes of this mpirun
// (2 stages, and as many stages as processes; with 4 processes also 2 stages x 2 replicas),
// every schedule and m in {1, 4, 8}, equals the same run on one device with the same global
// batch: the loss of every step on every rank, every parameter a rank holds, and every rank's
// prediction of a held-out batch.
#include <map>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/mpi/mpi.hpp"

using namespace epl;

extern epl::comm::MpiCommunicator* g_world;

namespace test_comm_mpi_pipeline {

namespace {
struct Run {
  std::vector<double> losses;
  std::map<std::int64_t, std::vector<double>> params;  // by ordinal: those this rank holds
  std::vector<double> outputs;                         // trainer.predict on a held-out batch: this rank's rows
  std::int64_t first_row = 0;
};
template <class Make>
Run train(Context& ctx, const Config& cfg, Make make) {
  Trainer<gpt::Gpt, optim::Momentum> t(ctx, cfg, make(), optim::Momentum({.lr = 0.05}), {.seed = 3, .clip_norm = 0.5});
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
  Run r;
  for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
  data::WindowLoader held_out(ds, 8, 8, 29, t.data_shard());
  r.outputs = test::values(t.predict(held_out.next(ctx.cpu()).inputs));  // the last stage's, on every stage
  r.first_row = t.data_shard().first_of(8);
  nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
    if (p.materialized()) r.params[p.ordinal] = test::values(p.value);
  });
  return r;
}
}  // namespace

TEST_SUITE("mpi") {
TEST_CASE("mpi: a pipeline over MPI processes equals one device, every schedule, m in {1, 4, 8}, with data parallel") {
  auto& world = *g_world;
  const gpt::Shape shape{.vocab = 32, .context = 8, .layers = 4, .heads = 2, .dim = 16};
  auto make = [&] { return gpt::make_gpt(shape); };
  for (std::int64_t m : {1, 4, 8}) {
    Config one;
    one.set(keys::num_micro_batch, m);
    Context solo = Context::solo(90, 1);
    const Run ref = train(solo, one, make);
    for (int stages : {2, world.size()}) {
      if (stages == 2 && world.size() == 2 && m == 1) continue;  // the same case as below
      for (const char* schedule : {"PreferForward", "PreferBackward", "Interleaved"}) {
        if (std::string(schedule) == "Interleaved" && m % stages != 0) continue;
        if (8 % (m * (world.size() / stages)) != 0) continue;  // each replica's rows divide into m
        Config cfg = one;
        cfg.set(keys::num_stages, stages).set(keys::auto_parallel, true).set(keys::pipeline_strategy, schedule);
        CAPTURE(m);
        CAPTURE(stages);
        CAPTURE(schedule);
        Context ctx(world, -1, 1);  // one thread a process: 4 processes share 2 cores
        const Run got = train(ctx, cfg, make);
        CHECK(test::max_rel_diff(got.losses, ref.losses) < 1e-5);
        CHECK_FALSE(got.params.empty());
        for (const auto& [ordinal, values] : got.params) CHECK(test::max_rel_diff(values, ref.params.at(ordinal)) < 1e-5);
        CHECK(test::max_rel_diff(got.outputs, test::rows_like(ref.outputs, 8, got.outputs, got.first_row)) < 1e-5);
      }
    }
  }
}
}
}  // namespace test_comm_mpi_pipeline
