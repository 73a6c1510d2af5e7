// The EMA of the weights (epl::Ema, ema.decay): the worked example of a policy in one home
// (policy/homes/ema.hpp). The average follows its rule step by step (against the plain run's
// weights), is the same on 1, 2 and 4 thread ranks under ZeRO 0, 1 and 3, leaves training as it
// was, survives a checkpoint (and starts from the weights when the checkpoint had none), is
// counted in the planner's exact state bytes, and each bad input is named.
#include <filesystem>
#include <unistd.h>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/checkpoint/checkpoint.hpp"
#include "epl/checkpoint/export.hpp"
#include "epl/plan/estimate.hpp"

using namespace epl;
namespace fs = std::filesystem;

namespace test_policy_ema {

namespace {
using Plain = Policies<Zero<3>>;
using Averaged = Policies<Zero<3>, Ema>;
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }

struct Run {
  std::vector<double> losses, params, ema;
  std::vector<std::vector<double>> weights;  // after each step (the first: before any)
  std::vector<std::int64_t> skipped;         // AMP's skipped steps so far, after each step
  std::int64_t optimizer_bytes = 0;          // the rank's optimizer-state account after the steps
  std::int64_t predicted_bytes = 0;          // plan::predict_state's for the rank
  std::int64_t host_bytes = 0, predicted_host_bytes = 0;  // the same in the host pool (offload)
};

Config config(const char* zero, double decay = 0.9) {
  Config c;
  c.set("zero.level", zero);
  c.set("pipeline.num_micro_batch", std::int64_t{2});
  if (decay >= 0) c.set("ema.decay", decay);
  return c;
}

struct Options {
  int steps = 4;
  double amp_init_scale = 65536;      // TrainerOptions::amp_init_scale
  std::int64_t amp_growth_interval = 2000;
  bool record = false;                 // every step's weights
  std::string save{}, resume{};        // a checkpoint directory to save into after `steps`, or to resume from first
};

template <class P>
std::vector<Run> train(int n, const Config& cfg, int first_index, Options o = {}) {
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, first_index + c.rank());
    Config mine = cfg;
    if (!o.save.empty()) mine.set("checkpoint.dir", o.save);
    Trainer<gpt::Gpt, optim::AdamW, P> t(ctx, mine, gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                       {.seed = 5, .amp_init_scale = o.amp_init_scale, .amp_growth_interval = o.amp_growth_interval});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    t.watch(loader);
    if (!o.resume.empty()) REQUIRE(t.resume(o.resume).has_value());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    auto weights = [&] {
      t.gather_parameters();
      return test::flat_params(t.model());
    };
    if (o.record) r.weights.push_back(weights());
    for (int s = 0; s < o.steps; ++s) {
      r.losses.push_back(t.step(loader.next(ctx.cpu())));
      r.skipped.push_back(t.skipped_steps());
      if (o.record) r.weights.push_back(weights());
    }
    r.optimizer_bytes = memory_stats(ctx.cpu().id()).current_of(MemoryCategory::kOptimizerState);
    const auto predicted = plan::predict_state<gpt::Gpt, P>(gpt::make_gpt(tiny()), t.plan(), n, optim::AdamW::kStateSlots);
    r.predicted_bytes = predicted.front().optimizer_state;
    r.host_bytes = memory_stats({DeviceKind::kHost, ctx.cpu().id().index}).current_of(MemoryCategory::kOptimizerState);
    r.predicted_host_bytes = predicted.front().host_optimizer_state;
    if (!o.save.empty()) (void)t.save(o.save);
    r.params = weights();
    if (t.plan().policies.ema) {
      swap_ema(t);
      r.ema = weights();
      swap_ema(t);  // and back: training goes on from the weights
      CHECK(weights() == r.params);
    }
    r.losses.push_back(t.step(loader.next(ctx.cpu())));  // one more step after the swaps
  });
  return runs;
}

// The rule, in double precision: ema_0 = w_0; ema_t = decay ema_(t-1) + (1 - decay) w_t after each
// update (a step AMP skipped, skipped[t - 1] grown, moves nothing).
std::vector<double> by_the_rule(const std::vector<std::vector<double>>& w, double decay, const std::vector<std::int64_t>& skipped = {}) {
  std::vector<double> e = w.front();
  for (std::size_t t = 1; t < w.size(); ++t) {
    if (!skipped.empty() && skipped[t - 1] > (t >= 2 ? skipped[t - 2] : 0)) continue;
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = decay * e[i] + (1 - decay) * w[t][i];
  }
  return e;
}

// The default can be written out, as the other policies' can.
static_assert(std::is_same_v<Policies<Zero<1>, ema::Off>::of<policy::home::Ema>, ema::Off>);
static_assert(!policy::compiled<Policies<std::conditional_t<false, Ema, ema::Off>>>(false).ema);
static_assert(policy::compiled<Policies<std::conditional_t<true, Ema, ema::Off>>>(false).ema);

