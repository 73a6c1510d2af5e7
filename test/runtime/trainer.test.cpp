// Training on one device: gradient accumulation equals one big batch, the loss falls, evaluation
// changes nothing, and bad input is a clear error.
#include <filesystem>
#include <limits>
#include <fstream>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace test_runtime_trainer {

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
struct Run {
  std::vector<double> losses;
  std::vector<double> params;
};
template <class Optimizer = optim::Momentum>
Run train(std::int64_t micro_batches, int steps, double clip = 0, Optimizer opt = optim::Momentum({.lr = 0.05})) {
  Config cfg;
  cfg.set("pipeline.num_micro_batch", micro_batches);
  Trainer<gpt::Gpt, Optimizer> t(test::cpu(), cfg, gpt::make_gpt(tiny()), opt, {.seed = 5, .clip_norm = clip});
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 8, 11);
  Run r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(t.step(loader.next(test::cpu())));
  r.params = test::flat_params(t.model());
  return r;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("gradient accumulation over micro-batches equals one step on the whole batch") {
  Run one = train(1, 6);
  for (std::int64_t m : {2, 4}) {
    CAPTURE(m);
    Run acc = train(m, 6);
    CHECK(test::max_rel_diff(acc.losses, one.losses) < 1e-5);
    CHECK(test::max_rel_diff(acc.params, one.params) < 1e-5);
  }
  Run clipped = train(1, 6, 0.5), clipped_acc = train(4, 6, 0.5);
  CHECK(test::max_rel_diff(clipped_acc.losses, clipped.losses) < 1e-5);
  CHECK(test::max_rel_diff(clipped_acc.params, clipped.params) < 1e-5);
  CHECK(test::max_rel_diff(clipped.params, one.params) > 1e-4);  // clipping changed the run
}

// AdamW divides by sqrt(v): where the true gradient is exactly zero (the key bias of
// attention: softmax ignores a constant added to a whole row of scores) the gradient is pure
// rounding noise, and AdamW turns noise of either sign into a full step of +-lr. Those
// parameters cannot agree bitwise between summation orders, but they cannot change the
// output either, so under AdamW the invariant is asserted on the loss at every step.
TEST_CASE("gradient accumulation under AdamW: the same loss at every step") {
  auto adamw = optim::AdamW({.lr = 3e-3});
  Run one = train(1, 8, 0, adamw), acc = train(4, 8, 0, adamw);
  CHECK(test::max_rel_diff(acc.losses, one.losses) < 1e-5);
}

TEST_CASE("the loss falls on learnable data") {
  Run r = train(1, 40, 0, optim::AdamW({.lr = 3e-3}));
  CHECK(r.losses.front() > 3.0);
  CHECK(r.losses.back() < 0.6 * r.losses.front());
}

TEST_CASE("a batch that does not divide into micro-batches names both numbers") {
  Config cfg;
  cfg.set("pipeline.num_micro_batch", 3);
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), cfg, gpt::make_gpt(tiny()), optim::SGD({}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 8, 1);
  CHECK_THROWS_WITH_AS(t.step(loader.next(test::cpu())),
                       doctest::Contains("batch of 8 samples does not divide into pipeline.num_micro_batch = 3"), Error);
  {  // from the environment, which the program's reader may not see: said (a stranger's)
    Config env;
    env.set_text("pipeline.num_micro_batch", "3", Config::Source::kEnvironment);
    Trainer<gpt::Gpt, optim::SGD> e(test::cpu(), env, gpt::make_gpt(tiny()), optim::SGD({}));
    CHECK_THROWS_WITH_AS(e.step(loader.next(test::cpu())),
                         doctest::Contains("does not divide into pipeline.num_micro_batch = 3 (EPL_PIPELINE_NUM_MICRO_BATCH in the "
                                           "environment) micro-batches"), Error);
  }
  Batch empty{test::ids({0, 8}, 256, 1), test::ids({0, 8}, 256, 2)};  // zero rows: once "a multiple of 3"
  CHECK_THROWS_WITH_AS(t.step(empty), doctest::Contains("the batch has no rows; give every step, evaluation and prediction at least "
                                                       "one row per micro-batch (pipeline.num_micro_batch = 3)"), Error);
  // an evaluation of no rows returned nan (a stranger's finding)
  CHECK_THROWS_WITH_AS((void)t.evaluate(empty),
                       doctest::Contains("the batch has no rows; give every step, evaluation and prediction at least one row"), Error);
  // rows of no tokens trained to a loss of nan, blamed on the learning rate (a stranger's finding)
  Batch no_tokens{test::ids({3, 0}, 256, 1), test::ids({3, 0}, 256, 2)};
  CHECK_THROWS_WITH_AS(t.step(no_tokens), doctest::Contains("the batch's inputs [3, 0] hold no values: each row needs at least one"),
                       Error);
  // targets of another dtype than class ids are named as the targets
  Trainer<gpt::Gpt, optim::SGD> whole(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({}));
  Batch b = loader.next(test::cpu());
  Batch float_targets{b.inputs, test::random(b.targets.shape(), 3)};
  CHECK_THROWS_WITH_AS(whole.step(float_targets), doctest::Contains("SoftmaxCrossEntropy: the targets are f32; they are class ids"), Error);
}

