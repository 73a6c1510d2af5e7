// Gradient checkpointing at epl::Checkpoint boundaries: training with recompute equals training
// without it bit for bit (dropout too), on one device and on data-parallel ranks with ZeRO; the
// activation peak falls; the keys choose, and what cannot work is named.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/run_threads.hpp"

using namespace epl;

namespace {
using gpt::CheckpointedGpt;
CheckpointedGpt make(const gpt::Shape& s) { return gpt::make_checkpointed_gpt(s); }
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 3, .heads = 2, .dim = 16}; }

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
    Checkpoint<nn::Linear, nn::GELU, nn::Dropout, nn::Linear> mid{nn::Linear(16, 32), nn::GELU{}, nn::Dropout(0.4), nn::Linear(32, 16)};
    nn::Linear out{16, 32};
  };
  const auto on = one_device(config("collection"), Net{});
  const auto off = one_device(config(""), Net{});
  CHECK(on.losses == off.losses);
  CHECK(on.params == off.params);
}

TEST_CASE("checkpoint: with accumulation on 2 data-parallel ranks under ZeRO stage 3, equal to one device") {
  const auto ref = one_device(config(nullptr, 2), gpt::make_gpt(tiny()));
  std::vector<Run> runs(2);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 330 + c.rank());
    Config cfg = config("collection", 2);
    cfg.set("zero.level", "v2");
    Trainer<CheckpointedGpt, optim::AdamW, Policies<Zero<3>>> t(ctx, cfg, make(tiny()), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                                                 {.seed = 5, .clip_norm = 0.5});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
    t.gather_parameters();
    r.params = test::flat_params(t.model());
  });
  for (const auto& r : runs) {
    CHECK(test::max_rel_diff(r.losses, ref.losses) <= 1e-6);
    CHECK(test::max_rel_diff(r.params, ref.params) <= 1e-6);
  }
}

TEST_CASE("checkpoint: collection without a boundary, auto, and a split layer inside a boundary are named") {
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
  fails([] { (void)one_device(config("auto"), make(tiny())); }, "gradient_checkpoint.type = \"auto\" (boundaries chosen by the library) is not supported yet");
  struct SplitInside {
    nn::Embedding tok{32, 16};
    Checkpoint<Split<2, nn::Mlp>> mid{Split<2, nn::Mlp>(nn::Mlp(16))};
    nn::Linear out{16, 32};
  };
  std::string message;
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 340 + c.rank());
    Trainer<SplitInside, optim::SGD> t(ctx, config("collection"), SplitInside{}, optim::SGD({.lr = 0.1}));
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    try {
      t.step(loader.next(ctx.cpu()));
    } catch (const Error& e) {
      if (c.rank() == 0) message = e.what();
    }
  });
  CAPTURE(message);
  CHECK(message.find("epl::Checkpoint around a layer split over a tensor-parallel group") != std::string::npos);
}
}