struct TempDir {
  fs::path path;
  explicit TempDir(const char* name) : path(fs::temp_directory_path() / ("epl-ema-test-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("ema: the average follows decay ema + (1 - decay) w after every update, and training is unchanged") {
  const auto plain = train<Plain>(1, config("", -1), 700, {.record = true});
  const auto averaged = train<Averaged>(1, config(""), 701);
  const auto expected = by_the_rule(plain[0].weights, 0.9);
  CHECK(test::max_rel_diff(averaged[0].losses, plain[0].losses) == 0);  // the average never feeds back
  CHECK(averaged[0].params == plain[0].params);
  CHECK(test::max_rel_diff(averaged[0].ema, expected) <= 1e-6);
  CHECK(test::max_rel_diff(averaged[0].ema, averaged[0].params) > 1e-3);  // it is not the weights
}

TEST_CASE("ema: 2 and 4 thread ranks under ZeRO 0, 1 and 3 keep the one-device average") {
  const auto one = train<Averaged>(1, config(""), 710);
  for (const char* zero : {"", "v0", "v2"})
    for (int n : {2, 4}) {
      CAPTURE(zero);
      CAPTURE(n);
      const auto runs = train<Averaged>(n, config(zero), 720);
      for (const auto& r : runs) {
        CHECK(test::max_rel_diff(r.losses, one[0].losses) <= 1e-5);
        CHECK(test::max_rel_diff(r.params, one[0].params) <= 1e-5);
        CHECK(test::max_rel_diff(r.ema, one[0].ema) <= 1e-5);
      }
    }
}

TEST_CASE("ema: under offload the average lives in the host pool and is the same") {
  using Offloaded = Policies<Zero<3>, Offload<offload::V0>, Ema>;
  const auto device = train<Averaged>(2, config("v2"), 790);
  const auto host = train<Offloaded>(2, config("v2"), 792);
  for (std::size_t r = 0; r < host.size(); ++r) {
    CHECK(test::max_rel_diff(host[r].ema, device[r].ema) <= 1e-6);
    CHECK(host[r].optimizer_bytes == 0);  // the device holds no state: the host pool does (the planner's host bytes)
    CHECK(host[r].predicted_bytes == 0);
    CHECK(host[r].host_bytes == host[r].predicted_host_bytes);
    CHECK(host[r].host_bytes == device[r].optimizer_bytes);  // the same three slots (AdamW's two, the average), in the host pool
  }
}

TEST_CASE("ema: a step mixed precision skips for an overflow does not move the average") {
  using Amped = Policies<Zero<3>, Amp<amp::FP16>>;
  using AmpedAveraged = Policies<Zero<3>, Amp<amp::FP16>, Ema>;
  // a loss scale of 2^24 overflows f16 at once: the first steps are skipped while it comes down;
  // then it doubles after every good step, so that updates and skips alternate
  const Options o{.steps = 8, .amp_init_scale = 0x1p24, .amp_growth_interval = 1, .record = true};
  const auto plain = train<Amped>(1, config("", -1), 794, o);
  const auto averaged = train<AmpedAveraged>(1, config(""), 796, o);
  REQUIRE(plain[0].skipped.back() >= 1);
  REQUIRE(plain[0].skipped.back() < o.steps);  // and some steps update
  CHECK(averaged[0].skipped == plain[0].skipped);
  CHECK(test::max_rel_diff(averaged[0].ema, by_the_rule(plain[0].weights, 0.9, plain[0].skipped)) <= 1e-6);
  CHECK(test::max_rel_diff(averaged[0].ema, by_the_rule(plain[0].weights, 0.9)) > 1e-4);  // as if they had not been skipped
}

TEST_CASE("ema: its state is the planner's exact state bytes (one more slot, sharded as the optimizer's)") {
  for (const char* zero : {"", "v0"})
    for (int n : {1, 2}) {
      CAPTURE(zero);
      CAPTURE(n);
      const auto with = train<Averaged>(n, config(zero), 730, {.steps = 1});
      const auto without = train<Plain>(n, config(zero, -1), 740, {.steps = 1});
      for (std::size_t r = 0; r < with.size(); ++r) {
        CHECK(with[r].optimizer_bytes == with[r].predicted_bytes);
        CHECK(without[r].optimizer_bytes == without[r].predicted_bytes);
        CHECK(with[r].optimizer_bytes * 2 == without[r].optimizer_bytes * 3);  // AdamW's two slots and the average
      }
    }
  // ema.decay = 0 keeps none
  const auto off = train<Averaged>(1, config("", 0), 750, {.steps = 1});
  const auto plain = train<Plain>(1, config("", -1), 751, {.steps = 1});
  CHECK(off[0].optimizer_bytes == plain[0].optimizer_bytes);
}

TEST_CASE("ema: a checkpoint keeps the average; one saved without it starts the average from its weights") {
  const auto whole = train<Averaged>(2, config("v0"), 760, {.steps = 4});
  TempDir dir("resume");
  (void)train<Averaged>(2, config("v0"), 762, {.steps = 2, .save = dir.path.string()});
  // resumed on 1 rank without ZeRO: any layout loads it
  const auto resumed = train<Averaged>(1, config(""), 764, {.steps = 2, .resume = dir.path.string()});
  CHECK(test::max_rel_diff(resumed[0].params, whole[0].params) <= 1e-5);
  CHECK(test::max_rel_diff(resumed[0].ema, whole[0].ema) <= 1e-5);

  TempDir bare("bare");
  const auto saved = train<Plain>(1, config("", -1), 766, {.steps = 2, .save = bare.path.string()});
  const auto started = train<Averaged>(1, config(""), 768, {.steps = 0, .resume = bare.path.string()});
  CHECK(started[0].ema == saved[0].params);  // nothing to average yet: the loaded weights

  // the average exported under the weights' names, read into a run that keeps none
  const auto step = checkpoint::newest(dir.path);
  REQUIRE(step.has_value());
  const fs::path file = dir.path.parent_path() / ("epl-ema-test-" + std::to_string(::getpid()) + ".safetensors");
  CHECK(checkpoint::export_safetensors(*step, file, "ema") > 0);
  const auto halfway = train<Averaged>(1, config(""), 770, {.steps = 0, .resume = dir.path.string()});
  comm::run_threads(1, [&](comm::ThreadCommunicator& comm) {
    Context ctx(comm, 772);
    Trainer<gpt::Gpt, optim::AdamW, Plain> t(ctx, config("", -1), gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01}), {.seed = 5});
    t.load_safetensors(file);
    t.gather_parameters();
    CHECK(test::flat_params(t.model()) == halfway[0].ema);
  });
  fs::remove(file);
  const auto bare_step = checkpoint::newest(bare.path);
  REQUIRE(bare_step.has_value());
  CHECK_THROWS_WITH_AS((void)checkpoint::export_safetensors(*bare_step, file, "ema"),
                       doctest::Contains("was saved without the state asked for (\"ema\"; it keeps none but the optimizer's"), Error);
  // only weights are exported: the optimizer's moments under the weights' names were written without a word (a stranger's finding)
  for (const char* slot : {"state0", "state1"})
    CHECK_THROWS_WITH_AS((void)checkpoint::export_safetensors(*step, file, slot),
                         doctest::Contains(("\"" + std::string(slot) + "\" is the optimizer's state slot " + slot[5]).c_str()), Error);
  CHECK_THROWS_WITH_AS((void)checkpoint::export_safetensors(*step, file, "bogus"),
                       doctest::Contains("was saved without the state asked for (\"bogus\"; it keeps \"ema\";"), Error);
  CHECK_FALSE(fs::exists(file));
}

