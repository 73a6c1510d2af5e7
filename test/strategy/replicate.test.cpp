// Replicate: data parallel on thread ranks trains exactly like one device with the same global
// batch — losses at every step and parameters after several — for examples/gpt's model and the
// quick-start network, with and without accumulation, mean and sum, fp16, 1 and several
// buckets; the bytes sent per step are the ring volume; bad setups are clear errors.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

#include <set>

using namespace epl;

namespace test_strategy_replicate {

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
struct Run {
  std::vector<double> losses, params;
  std::int64_t grad_bytes_sent = 0, grad_bytes = 0;
};
constexpr int kSteps = 5;
constexpr std::int64_t kGlobalBatch = 8;

Config config(std::int64_t micro, const char* method = "mean", int splits = 5, bool fp16 = false) {
  Config c;
  c.set("pipeline.num_micro_batch", micro);
  c.set("communication.gradients_reduce_method", method);
  c.set("communication.max_splits", splits);
  c.set("communication.fp16", fp16);
  return c;
}
// One device, the global batch.
Run single(const Config& cfg, double lr = 0.05, double clip = 0.5) {
  Trainer<gpt::Gpt, optim::Momentum> t(test::cpu(), cfg, gpt::make_gpt(tiny()), optim::Momentum({.lr = lr}), {.seed = 3, .clip_norm = clip});
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, kGlobalBatch, 17);
  Run r;
  for (int s = 0; s < kSteps; ++s) r.losses.push_back(t.step(loader.next(test::cpu())));
  r.params = test::flat_params(t.model());
  return r;
}
// n thread ranks, each its shard of the same global batches.
std::vector<Run> parallel(int n, const Config& cfg, double lr = 0.05, double clip = 0.5) {
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 100 + c.rank());
    const auto& dev = ctx.cpu();
    Trainer<gpt::Gpt, optim::Momentum> t(ctx, cfg, gpt::make_gpt(tiny()), optim::Momentum({.lr = lr}),
                                         {.seed = 3, .clip_norm = clip, .check_replicas_every = 1});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, kGlobalBatch, 17, data::Shard{c.rank(), n});
    Run& r = runs[c.rank()];
    for (int s = 0; s < kSteps; ++s) {
      auto before = t.gradient_stats().bytes_sent;
      r.losses.push_back(t.step(loader.next(dev)));
      r.grad_bytes_sent = t.gradient_stats().bytes_sent - before;
    }
    r.params = test::flat_params(t.model());
    r.grad_bytes = 4 * nn::parameter_count(t.model());
  });
  return runs;
}
void expect_equal(const std::vector<Run>& runs, const Run& ref, double tol) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    CAPTURE(r);
    CHECK(test::max_rel_diff(runs[r].losses, ref.losses) < tol);
    CHECK(test::max_rel_diff(runs[r].params, ref.params) < tol);
  }
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("replicate: 2 and 4 thread ranks equal one device, with and without accumulation, 1 and 5 buckets") {
  for (std::int64_t micro : {1, 2}) {
    const Run ref = single(config(micro));
    for (int n : {2, 4})
      for (int splits : {1, 5}) {
        CAPTURE(micro);
        CAPTURE(n);
        CAPTURE(splits);
        if (micro * n > kGlobalBatch) continue;
        expect_equal(parallel(n, config(micro, "mean", splits)), ref, 1e-5);
      }
  }
}

TEST_CASE("replicate: sum reduction equals one device with the learning rate times the replicas") {
  // without clipping: clipping a summed gradient is not clipping the mean one
  const Run ref = single(config(1), 0.05 * 2, 0);
  expect_equal(parallel(2, config(1, "sum"), 0.05, 0), ref, 1e-5);
}

TEST_CASE("replicate: EPL's per-replica clipping (clip_after_allreduce=false) differs from clipping the average") {
  Config per_replica = config(1);
  per_replica.set("communication.clip_after_allreduce", false);
  auto epl_style = parallel(2, per_replica, 0.05, 0.05);
  auto ours = parallel(2, config(1), 0.05, 0.05);
  CHECK(test::max_rel_diff(ours[0].params, single(config(1), 0.05, 0.05).params) < 1e-5);
  CHECK(test::max_rel_diff(epl_style[0].params, ours[0].params) > 1e-5);
  CHECK(epl_style[0].params == epl_style[1].params);  // still identical replicas
}

TEST_CASE("replicate: fp16 gradient compression stays within half precision of one device") {
  const Run ref = single(config(1));
  auto runs = parallel(2, config(1, "mean", 3, true));
  CHECK(test::max_rel_diff(runs[0].losses, ref.losses) < 2e-3);
  CHECK(test::max_rel_diff(runs[0].params, ref.params) < 2e-3);
  CHECK(runs[0].params == runs[1].params);  // the replicas agree exactly with each other
}

