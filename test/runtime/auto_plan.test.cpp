// auto.auto_parallel = true without pipeline.num_stages: the planner picks one plan for every
// rank, the Trainer runs it and trains as one device does; a budget nothing fits is an error that
// says by how much; without the key the configuration is left as it is.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/runtime/auto_plan.hpp"

using namespace epl;

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
using All = Policies<Zero<3>>;
constexpr std::int64_t kBatch = 8;

// n thread ranks: each plans (auto_plan), trains `steps` steps and returns its losses and the keys it ran.
std::vector<std::pair<std::vector<double>, std::string>> planned_runs(int n, const Config& cfg, int steps, std::int64_t budget = 0) {
  std::vector<std::pair<std::vector<double>, std::string>> out(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 400 + c.rank());
    auto ds = test::token_corpus(4000);
    data::WindowLoader probe(ds, 8, 4, 99);
    const auto model = gpt::make_gpt(tiny());
    const Config planned = auto_plan<gpt::Gpt, optim::AdamW, All>(ctx, cfg, model, probe.next(ctx.cpu()), kBatch,
                                                                  {.budget = budget, .repeats = 1, .print = c.rank() == 0});
    Trainer<gpt::Gpt, optim::AdamW, All> t(ctx, planned, model, optim::AdamW({.lr = 0.01}), {.seed = 5});
    data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
    auto& r = out[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < steps; ++s) r.first.push_back(t.step(loader.next(ctx.cpu())));
    for (const char* k : {"pipeline.num_stages", "pipeline.num_micro_batch", "zero.level", "gradient_checkpoint.type"})
      r.second += std::string(k) + "=" + planned.value_text(k) + " ";
  });
  return out;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("auto_plan: every rank runs the plan rank 0 chose, and trains as one device does") {
  Config cfg;
  cfg.set(keys::auto_parallel, true);
  const auto runs = planned_runs(2, cfg, 3);
  Config one;
  one.set("zero.level", "");
  std::vector<double> ref;
  {
    auto ds = test::token_corpus(4000);
    Trainer<gpt::Gpt, optim::AdamW, All> t(test::cpu(), one, gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01}), {.seed = 5});
    data::WindowLoader loader(ds, 8, kBatch, 17);
    for (int s = 0; s < 3; ++s) ref.push_back(t.step(loader.next(test::cpu())));
  }
  for (const auto& run : runs) {
    CAPTURE(run.second);
    CHECK(run.second == runs[0].second);
    CHECK(test::max_rel_diff(run.first, ref) <= 2e-5);
  }
}

TEST_CASE("auto_plan: a budget nothing fits says by how much; without the key nothing changes") {
  Config cfg;
  cfg.set(keys::auto_parallel, true);
  CHECK_THROWS_WITH_AS(planned_runs(1, cfg, 1, 1000), doctest::Contains("no plan of the model fits 1000 bytes per rank"), Error);
  Config plain;
  plain.set("pipeline.num_micro_batch", 2);
  comm::run_threads(1, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 410);
    auto ds = test::token_corpus(4000);
    data::WindowLoader probe(ds, 8, 4, 99);
    const Config same = auto_plan<gpt::Gpt, optim::AdamW, All>(ctx, plain, gpt::make_gpt(tiny()), probe.next(ctx.cpu()), kBatch);
    CHECK(same.value_text("pipeline.num_micro_batch") == "2");
    CHECK(same.source(keys::zero_level) == Config::Source::kDefault);
  });
}
}