TEST_CASE("a program's headers are checked against epl::precompiled's before main") {
#if defined(EPL_PRECOMPILED)
  // this program was compiled with the library's own headers: the check before main let it run
  CHECK(detail::precompiled_model_free_layout() == detail::model_free_layout());
  CHECK(detail::layout_mismatch(detail::model_free_layout(), detail::precompiled_model_free_layout()).empty());
  // headers of another tree, whose types' sizes differ (a stranger's program crashed at its first step)
  const std::string why = detail::layout_mismatch(detail::model_free_layout(), detail::model_free_layout() + 1);
  CHECK(why.find("compiled with epl headers that lay out epl's types otherwise than the headers epl::precompiled") != std::string::npos);
  CHECK(why.find("rebuild the library from these headers") != std::string::npos);
#else
  MESSAGE("header-only: no library to check against");
#endif
}

TEST_CASE("a TrainerOptions value outside its range is an error when the trainer is made, used or not") {
  auto make = [](TrainerOptions o) { Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({}), o); };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(make({.clip_norm = -1}), doctest::Contains("TrainerOptions::clip_norm = -1 is not a norm"), Error);
  CHECK_THROWS_WITH_AS(make({.clip_norm = nan}), doctest::Contains("TrainerOptions::clip_norm = nan is not a norm"), Error);
  CHECK_THROWS_WITH_AS(make({.check_replicas_every = -1}), doctest::Contains("check_replicas_every = -1 is negative"), Error);
  CHECK_THROWS_WITH_AS(make({.amp_init_scale = 0}), doctest::Contains("amp_init_scale = 0 is not a loss scale"), Error);  // no AMP in this run
  CHECK_THROWS_WITH_AS(make({.amp_growth_interval = -5}), doctest::Contains("amp_growth_interval = -5 must be at least 1"), Error);
  CHECK_NOTHROW(make({.clip_norm = 0, .check_replicas_every = 0}));
}

TEST_CASE("evaluation leaves parameters unchanged and matches the training loss without dropout") {
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 4, 2);
  Batch b = loader.next(test::cpu());
  auto before = test::flat_params(t.model());
  double e = t.evaluate(b);
  CHECK(test::flat_params(t.model()) == before);
  CHECK(t.step(b) == doctest::Approx(e).epsilon(1e-6));
}