TEST_CASE("replicate: each rank sends exactly the ring volume of the gradients per step") {
  auto two = parallel(2, config(1));
  for (const auto& r : two) CHECK(r.grad_bytes_sent == r.grad_bytes);  // 2(n-1)/n = 1 for n = 2
  auto four = parallel(4, config(1));
  std::int64_t total = 0;
  for (const auto& r : four) total += r.grad_bytes_sent;
  CHECK(total == 4 * 2 * 3 * four[0].grad_bytes / 4);  // n ranks x 2(n-1)/n x bytes
}

TEST_CASE("replicate: the quick-start network on 2, 3 and 4 ranks equals one device") {
  struct Net {
    nn::Linear dense1;
    nn::Linear dense2;
  };
  auto make = [] { return Net{nn::Linear(20, 2), nn::Linear(2, 10)}; };
  Tensor x = test::random({12, 20}, 9), y = test::ids({12}, 10, 10);
  Trainer<Net, optim::Momentum> one(test::cpu(), Config{}, make(), optim::Momentum({.lr = 0.01}), {.seed = 1});
  std::vector<double> ref_losses;
  for (int s = 0; s < kSteps; ++s) ref_losses.push_back(one.step({x, y}));
  auto ref_params = test::flat_params(one.model());
  for (int n : {2, 3, 4})
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 110 + c.rank());
      Trainer<Replicate<1, Net>, optim::Momentum> t(ctx, Config{}, Replicate<1, Net>(make()), optim::Momentum({.lr = 0.01}), {.seed = 1});
      const std::int64_t per = 12 / n, lo = per * c.rank();
      std::vector<double> losses;
      for (int s = 0; s < kSteps; ++s) losses.push_back(t.step({x.slice(lo, lo + per), y.slice(lo, lo + per)}));
      CAPTURE(n);
      CHECK(test::max_rel_diff(losses, ref_losses) < 1e-5);
      CHECK(test::max_rel_diff(test::flat_params(t.model()), ref_params) < 1e-5);
    });
}

TEST_CASE("replicate: a world size the strategy cannot use, and ranks that built different models") {
  struct Net {
    nn::Linear fc;
  };
  CHECK_THROWS_WITH_AS(comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 120 + c.rank());
    Trainer<Replicate<3, Net>, optim::SGD> t(ctx, Config{}, Replicate<3, Net>(Net{nn::Linear(2, 2)}), optim::SGD({}));
  }, {.report = false}), doctest::Contains("world size 4 cannot hold replicas of 3 devices each"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 120 + c.rank());
    Trainer<Net, optim::SGD> t(ctx, Config{}, Net{nn::Linear(2, c.rank() == 0 ? 2 : 3)}, optim::SGD({}));
  }, {.report = false}), doctest::Contains("ranks 0 and 1 disagree on the model's parameter count: 9 on rank 1, 6 on rank 0"), Error);
}

TEST_CASE("replicate: ranks with different batch shares are stopped at the first step, naming both") {
  for (std::int64_t mine : {2, 3}) {  // rank 1 gets mine rows, rank 0 one
    CAPTURE(mine);
    const std::string want = "data-parallel rank 1 got a batch of " + std::to_string(mine) + " rows and rank 0 one of 1";
    CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 130 + c.rank());
      Trainer<gpt::Gpt, optim::SGD> t(ctx, Config{}, gpt::make_gpt(tiny()), optim::SGD({}));
      auto ds = test::token_corpus(4000);
      // rank 1 reads a global batch of 2 * mine windows, rank 0 one of 2 (24 vs 12 in the report)
      data::WindowLoader loader(ds, 8, c.rank() == 1 ? 2 * mine : 2, 17, data::Shard{c.rank(), 2});
      (void)t.step(loader.next(ctx.cpu()));
    }, {.report = false}), doctest::Contains(want.c_str()), Error);
  }
}