TEST_CASE("ema: bad input is named with its fix") {
  auto fails = [](auto&& make, const char* text) {
    CHECK_THROWS_WITH_AS(make(), doctest::Contains(text), Error);
  };
  fails([] { (void)train<Plain>(1, config("", 0.99), 780); }, "ema.decay = 0.99 but this program keeps no average of the weights; add "
                                                             "epl::Ema to its epl::Policies<...>");
  // 1 is refused where it is set, as config.md says of every value (a stranger found it refused only by the Trainer)
  fails([] { (void)train<Averaged>(1, config("", 1.0), 781); }, "ema.decay = 1 is out of range; it must be below 1");
  Config c;
  CHECK_THROWS_WITH_AS(c.set("ema.decay", 1.0), doctest::Contains("ema.decay = 1 is out of range; it must be below 1"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("ema.decay", "1"), doctest::Contains("it must be below 1"), Error);
  CHECK_NOTHROW(c.set("ema.decay", 0.9999));
  CHECK_THROWS_WITH_AS(c.set("ema.decay", -0.5), doctest::Contains("ema.decay = -0.5 is out of range"), Error);
  CHECK_THROWS_WITH_AS(c.set("ema.decay", "fast"), doctest::Contains("ema.decay"), Error);
  fails([] {
    comm::run_threads(1, [&](comm::ThreadCommunicator& comm) {
      Context ctx(comm, 782);
      Trainer<gpt::Gpt, optim::AdamW, Plain> t(ctx, Config{}, gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01}));
      swap_ema(t);
    });
  }, "epl::swap_ema: this run keeps no average of the weights: add epl::Ema");
  // swapped in, the average must be swapped back before training or a checkpoint
  TempDir dir("swapped");
  comm::run_threads(1, [&](comm::ThreadCommunicator& comm) {
    Context ctx(comm, 784);
    Trainer<gpt::Gpt, optim::AdamW, Averaged> t(ctx, config(""), gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01}));
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    (void)t.step(loader.next(ctx.cpu()));
    swap_ema(t);
    (void)t.evaluate(loader.next(ctx.cpu()));  // what it is for
    CHECK_THROWS_WITH_AS((void)t.step(loader.next(ctx.cpu())), doctest::Contains("trainer.step() with the weights' average swapped in "
                                                                                 "(epl::swap_ema)"), Error);
    CHECK_THROWS_WITH_AS((void)t.save(dir.path), doctest::Contains("a checkpoint save or load with the weights' average swapped in"),
                         Error);
    swap_ema(t);
    CHECK_NOTHROW((void)t.step(loader.next(ctx.cpu())));
  });
}
}
}  // namespace test_policy_ema