TEST_CASE("predict: the model's output, as a hand pass gives it, whose cross-entropy is evaluate's; it changes nothing") {
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 4, 2);
  (void)t.step(loader.next(test::cpu()));
  Batch b = loader.next(test::cpu());
  const auto before = test::flat_params(t.model());
  const Tensor y = t.predict(b.inputs);
  CHECK(test::flat_params(t.model()) == before);
  CHECK(t.steps() == 1);
  REQUIRE(y.shape() == Shape{4, 8, 32});
  nn::Pass<device::Cpu> pass(test::cpu(), nn::PassOptions{.training = false});
  CHECK(test::max_rel_diff(test::values(y), test::values(nn::forward(t.model(), pass, b.inputs))) < 1e-6);
  // the mean over rows of log-sum-exp minus the target's logit
  const auto logits = test::values(y);
  const auto targets = b.targets.span<std::int32_t>();
  double loss = 0;
  for (std::int64_t r = 0; r < 32; ++r) {
    const auto row = logits.begin() + r * 32;
    const double top = *std::max_element(row, row + 32);
    double sum = 0;
    for (int k = 0; k < 32; ++k) sum += std::exp(row[k] - top);
    loss += top + std::log(sum) - row[targets[static_cast<std::size_t>(r)]];
  }
  CHECK(loss / 32 == doctest::Approx(t.evaluate(b)).epsilon(1e-6));
  // bad inputs, and a call made on one rank only, are named
  CHECK_THROWS_WITH_AS((void)t.predict(Tensor{}), doctest::Contains("the batch's inputs are an undefined (empty) tensor"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 7);
    Trainer<gpt::Gpt, optim::SGD> u(ctx, Config{}, gpt::make_gpt(tiny()), optim::SGD({}));
    if (c.rank() == 0) (void)u.predict(b.inputs);
    else (void)u.evaluate(b);
  }, {.report = false}), doctest::Contains("rank 0 called trainer.predict() at step 0 while rank 1 called trainer.evaluate()"), Error);
  // a pipeline's stages read the same rows (stage 0 the inputs; the output is the last stage's)
  Config piped;
  piped.set(keys::num_stages, 2).set(keys::auto_parallel, true);
  // each stage other rows, read before the ranks start: both reading the one loader at once was a
  // data race that could hand them the same rows (the check then did not throw, one ASan run in two)
  const Tensor rows[2] = {loader.next(test::cpu()).inputs, loader.next(test::cpu()).inputs};
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 7);
    Trainer<gpt::Gpt, optim::SGD> u(ctx, piped, gpt::make_gpt(tiny()), optim::SGD({}));
    (void)u.predict(rows[c.rank()]);
  }, {.report = false}), doctest::Contains("in trainer.predict() after step 0 pipeline stage 1 got other inputs"), Error);
}

// A NaN or infinite loss or gradient stops the run with the step and the parameter named.
namespace {
struct InfGrad {  // identity whose backward puts an infinity into its parameter's gradient
  nn::Parameter w{Shape{2}, nn::Init::zeros()};
  template <class V> void visit(V&& v) { v("w", w); }
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) {
    ctx.device().fill(w.grad, std::numeric_limits<double>::infinity());
    return dy;
  }
};
struct Classifier {
  nn::Linear fc;
  InfGrad bad;
};
struct Plain {
  nn::Linear fc;
};
}  // namespace