// What data-parallel ranks must agree on is checked, not assumed: each used to train on silently.
TEST_CASE("replicate: ranks that differ in a hyper-parameter, the seed, the learning rate or a config key are named") {
  auto run = [](auto setup) {
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 140 + c.rank());
      gpt::Shape shape = tiny();
      double lr = 0.05;
      TrainerOptions opt{.seed = 3};
      Config cfg;
      setup(c.rank(), shape, lr, opt, cfg);
      Trainer<gpt::Gpt, optim::Momentum> t(ctx, cfg, gpt::make_gpt(shape), optim::Momentum({.lr = lr}), opt);
    }, {.report = false});
  };
  // 2 heads or 4 heads of a width of 16: the same parameter shapes, another model
  CHECK_THROWS_WITH_AS(run([](int r, gpt::Shape& s, double&, TrainerOptions&, Config&) { s.heads = r == 0 ? 2 : 4; }),
                       doctest::Contains("ranks 0 and 1 disagree on the hyper-parameters of layer body.0.attn.1 (this rank's: dim=16 heads="),
                       Error);
  // another layer count: the structure is named, not how many facts each rank has
  CHECK_THROWS_WITH_AS(run([](int r, gpt::Shape& s, double&, TrainerOptions&, Config&) { s.layers = r == 0 ? 2 : 3; }),
                       doctest::Contains("ranks 0 and 1 disagree on the model's parameter count"), Error);
  CHECK_THROWS_WITH_AS(run([](int r, gpt::Shape&, double&, TrainerOptions& o, Config&) { o.seed = 3 + r; }),
                       doctest::Contains("disagree on TrainerOptions::seed: 4 on rank 1, 3 on rank 0"), Error);
  CHECK_THROWS_WITH_AS(run([](int r, gpt::Shape&, double& lr, TrainerOptions&, Config&) { lr = r == 0 ? 0.05 : 0.1; }),
                       doctest::Contains("disagree on lr of the optimizer's options"), Error);
  CHECK_THROWS_WITH_AS(run([](int r, gpt::Shape&, double&, TrainerOptions&, Config& c) { c.set(keys::num_micro_batch, 1 + r); }),
                       doctest::Contains("disagree on config key pipeline.num_micro_batch"), Error);
  // a text that differs past its 64th character (compared cut, these two agreed)
  const std::string long_dir = "/tmp/epl-agreement/" + std::string(60, 'd') + "/rank-";
  CHECK_THROWS_WITH_AS(run([&](int r, gpt::Shape&, double&, TrainerOptions&, Config& c) {
                         c.set(keys::checkpoint_dir, long_dir + std::to_string(r));
                       }),
                       doctest::Contains("disagree on config key checkpoint.dir"), Error);
  // compared whole, shown cut (and its control characters escaped): a 5000-character value was printed whole
  CHECK_THROWS_WITH_AS(run([&](int r, gpt::Shape&, double&, TrainerOptions&, Config& c) {
                         c.set(keys::checkpoint_dir, long_dir + std::to_string(r));
                       }),
                       doctest::Contains("...\" (86 characters) given)"), Error);
  // given empty and not given print alike, but mean two things (zero.level: no ZeRO, or the
  // program's epl::Zero<k>); one rank waited out the timeout in a collective the other never made
  for (int given_on : {0, 1}) {
    std::string message;
    try {
      run([given_on](int r, gpt::Shape&, double&, TrainerOptions&, Config& c) {
        if (r == given_on) c.set_text("zero.level", "");
      });
    } catch (const Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    // whichever rank's error is reported names its own side
    const bool reported_given = message.find("disagree on config key zero.level (this rank's: \"\" given)") != std::string::npos;
    const bool reported_default = message.find("disagree on config key zero.level (this rank's: not given, default \"\")") != std::string::npos;
    CHECK(reported_given != reported_default);
  }
  CHECK_NOTHROW(run([](int, gpt::Shape&, double&, TrainerOptions&, Config& c) { c.set_text("zero.level", ""); }));
  CHECK_NOTHROW(run([](int, gpt::Shape&, double&, TrainerOptions&, Config&) {}));
}

TEST_CASE("replicate: replicas that drift apart are caught after the first step, by default") {
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 150 + c.rank());
    Trainer<gpt::Gpt, optim::SGD> t(ctx, Config{}, gpt::make_gpt(tiny()), optim::SGD({}));
    if (c.rank() == 1) t.model().head.lm.bias.value.span<float>()[0] += 1.0f;  // one replica edited behind the trainer's back
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 4, 17, data::Shard{c.rank(), 2});
    (void)t.step(loader.next(ctx.cpu()));
  }, {.report = false}), doctest::Contains("after step 1 the parameters of data-parallel rank 1 differ from rank 0's"), Error);
}

TEST_CASE("replicate: replicas start from rank 0's copy of the parameters") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 160 + c.rank());
    Trainer<gpt::Gpt, optim::SGD> t(ctx, Config{}, gpt::make_gpt(tiny()), optim::SGD({}), {.seed = 4});
    auto mine = test::flat_params(t.model());
    std::vector<double> theirs(mine.size());
    if (c.rank() == 0) c.send(comm::Buffer(mine.data(), static_cast<std::int64_t>(mine.size()), DType::kF64), 1, 0);
    else c.recv(comm::Buffer(theirs.data(), static_cast<std::int64_t>(theirs.size()), DType::kF64), 0, 0);
    if (c.rank() == 1) CHECK(theirs == mine);
  });
}
}
}  // namespace test_strategy_replicate
