// EPL's quick start in epl: a small dense network on random data, trained with the momentum
// optimizer, printing the loss each iteration.
//
//   EPL (TensorFlow)                                   epl (C++)
//   epl.init(); epl.set_default_strategy(replicate(1))   a bare model trains as Replicate<1, Model>
//   x: 500 x 20 random ints, labels 0..9, batch 10      the same
//   dense(2) -> dense(10) -> sparse softmax xent        Net { Linear(20, 2); Linear(2, 10); }
//   MomentumOptimizer(lr=0.001, momentum=0.9)           optim::Momentum({.lr = 0.001, .momentum = 0.9})
#include <epl/epl.hpp>
#include <epl/runtime/launch.hpp>

#include <cstdio>
#include <string>

namespace nn = epl::nn;

struct Net {
  nn::Linear dense1;
  nn::Linear dense2;
};

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> epochs_flag{"epochs", 1, "passes over the 500 samples", {.min = 1, .max = 1000000}};
  auto cfg = epl::Config::from_args(argc, argv, epochs_flag);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("quickstart", "EPL's quick start: a dense network on random data.").c_str(), stdout);
    return 0;
  }
  const std::int64_t epochs = cfg.get(epochs_flag);

  // Data parallel out of the box: EPL_NUM_RANKS thread ranks, or MPI processes under
  // epl-launch; the global batch of 10 is divided among the ranks.
  return epl::launch(cfg, [&](epl::Context& ctx) {
    const auto& cpu = ctx.cpu();
    constexpr std::int64_t kSamples = 500, kFeatures = 20, kClasses = 10, kBatch = 10;
    // Random data as in EPL's example: integer features in [0, 10), labels in [0, 10).
    auto key = epl::stream_key(2022, 0);
    epl::Tensor x = cpu.empty({kSamples, kFeatures}, epl::DType::kF32);
    epl::Tensor y = cpu.empty({kSamples}, epl::DType::kI32);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.span<float>()[i] = static_cast<float>(static_cast<int>(epl::uniform01(key, i) * 10));
    for (std::int64_t i = 0; i < kSamples; ++i) y.span<std::int32_t>()[i] = static_cast<std::int32_t>(epl::uniform01(key, 1000000 + i) * kClasses);

    epl::Trainer<Net, epl::optim::Momentum> trainer(ctx, cfg, Net{nn::Linear(kFeatures, 2), nn::Linear(2, kClasses)},
                                                    epl::optim::Momentum({.lr = 0.001, .momentum = 0.9}));
    // This rank's share of each batch: the data-parallel replicas divide it (pipeline stages of
    // one replica read the same rows; under cluster.rank_speeds, in proportion to the speeds).
    const epl::data::Shard shard = trainer.data_shard();
    EPL_CHECK(!shard.weights.empty() || kBatch % shard.ranks == 0, "the quick start's batch of ", kBatch, " does not divide among ",
              shard.ranks, " replicas");
    const std::int64_t per = shard.rows_of(kBatch), first = shard.first_of(kBatch);
    epl::log_rank(ctx.rank(), "of ", ctx.size(), ": ", per, " of each batch's ", kBatch, " samples");
    // A run resumed from a checkpoint (--checkpoint.dir) goes on from the iteration it saved.
    for (std::int64_t iteration = trainer.steps(); iteration < epochs * (kSamples / kBatch); ++iteration) {
      const std::int64_t lo = iteration % (kSamples / kBatch) * kBatch + first;
      double loss = trainer.step({x.slice(lo, lo + per), y.slice(lo, lo + per)});
      if (ctx.rank() == 0) std::printf("Iteration %lld, loss: %.6f\n", static_cast<long long>(iteration), loss);
    }
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