TEST_CASE("a NaN loss or an infinite gradient is an error naming the step and the parameter") {
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 4, 2);
  (void)t.step(loader.next(test::cpu()));
  test::cpu().fill(t.model().head.lm.weight.value, std::nan(""));
  CHECK_THROWS_WITH_AS(t.step(loader.next(test::cpu())), doctest::Contains("the loss is nan at step 2"), Error);

  Trainer<Classifier, optim::SGD> c(test::cpu(), Config{}, Classifier{nn::Linear(3, 2), {}}, optim::SGD({}));
  Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
  CHECK_THROWS_WITH_AS(c.step(b), doctest::Contains("the gradient norm is inf at step 1; the first parameter with a NaN or infinite gradient is bad.w"),
                       Error);
  Trainer<Classifier, optim::SGD> lenient(test::cpu(), Config{}, Classifier{nn::Linear(3, 2), {}}, optim::SGD({}), {.check_finite = false});
  CHECK_NOTHROW(lenient.step(b));
}
TEST_CASE("a NaN loss names the ranks whose rows gave it") {
  std::string error;
  comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 1);
    Trainer<Plain, optim::SGD> t(ctx, Config{}, Plain{nn::Linear(3, 2)}, optim::SGD({}));
    Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
    if (c.rank() == 1) b.inputs.span<float>()[5] = std::nanf("");  // rank 1 read a bad row
    try {
      (void)t.step(b);
    } catch (const Error& e) {
      if (c.rank() == 0) error = e.what();
    }
  }, {.report = false});
  CHECK(error.find("the loss is nan at step 1 (from the rows of rank 1)") != std::string::npos);
}
namespace {
struct NanAt {  // identity that writes a NaN into its output on one rank, in forward or in its parameter's gradient
  nn::Parameter w{Shape{2}, nn::Init::zeros()};
  int rank = -1;
  bool in_forward = true;
  template <class V> void visit(V&& v) { v("w", w); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) {
    if (in_forward && ctx_rank == rank) ctx.device().fill(x, std::nan(""));
    return x;
  }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) {
    if (!in_forward && ctx_rank == rank) ctx.device().fill(w.grad, std::nan(""));
    return dy;
  }
  int ctx_rank = -1;  // the world rank this copy trains on
};
using Piped = Pipeline<Replicate<1, nn::Linear>, Replicate<1, NanAt, nn::Linear>, Replicate<1, NanAt, nn::Linear>>;
}  // namespace
TEST_CASE("a NaN made inside a pipeline names the last stage as where the loss is, not as whose rows were bad; a bad "
          "gradient names one parameter on every rank") {
  for (const bool in_forward : {true, false}) {
    CAPTURE(in_forward);
    std::vector<std::string> errors(3);
    comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 1);
      // stage 1 (rank 1) makes the NaN; in backward, stage 2's own parameter is bad too: the first in
      // the model's order, stage 1's, is the one every rank names
      Piped model(Replicate<1, nn::Linear>(nn::Linear(3, 4)),
                  Replicate<1, NanAt, nn::Linear>(NanAt{.rank = 1, .in_forward = in_forward, .ctx_rank = c.rank()}, nn::Linear(4, 4)),
                  Replicate<1, NanAt, nn::Linear>(NanAt{.rank = in_forward ? -1 : 2, .in_forward = in_forward, .ctx_rank = c.rank()},
                                                  nn::Linear(4, 2)));
      Trainer<Piped, optim::SGD> t(ctx, Config{}, std::move(model), optim::SGD({}));
      if (c.rank() == 0) CHECK(t.parameter_names()[2] == "1.0.w");
      Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
      try {
        (void)t.step(b);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(c.rank())] = e.what();
      }
    }, {.report = false});
    for (const auto& error : errors) {
      CAPTURE(error);
      if (in_forward) {
        CHECK(error.find("the loss is nan at step 1 (from rank 2, the last stage of its pipeline: the value may have turned non-finite "
                         "in any stage, or in the rows every stage reads)") != std::string::npos);
      } else {
        CHECK(error.find("the gradient norm is nan at step 1; the first parameter with a NaN or infinite gradient is 1.0.w") !=
              std::string::npos);
      }
    }
  }
}
namespace {
// A model whose last Linear expects a width of 5 and is given 6.
struct Head { nn::Linear hidden; nn::ReLU act; nn::Linear out; };
struct Mis { nn::Linear first; Head head; };
Mis mis() { return {nn::Linear(3, 4), {nn::Linear(4, 6), {}, nn::Linear(5, 2)}}; }
}  // namespace
TEST_CASE("a layer's error names the layer by its path in the model: one device, replicas, pipeline stages, evaluation") {
  const char* named = "in the forward of layer `head.out`: Linear(5 -> 2) got input [4, 6]";
  Trainer<Mis, optim::SGD> t(test::cpu(), Config{}, mis(), optim::SGD({}));
  const Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
  CHECK_THROWS_WITH_AS(t.step(b), doctest::Contains(named), Error);
  CHECK_THROWS_WITH_AS(t.evaluate(b), doctest::Contains(named), Error);
  for (const bool pipelined : {false, true}) {
    CAPTURE(pipelined);
    std::vector<std::string> errors(2);
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 1);
      try {
        if (pipelined) {  // the bad layer on stage 1: "1." is the stage, "0." the body's second layer... as parameter names have it
          using Two = Pipeline<Replicate<1, nn::Linear>, Replicate<1, Head>>;
          Config cfg;
          cfg.set(keys::num_micro_batch, 2);
          Trainer<Two, optim::SGD> p(ctx, cfg, Two(Replicate<1, nn::Linear>(nn::Linear(3, 4)), Replicate<1, Head>(mis().head)),
                                     optim::SGD({}));
          CHECK(p.parameter_names().back() == "1.out.bias");
          (void)p.step(b);
        } else {
          Trainer<Mis, optim::SGD> r(ctx, Config{}, mis(), optim::SGD({}));
          (void)r.step({b.inputs.slice(2 * c.rank(), 2 * c.rank() + 2), b.targets.slice(2 * c.rank(), 2 * c.rank() + 2)});
        }
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(c.rank())] = e.what();
      }
    }, {.report = false});
    if (pipelined) {
      CHECK_MESSAGE(errors[1].find("in the forward of layer `1.out`: Linear(5 -> 2) got input [2, 6]") != std::string::npos, errors[1]);
      CHECK(errors[0].find("layer `") == std::string::npos);  // stage 0's layers ran; it lost its peer
    } else {
      for (const auto& e : errors) CHECK_MESSAGE(e.find("in the forward of layer `head.out`: Linear(5 -> 2) got input [2, 6]") != std::string::npos, e);
    }
  }
}
TEST_CASE("targets are one class id per row: a [rows, 1] column is refused, as PyTorch does") {
  Trainer<Plain, optim::SGD> t(test::cpu(), Config{}, Plain{nn::Linear(3, 2)}, optim::SGD({}));
  CHECK_THROWS_WITH_AS(t.step({test::random({4, 3}, 1), test::ids({4, 1}, 2, 2)}),
                       doctest::Contains("targets [4, 1] for logits [4, 2]; give one class id per row, shaped [4]"), Error);
  CHECK_NOTHROW(t.step({test::random({4, 3}, 1), test::ids({4}, 2, 2)}));
  Trainer<gpt::Gpt, optim::SGD> g(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({}));
  CHECK_THROWS_WITH_AS(g.step({test::ids({2, 8}, 32, 1), test::ids({2, 8, 1}, 32, 2)}),
                       doctest::Contains("shaped [2, 8] or [16]"), Error);
}
TEST_CASE("a key that would have no effect is an error at the first step, naming what reads it") {
  auto first_step = [](Config cfg) {
    Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), cfg, gpt::make_gpt(tiny()), optim::SGD({}));
    auto ds = test::token_corpus(3000);
    data::WindowLoader loader(ds, 8, 8, 11);
    (void)t.step(loader.next(test::cpu()));
  };
  Config slicing;
  slicing.set(keys::io_slicing, true);  // a new user's program read no files through data::slice_files: it was ignored
  CHECK_THROWS_WITH_AS(first_step(slicing), doctest::Contains("config key io.slicing = true was given, but this program reads no "
                                                              "files through data::slice_files"), Error);
  (void)data::slice_files({"a"}, {0, 1}, slicing);  // read as the program reads its files: accepted
  CHECK_NOTHROW(first_step(slicing));
  // on several replicas each rank's data is its own, and the shard says so to the loader
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 1);
    Trainer<gpt::Gpt, optim::SGD> sliced(ctx, slicing, gpt::make_gpt(tiny()), optim::SGD({})), whole(ctx, Config{}, gpt::make_gpt(tiny()),
                                                                                                    optim::SGD({}));
    CHECK(sliced.data_shard().own_data);
    CHECK_FALSE(whole.data_shard().own_data);
  });
  CHECK_FALSE(Trainer<gpt::Gpt, optim::SGD>(test::cpu(), slicing, gpt::make_gpt(tiny()), optim::SGD({})).data_shard().own_data);
  // asking for the shard is not reading the files: on several replicas too, a program that never
  // calls data::slice_files is refused (a stranger's finding: it trained, each rank on other windows)
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 1);
    Config fresh;
    fresh.set(keys::io_slicing, true);
    Trainer<gpt::Gpt, optim::SGD> t(ctx, fresh, gpt::make_gpt(tiny()), optim::SGD({}));
    auto ds = test::token_corpus(3000);
    data::WindowLoader loader(ds, 8, 8, 11, t.data_shard());
    CHECK_THROWS_WITH_AS((void)t.step(loader.next(test::cpu())), doctest::Contains("reads no files through data::slice_files"), Error);
  });
  Config timeout;
  timeout.set(keys::timeout, 5.0);
  CHECK_THROWS_WITH_AS(first_step(timeout), doctest::Contains("pass {.comm = epl::comm_options(cfg)} to run_threads"), Error);
  // a schedule given for a run without a pipeline names it both ways, whichever the user wrote (a stranger's finding)
  auto schedule = [&](const char* name) {
    Config cfg;
    cfg.set_text("pipeline.strategy", name);
    return Trainer<gpt::Gpt, optim::SGD>(test::cpu(), cfg, gpt::make_gpt(tiny()), optim::SGD({}));
  };
  CHECK_THROWS_WITH_AS(schedule("1F1B"), doctest::Contains("pipeline.strategy = PreferBackward (1F1B) is given, but this run has no pipeline"),
                       Error);
  CHECK_THROWS_WITH_AS(schedule("Interleaved"), doctest::Contains("pipeline.strategy = Interleaved is given, but this run has no pipeline"),
                       Error);
}
}
}  // namespace test_runtime_trainer
