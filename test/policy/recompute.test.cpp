// Gradient checkpointing at epl::Recompute boundaries: training with recompute equals training
// without it bit for bit (dropout too), on one device and on data-parallel ranks with ZeRO; the
// activation peak falls; the keys choose, and what cannot work is named.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace test_policy_recompute {

namespace {
using gpt::RecomputedGpt;
RecomputedGpt make(const gpt::Shape& s) { return gpt::make_recomputed_gpt(s); }
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 3, .heads = 2, .dim = 16}; }

// A layer whose forward adds how often it ran: a recomputed forward differs from the first, the
// fault gradient_checkpoint.check_gradients is there to find.
struct Jitter {
  int calls = 0;
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    Tensor shift = ctx.empty_like(x), y = ctx.empty_like(x);
    ctx.device().fill(shift, 0.01 * ++calls);
    ctx.device().add(x, shift, y);
    return y;
  }
  template <class Ctx>
  Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};

Config config(const char* checkpoint, std::int64_t micro = 1) {
  Config c;
  if (checkpoint) c.set("gradient_checkpoint.type", checkpoint);
  c.set("pipeline.num_micro_batch", micro);
  return c;
}
struct Run {
  std::vector<double> losses, params;
};
template <class Model>
Run one_device(const Config& cfg, Model model, std::int64_t* activation_peak = nullptr) {
  device::Cpu d(320);
  Trainer<Model, optim::AdamW> t(d, cfg, std::move(model), optim::AdamW({.lr = 0.01, .eps = 1e-3}), {.seed = 5, .clip_norm = 0.5});
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, 8, 17);
  Run r;
  memory_account(d.id()).reset_peaks();
  for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(d)));
  if (activation_peak) *activation_peak = memory_stats(d.id()).peak_of(MemoryCategory::kActivations);
  r.params = test::flat_params(t.model());
  return r;
}
// 2 data-parallel thread ranks train Model under ZeRO stage 3 with cfg; each rank's losses and
// gathered parameters.
template <class Model, class Make>
std::vector<Run> two_ranks_zero3(Config cfg, Make make, int first_index) {
  cfg.set("zero.level", "v2");
  std::vector<Run> runs(2);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, first_index + c.rank());
    Trainer<Model, optim::AdamW, Policies<Zero<3>>> t(ctx, cfg, make(), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                                      {.seed = 5, .clip_norm = 0.5});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
    t.gather_parameters();
    r.params = test::flat_params(t.model());
  });
  return runs;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("checkpoint: recomputing each block trains exactly like keeping its activations, and like the plain model") {
  const auto plain = one_device(config(nullptr), gpt::make_gpt(tiny()));
  for (const char* key : {"collection", ""}) {  // unset also recomputes: the model's marks
    CAPTURE(key);
    const auto run = one_device(config(key), make(tiny()));
    CHECK(run.losses == plain.losses);
    CHECK(run.params == plain.params);
  }
  const auto by_type = one_device(config(nullptr), make(tiny()));
  CHECK(by_type.params == plain.params);
}

TEST_CASE("checkpoint: the activation peak of a deeper model falls") {
  const gpt::Shape deep{.vocab = 32, .context = 8, .layers = 8, .heads = 2, .dim = 32};
  std::int64_t with = 0, without = 0;
  (void)one_device(config("collection"), make(deep), &with);
  (void)one_device(config(""), make(deep), &without);
  CAPTURE(with);
  CAPTURE(without);
  CHECK(with < without / 2);
}

TEST_CASE("checkpoint: dropout inside a boundary draws the same masks when recomputed") {
  struct Net {
    nn::Embedding tok{32, 16};
    Recompute<nn::Linear, nn::GELU, nn::Dropout, nn::Linear> mid{nn::Linear(16, 32), nn::GELU{}, nn::Dropout(0.4), nn::Linear(32, 16)};
    nn::Linear out{16, 32};
  };
  const auto on = one_device(config("collection"), Net{});
  const auto off = one_device(config(""), Net{});
  CHECK(on.losses == off.losses);
  CHECK(on.params == off.params);
}

TEST_CASE("checkpoint: with accumulation on 2 data-parallel ranks under ZeRO stage 3, equal to one device") {
  const auto ref = one_device(config(nullptr, 2), gpt::make_gpt(tiny()));
  const auto runs = two_ranks_zero3<RecomputedGpt>(config("collection", 2), [] { return make(tiny()); }, 330);
  for (const auto& r : runs) {
    CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-6);
    CHECK(test::max_rel_diff(r.params, ref.params) <= 1e-6);
  }
}

