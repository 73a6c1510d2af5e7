// A layer of one's own (gated_linear.hpp), checked against finite differences in double
// precision, then trained in a classifier, data parallel on thread ranks (EPL_NUM_RANKS) or MPI
// processes, exactly as the built-in layers are.
//   custom_layer [--steps=N]
#include <epl/epl.hpp>
#include <epl/runtime/launch.hpp>
#include <epl/testing/gradcheck.hpp>

#include <cstdio>

#include "gated_linear.hpp"

namespace nn = epl::nn;

struct Classifier {  // an aggregate of layers is a layer: the custom one among built-in ones
  custom::GatedLinear glu;
  nn::LayerNorm norm;
  nn::Linear head;
};

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> steps{"steps", 60, "training steps", {.min = 1}};
  auto cfg = epl::Config::from_args(argc, argv, steps);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("custom_layer", "A layer of one's own, gradient-checked, then trained.").c_str(), stdout);
    return 0;
  }

  // 1. Its backward against finite differences, in f64 on device::CpuF64.
  custom::GatedLinear glu(5, 3);
  (void)epl::param::materialize(glu, epl::device::CpuF64{}, {.dtype = epl::DType::kF64, .seed = 1});
  epl::device::CpuF64 cpu64;
  epl::Tensor probe = cpu64.empty({4, 5}, epl::DType::kF64);
  for (std::int64_t i = 0; i < probe.numel(); ++i) probe.span<double>()[i] = 2 * epl::uniform01(9, static_cast<std::uint64_t>(i)) - 1;
  auto check = epl::testing::gradcheck(glu, probe);
  std::printf("gradcheck of GatedLinear: %d derivatives, largest error %.2e%s\n", check.checked, check.max_error,
              check.ok(1e-6) ? "" : (" at " + check.worst).c_str());
  if (!check.ok(1e-6)) return 1;

  // 2. Trained as part of a model: 4 classes of points, the batch divided among the ranks.
  return epl::launch(cfg, [&](epl::Context& ctx) {
    constexpr std::int64_t kBatch = 12, kFeatures = 6, kClasses = 4;
    epl::Trainer<Classifier, epl::optim::AdamW> trainer(
        ctx, cfg, Classifier{custom::GatedLinear(kFeatures, 16), nn::LayerNorm(16), nn::Linear(16, kClasses)},
        epl::optim::AdamW({.lr = 0.02, .weight_decay = 0}), {.seed = 7});
    const epl::data::Shard shard = trainer.data_shard();  // the replicas divide each batch
    EPL_CHECK(kBatch % shard.ranks == 0, "the batch of ", kBatch, " does not divide among ", shard.ranks, " replicas");
    const std::int64_t per = kBatch / shard.ranks, first = shard.rank * per;
    epl::Tensor x = ctx.cpu().empty({per, kFeatures}, epl::DType::kF32), y = ctx.cpu().empty({per}, epl::DType::kI32);
    for (std::int64_t s = trainer.steps() + 1; s <= cfg.get(steps); ++s) {  // resumed (--checkpoint.dir): from its step
      for (std::int64_t r = 0; r < per; ++r) {  // point r of the global batch: its class decides its features
        const std::int64_t g = first + r;
        const auto label = static_cast<std::int32_t>((g + s) % kClasses);
        y.span<std::int32_t>()[r] = label;
        for (std::int64_t f = 0; f < kFeatures; ++f)
          x.span<float>()[r * kFeatures + f] =
              static_cast<float>((f % kClasses == label ? 1.0 : 0.0) + 0.3 * epl::uniform01(s, static_cast<std::uint64_t>(g * kFeatures + f)));
      }
      const double loss = trainer.step({x, y});
      if (ctx.rank() == 0 && (s == 1 || s % 10 == 0)) std::printf("step %3lld  loss %.4f\n", static_cast<long long>(s), loss);
    }
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
