// Offload (offload.level = "v0"): weights, gradients and optimizer state in the host pool, each
// layer's weights copied to the device before it runs. Trains exactly like the run that keeps
// them on the device (1, 2 and 4 thread ranks, with accumulation); the device's and the host
// pool's accounts prove where the bytes are; what cannot work is named.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace test_policy_offload {

namespace {
using Offloading = Policies<Zero<3>, Offload<offload::V0>>;
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }

struct Run {
  std::vector<double> losses, params;
};

Config config(const char* offload, const char* zero, std::int64_t micro = 1, int splits = 5) {
  Config c;
  if (offload) c.set("offload.level", offload);
  if (zero) c.set("zero.level", zero);
  c.set("pipeline.num_micro_batch", micro);
  c.set("communication.max_splits", splits);
  return c;
}

std::vector<Run> train(int n, const Config& cfg, int first_index) {
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, first_index + c.rank());
    Trainer<gpt::Gpt, optim::AdamW, Offloading> t(ctx, cfg, gpt::make_gpt(tiny()), optim::AdamW({.lr = 0.01, .eps = 1e-3}),
                                                  {.seed = 5, .clip_norm = 0.5});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
    r.losses.push_back(t.evaluate(loader.next(ctx.cpu())));
    t.gather_parameters();
    r.params = test::flat_params(t.model());
  });
  return runs;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("offload: 1, 2 and 4 thread ranks, with and without accumulation, train like the weights kept on the device") {
  for (std::int64_t micro : {1, 2})
    for (int n : {1, 2, 4}) {
      CAPTURE(micro);
      CAPTURE(n);
      const auto plain = train(n, config("", "", micro), 400);       // no ZeRO, no offload
      const auto runs = train(n, config("v0", nullptr, micro), 410);  // zero.level unset: the compiled stage 3
      for (std::size_t r = 0; r < runs.size(); ++r) {
        // the training losses are the global batch's; the last, evaluate()'s, the rank's rows
        CHECK(test::max_rel_diff(runs[r].losses, plain[r].losses) <= 1e-6);
        CHECK(test::max_rel_diff(runs[r].params, plain[0].params) <= 1e-6);
      }
    }
}

TEST_CASE("offload: the device holds a few blocks of weights during a step, and the host pool holds the rest") {
  const gpt::Shape shape{.vocab = 64, .context = 8, .layers = 4, .heads = 2, .dim = 64};
  for (int n : {1, 2}) {
    CAPTURE(n);
    struct Seen {
      std::int64_t psi = 0, block = 0, device_peak = 0;
      MemoryStats device, host;
    };
    std::vector<Seen> seen(static_cast<std::size_t>(n));
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 430 + 10 * n + c.rank());
      Trainer<gpt::Gpt, optim::AdamW, Offloading> t(ctx, config("v0", "v2", 1, 20), gpt::make_gpt(shape), optim::AdamW({.lr = 0.01}),
                                                    {.seed = 5});
      CHECK(t.offloaded());
      auto ds = test::token_corpus(4000);
      data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
      memory_account(ctx.cpu().id()).reset_peaks();  // init draws the whole model once on the device, then offloads it
      t.step(loader.next(ctx.cpu()));
      t.step(loader.next(ctx.cpu()));
      Seen& s = seen[static_cast<std::size_t>(c.rank())];
      s.psi = t.arena().size();
      for (const auto& u : t.arena().blocks()) s.block = std::max(s.block, u.size());
      s.device = memory_stats(ctx.cpu().id());
      s.host = memory_stats(DeviceId{DeviceKind::kHost, ctx.cpu().id().index});
    });
    for (const auto& s : seen) {
      CAPTURE(s.psi);
      CAPTURE(s.block);
      // between steps the device keeps no weight, gradient or optimizer byte ...
      CHECK(s.device.current_of(MemoryCategory::kParameters) == 0);
      CHECK(s.device.current_of(MemoryCategory::kGradients) == 0);
      CHECK(s.device.current_of(MemoryCategory::kOptimizerState) == 0);
      // ... the host pool keeps this rank's shard of all three (fp32 AdamW: 4 + 4 + 8 bytes an element) ...
      CHECK(s.host.current_of(MemoryCategory::kParameters) == 4 * s.psi / n);
      CHECK(s.host.current_of(MemoryCategory::kGradients) == 4 * s.psi / n);
      CHECK(s.host.current_of(MemoryCategory::kOptimizerState) == 8 * s.psi / n);
      // ... and during a step the device held the running layer's blocks and the next one, with
      // their staged shards: a small part of the model
      CHECK(s.block < s.psi / 10);
      CHECK(s.device.peak_of(MemoryCategory::kParameters) <= 4 * 4 * s.block);
      CHECK(s.device.peak_of(MemoryCategory::kParameters) < 4 * s.psi / 3);
    }
  }
}

TEST_CASE("offload: a program built without it, and a ZeRO stage below 3, are named") {
  auto message_of = [](auto build) {
    std::string message;
    try {
      build();
    } catch (const Error& e) {
      message = e.what();
    }
    return message;
  };
  device::Cpu d(470);
  const auto without = message_of([&] {
    Trainer<gpt::Gpt, optim::SGD, Policies<Zero<3>>> t(d, config("v0", nullptr), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(without.find("offload.level = \"v0\" but this program was built without offload; build the Trainer with "
                     "epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>>") != std::string::npos);
  const auto stage = message_of([&] {
    Trainer<gpt::Gpt, optim::SGD, Offloading> t(d, config("v0", "v1"), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(stage.find("but zero.level = \"v1\" asks for stage 2; set zero.level = \"v2\"") != std::string::npos);
  const auto compiled_level = message_of([&] {  // offload.level unset: the compiled level, named as such
    Trainer<gpt::Gpt, optim::SGD, Offloading> t(d, config(nullptr, "v0"), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(compiled_level.find("offload.level = \"v0\" (unset: the program's epl::Offload<epl::offload::V0>)") != std::string::npos);
  CHECK(compiled_level.find("turn offload off with offload.level = \"\" (the empty string)") != std::string::npos);
  const auto fp16 = message_of([&] {
    Config cfg = config("v0", nullptr);
    cfg.set("communication.fp16", true);
    Trainer<gpt::Gpt, optim::SGD, Offloading> t(d, cfg, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(fp16.find("communication.fp16 with ZeRO stage 3 (zero.level = \"v2\", which offload.level = \"v0\" needs) is not "
                  "supported") != std::string::npos);
  CHECK(fp16.find("or use zero.level") == std::string::npos);  // offload rejects that
  // unset, offload.level is the compiled level; set to "" it is off
  Trainer<gpt::Gpt, optim::SGD, Offloading> compiled(d, config(nullptr, nullptr), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  CHECK(compiled.offloaded());
  Trainer<gpt::Gpt, optim::SGD, Offloading> off(d, config("", nullptr), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  CHECK(!off.offloaded());
  CHECK(off.zero_stage() == 3);
}
}
}  // namespace test_policy_offload