TEST_CASE("checkpoint auto: the library's segments train exactly like keeping every activation") {
  const auto plain = one_device(config(""), gpt::make_gpt(tiny()));
  const auto run = one_device(config("auto"), gpt::make_gpt(tiny()));
  CHECK(run.losses == plain.losses);
  CHECK(run.params == plain.params);
  // the marks keep their activations under auto: the same again, with no recompute nested
  const auto marked = one_device(config("auto"), make(tiny()));
  CHECK(marked.params == plain.params);
}

TEST_CASE("checkpoint auto: about sqrt(n) segments, the head kept, and the activation peak falls") {
  const gpt::Shape deep{.vocab = 32, .context = 8, .layers = 8, .heads = 2, .dim = 32};
  device::Cpu d(321);
  Trainer<gpt::Gpt, optim::SGD> t(d, config("auto"), gpt::make_gpt(deep), optim::SGD({.lr = 0.1}));
  const auto& chunk = t.local_chunks().at(0);
  REQUIRE(chunk.units().size() == 20);  // embedding, position, 2 residuals a block, norm, output layer
  std::size_t recomputed_segments = 0;
  for (const auto& seg : chunk.segments()) recomputed_segments += seg.recompute ? 1 : 0;
  CHECK(recomputed_segments == 3);  // round(sqrt(20)) = 4 pieces, the last kept
  CHECK(!chunk.segments().back().recompute);
  CHECK(chunk.segments().back().end == 20);
  std::int64_t with = 0, without = 0;
  (void)one_device(config("auto"), gpt::make_gpt(deep), &with);
  (void)one_device(config(""), gpt::make_gpt(deep), &without);
  CAPTURE(with);
  CAPTURE(without);
  CHECK(with < without * 6 / 10);
}

TEST_CASE("checkpoint auto: 2 data-parallel ranks, accumulation, ZeRO stage 3, equal to one device") {
  const auto ref = one_device(config(nullptr, 2), gpt::make_gpt(tiny()));
  const auto runs = two_ranks_zero3<gpt::Gpt>(config("auto", 2), [] { return gpt::make_gpt(tiny()); }, 350);
  for (const auto& r : runs) {
    CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-6);
    CHECK(test::max_rel_diff(r.params, ref.params) <= 1e-6);
  }
}

TEST_CASE("checkpoint auto: end_taskgraph limits it to the first pipeline stages, equal to one device") {
  const gpt::Shape s{.vocab = 32, .context = 8, .layers = 4, .heads = 2, .dim = 16};
  const auto ref = one_device(config(nullptr, 2), gpt::make_gpt(s));
  std::vector<Run> runs(2);
  std::vector<std::size_t> segments(2);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 360 + c.rank());
    Config cfg = config("auto", 2);
    cfg.set("pipeline.num_stages", 2);
    cfg.set("gradient_checkpoint.end_taskgraph", 0);
    Trainer<gpt::TwoStageGpt, optim::AdamW> t(ctx, cfg, gpt::make_two_stage_gpt(s), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                              {.seed = 5, .clip_norm = 0.5});
    segments[static_cast<std::size_t>(c.rank())] = t.local_chunks().at(0).segments().size();
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    for (int k = 0; k < 4; ++k) r.losses.push_back(t.step(loader.next(ctx.cpu())));
  });
  CHECK(segments[0] > 0);   // stage 0 recomputes
  CHECK(segments[1] == 0);  // stage 1 is after end_taskgraph
  for (const auto& r : runs) CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-6);
}

TEST_CASE("checkpoint: check_gradients reports no difference for a faithful recompute and finds one that is not") {
  device::Cpu d(322);
  Config cfg = config("auto");
  cfg.set("gradient_checkpoint.check_gradients", true);
  Trainer<gpt::Gpt, optim::SGD> t(d, cfg, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, 8, 17);
  CHECK(!t.checkpoint_gradient_difference().has_value());  // not run yet
  (void)t.step(loader.next(d));
  CHECK(t.checkpoint_gradient_difference() == std::optional<double>(0.0));

  struct Net {
    nn::Embedding tok{32, 16};
    Jitter jitter;
    nn::Linear mid{16, 16};
    nn::Linear out{16, 32};
  };
  Trainer<Net, optim::SGD> bad(d, cfg, Net{}, optim::SGD({.lr = 0.1}));
  REQUIRE(bad.local_chunks().at(0).segments().front().recompute);
  REQUIRE(bad.local_chunks().at(0).segments().front().end >= 3);  // the jitter and the layer after it
  (void)bad.step(loader.next(d));
  REQUIRE(bad.checkpoint_gradient_difference().has_value());
  CHECK(*bad.checkpoint_gradient_difference() > 1e-4);
}

