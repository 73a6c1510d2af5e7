// Uneven devices (cluster.rank_speeds, the Whale paper's heterogeneous balancing): data-parallel
// ranks read batch shares in proportion to their speed and a pipeline's automatic cut gives a
// faster stage more of the model, and training stays equal to one device on the same global
// batch; bad speeds and a loader that ignores the shares are errors naming the fix.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace test_strategy_uneven {

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
constexpr int kSteps = 3;

struct Run {
  std::vector<double> losses, params;
  std::int64_t rows = 0;
  std::size_t units = 0;
};

Config config(const char* speeds, std::initializer_list<std::pair<const char*, std::int64_t>> ints = {}) {
  Config c;
  if (speeds) c.set("cluster.rank_speeds", speeds);
  for (const auto& [k, v] : ints) c.set(k, v);
  return c;
}

// n thread ranks train gpt (cut into pipeline.num_stages by auto.auto_parallel when given) on
// global batches of `batch`; each rank's losses, rows and units, and its parameters after the steps.
std::vector<Run> train(int n, Config cfg, std::int64_t batch, bool ignore_shares = false) {
  if (cfg.get(keys::num_stages) > 1) cfg.set(keys::auto_parallel, true);
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 500 + c.rank());
    Trainer<gpt::Gpt, optim::AdamW> t(ctx, cfg, gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01, .eps = 1e-3}), {.seed = 5, .clip_norm = 0.5});
    auto ds = test::token_corpus(4000);
    auto shard = t.data_shard();
    if (ignore_shares) shard.weights.clear();
    data::WindowLoader loader(ds, 8, batch, 17, shard);
    auto& r = runs[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < kSteps; ++s) {
      const auto b = loader.next(ctx.cpu());
      r.rows = b.inputs.dim(0);
      r.losses.push_back(t.step(b));
    }
    for (const auto& chunk : t.local_chunks()) r.units += chunk.units().size();
    nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
      if (p.materialized())
        for (float x : p.value.span<float>()) r.params.push_back(x);
    });
  });
  return runs;
}
Run one_device(std::int64_t batch) { return train(1, config(nullptr), batch)[0]; }
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("uneven: batch shares follow the speeds by largest remainder, a row each at least") {
  CHECK(strategy::share_rows(6, 2, {1, 0.5}) == std::vector<std::int64_t>{4, 2});
  CHECK(strategy::share_rows(7, 3, {1, 0.5, 0.25}) == std::vector<std::int64_t>{4, 2, 1});
  CHECK(strategy::share_rows(8, 2) == std::vector<std::int64_t>{4, 4});
  CHECK(strategy::share_rows(3, 3, {100, 1, 1}) == std::vector<std::int64_t>{1, 1, 1});
  const strategy::RowShare second{1, 3, {1, 0.5, 0.25}};
  CHECK(second.rows_of(7) == 2);
  CHECK(second.first_of(7) == 4);
  CHECK(strategy::share_rows(12, 2, {1, 0.5}, 2) == std::vector<std::int64_t>{8, 4});  // whole micro-batches of 2 rows
  CHECK_THROWS_WITH_AS(strategy::share_rows(2, 3, {1, 1, 1}),
                       doctest::Contains("a global batch of 2 rows cannot give each of 3 data-parallel ranks its share by speed "
                                         "(cluster.rank_speeds): one row at least; use a batch of at least 3 rows"), Error);
  CHECK_THROWS_WITH_AS(strategy::share_rows(6, 2, {1, 2}, 4), doctest::Contains("a whole number of its 4 micro-batches, one at least; use a "
                                                                               "batch of at least 8 rows, a multiple of 4"), Error);
  CHECK_THROWS_WITH_AS(strategy::share_rows(7, 2, {1, 1}, 2), doctest::Contains("use a batch of at least 4 rows, a multiple of 2"), Error);
}

TEST_CASE("uneven: data-parallel ranks of different speeds train as one device (2 and 3 ranks, micro-batches)") {
  const Run ref6 = one_device(6), ref7 = one_device(7), ref12 = one_device(12);
  const auto two = train(2, config("1,0.5"), 6);
  CHECK(two[0].rows == 4);
  CHECK(two[1].rows == 2);
  const auto three = train(3, config("1,0.5,0.25"), 7);
  CHECK(three[2].rows == 1);
  const auto micro = train(2, config("1,0.5", {{"pipeline.num_micro_batch", 2}}), 12);  // 8 and 4 rows: 4 and 2 a micro-batch
  CHECK(micro[0].rows == 8);
  for (const auto* runs : {&two, &three, &micro}) {
    const Run& ref = runs == &two ? ref6 : runs == &three ? ref7 : ref12;
    for (const auto& r : *runs) {
      CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-5);
      CHECK(test::max_rel_diff(r.params, ref.params) <= 1e-5);
    }
  }
}

TEST_CASE("uneven: a pipeline's automatic cut gives the faster stage more units, and trains as one device") {
  const Run ref = one_device(8), ref12 = one_device(12);
  const auto even = train(2, config(nullptr, {{"pipeline.num_stages", 2}, {"pipeline.num_micro_batch", 2}}), 8);
  const auto slow_second = train(2, config("1,0.25", {{"pipeline.num_stages", 2}, {"pipeline.num_micro_batch", 2}}), 8);
  CHECK(slow_second[0].units > even[0].units);
  CHECK(slow_second[0].units + slow_second[1].units == even[0].units + even[1].units);
  for (const auto& r : slow_second) CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-5);
  // 2 stages x 2 replicas, one slow rank: its replica reads fewer rows, its stage gets fewer units
  const auto mixed = train(4, config("1,1,1,0.5", {{"pipeline.num_stages", 2}, {"pipeline.num_micro_batch", 2}}), 12);
  for (const auto& r : mixed) CHECK(test::max_rel_diff(r.losses, ref12.losses) <= 1e-5);
  CHECK(mixed[0].rows == 8);  // replica 0 (ranks 0 and 2); replica 1 holds the slow rank 3
  CHECK(mixed[1].rows == 4);
}

TEST_CASE("uneven: bad speeds and a loader that ignores the shares are errors naming the fix") {
  CHECK_THROWS_WITH_AS(train(2, config("1"), 6), doctest::Contains("cluster.rank_speeds gives 1 speed for 2 ranks"), Error);
  CHECK_THROWS_WITH_AS(train(2, config("1,0"), 6), doctest::Contains("rank 1's speed 0 is not a positive finite number"), Error);
  CHECK_THROWS_WITH_AS(train(2, config("1,fast"), 6), doctest::Contains("\"fast\" is not a number"), Error);
  Config c;  // checked when set, as every key
  for (const char* bad : {"1,,2", ",", "1,0.5,", "MEASURE", "-1,1", "inf,1"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(c.set("cluster.rank_speeds", bad), doctest::Contains("config key cluster.rank_speeds"), Error);
  }
  CHECK_NOTHROW(c.set("cluster.rank_speeds", " 1, 0.5"));
  CHECK_THROWS_WITH_AS(train(2, config("1,0.5"), 6, true),
                       doctest::Contains("got 3 rows, but its share of the global batch of 6 rows by cluster.rank_speeds is 4"), Error);
}

TEST_CASE("uneven: measured speeds give a share to every rank and train as one device") {
  const auto runs = train(2, config("measure"), 8);
  const Run ref = one_device(8);
  CHECK(runs[0].rows + runs[1].rows == 8);
  for (const auto& r : runs) CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-5);
}
}
}  // namespace test_strategy_uneven