TEST_CASE("checkpoint: collection without a boundary, bad checkpoint keys, and a split layer inside a boundary are named") {
  auto fails = [](auto build, const char* what) {
    std::string message;
    try {
      build();
    } catch (const Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find(what) != std::string::npos);
  };
  fails([] { (void)one_device(config("collection"), gpt::make_gpt(tiny())); }, "gradient_checkpoint.type = \"collection\" but the model marks no boundary");
  // by instance, not by type: a Repeat of no marked blocks marks nothing (it trained as if it did, a
  // stranger's finding)
  struct NoneRepeated {
    nn::Embedding tok{32, 16};
    nn::Repeat<Recompute<nn::Mlp>> body{0, [](std::int64_t) { return Recompute<nn::Mlp>(nn::Mlp(16)); }};
    nn::Linear head{16, 32};
  };
  fails([] { (void)one_device(config("collection"), NoneRepeated{}); }, "gradient_checkpoint.type = \"collection\" but the model marks no boundary");
  fails([] {
    Config cfg;
    cfg.set("gradient_checkpoint.check_gradients", true);
    (void)one_device(cfg, NoneRepeated{});
  }, "gradient_checkpoint.check_gradients = true but nothing is recomputed (gradient_checkpoint.type = unset and the model marks no epl::Recompute)");
  {
    NoneRepeated one;
    one.body.layers.push_back(Recompute<nn::Mlp>(nn::Mlp(16)));
    CHECK_NOTHROW((void)one_device(config("collection"), one));
  }
  fails([] {
    Config cfg = config("auto");
    cfg.set("gradient_checkpoint.end_taskgraph", 1);
    (void)one_device(cfg, gpt::make_gpt(tiny()));
  }, "gradient_checkpoint.end_taskgraph = 1 but the model runs as 1 task graph (pipeline stages, numbered from 0 in model order); choose -1 (all of them) or at most 0");
  fails([] {
    Config cfg = config("");
    cfg.set("gradient_checkpoint.check_gradients", true);
    (void)one_device(cfg, gpt::make_gpt(tiny()));
  }, "gradient_checkpoint.check_gradients = true but nothing is recomputed (gradient_checkpoint.type = \"\")");
  fails([] {  // unset, the type recomputes the marks: a model without any recomputes nothing
    Config cfg;
    cfg.set("gradient_checkpoint.check_gradients", true);
    (void)one_device(cfg, gpt::make_gpt(tiny()));
  }, "gradient_checkpoint.check_gradients = true but nothing is recomputed (gradient_checkpoint.type = unset and the model marks no epl::Recompute)");
  fails([] {
    Config cfg = config("");
    cfg.set("gradient_checkpoint.end_taskgraph", 0);
    (void)one_device(cfg, gpt::make_gpt(tiny()));
  }, "gradient_checkpoint.end_taskgraph is set but nothing is recomputed");
  struct OneLayer {
    nn::Embedding tok{32, 32};
  };
  fails([] { (void)one_device(config("auto"), OneLayer{}); }, "gradient_checkpoint.type = \"auto\" finds nothing to recompute on pipeline rank 0");
  struct SplitInside {
    nn::Embedding tok{32, 16};
    Recompute<Split<2, nn::Mlp>> mid{Split<2, nn::Mlp>(nn::Mlp(16))};
    nn::Linear out{16, 32};
  };
  struct InsideSplit {  // the other nesting: a Split's part holds the boundary
    nn::Embedding tok{32, 16};
    Split<2, Recompute<nn::Mlp>> mid{Split<2, Recompute<nn::Mlp>>(Recompute<nn::Mlp>(nn::Mlp(16)))};
    nn::Linear out{16, 32};
  };
  auto first_step = [](auto model, int first_index) {
    std::string message;
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, first_index + c.rank());
      Trainer<decltype(model), optim::SGD> t(ctx, config("collection"), model, optim::SGD({.lr = 0.1}));
      auto ds = test::token_corpus(4000);
      data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
      try {
        t.step(loader.next(ctx.cpu()));
      } catch (const Error& e) {
        if (c.rank() == 0) message = e.what();
      }
    });
    return message;
  };
  for (const auto& message : {first_step(SplitInside{}, 340), first_step(InsideSplit{}, 344)}) {
    CAPTURE(message);
    CHECK(message.find("epl::Recompute around a layer split over a tensor-parallel group") != std::string::npos);
  }
}
}
}  // namespace test_policy_recompute
