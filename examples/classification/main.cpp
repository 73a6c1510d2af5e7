// EPL's large-scale classification: a small replicated backbone and a 100,000-class classifier
// split over the same devices (cluster.colocate_split_and_replicate). The backbone trains data
// parallel on each rank's rows; its features are all-gathered into the classifier, which holds
// 1/N of the classes per rank, and the loss runs over the split logits (no rank ever holds a
// row's 100,000 logits). Synthetic data: each class has a prototype; a sample is its class's
// prototype plus noise. After training it prints its accuracy on a held-out batch (trainer.predict).
//
//   classification [--ranks=N] [--classes=100000] [--steps=150] [--batch=64] [--replicate] [--separate]
// N = 1, 2 or 4 thread ranks (or MPI processes under epl-launch); --replicate trains the same
// model data parallel (every rank holding the whole classifier) for comparison; --separate (4
// ranks) places the backbone on 2 ranks and the classifier split over 2 others, EPL's placement
// without cluster.colocate_split_and_replicate.
#include <epl/epl.hpp>
#include <epl/runtime/launch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace nn = epl::nn;

namespace {
constexpr std::int64_t kInput = 64, kHidden = 128, kFeatures = 64;
struct Backbone {
  nn::Linear fc1;
  nn::ReLU act1;
  nn::Linear fc2;
  nn::ReLU act2;
};
struct Classifier {
  nn::Linear fc;
};
Backbone backbone() { return {nn::Linear(kInput, kHidden), {}, nn::Linear(kHidden, kFeatures), {}}; }
// Replicate<N> backbone and Split<N> classifier on the same N ranks.
template <int N>
struct Colocated {
  epl::Replicate<N, Backbone> backbone;
  epl::Split<N, Classifier> classifier;
};
// The same layers, data parallel: every rank holds the whole classifier.
struct Replicated {
  Backbone backbone;
  Classifier classifier;
};

struct Settings {
  std::int64_t classes = 0, steps = 0, batch = 0;
};
// This rank's rows of step s's global batch: features of the row's class prototype plus noise.
epl::Batch batch_rows(const epl::device::Cpu& cpu, const Settings& st, std::int64_t step, epl::data::Shard shard) {
  const std::int64_t per = st.batch / shard.ranks;
  epl::Tensor x = cpu.empty({per, kInput}, epl::DType::kF32), y = cpu.empty({per}, epl::DType::kI32);
  for (std::int64_t r = 0; r < per; ++r) {
    const auto g = static_cast<std::uint64_t>(step * st.batch + shard.rank * per + r);
    // classes drawn from the first 512 (so the run learns something in a few steps), all scored
    const auto label = static_cast<std::int64_t>(epl::uniform01(5, g) * static_cast<double>(std::min<std::int64_t>(512, st.classes)));
    y.span<std::int32_t>()[r] = static_cast<std::int32_t>(label);
    for (std::int64_t f = 0; f < kInput; ++f)
      x.span<float>()[r * kInput + f] = static_cast<float>(2 * epl::uniform01(7, static_cast<std::uint64_t>(label * kInput + f)) - 1 +
                                                           0.3 * (2 * epl::uniform01(9, g * kInput + static_cast<std::uint64_t>(f)) - 1));
  }
  return {x, y};
}

template <class Model>
void train(epl::Context& ctx, const epl::Config& cfg, const Settings& st, Model model, const char* how) {
  epl::Trainer<Model, epl::optim::AdamW> trainer(ctx, cfg, std::move(model), epl::optim::AdamW({.lr = 3e-3, .weight_decay = 0}),
                                                 {.seed = 11});
  const auto shard = trainer.data_shard();
  EPL_CHECK(st.batch % shard.ranks == 0, "--batch=", st.batch, " does not divide among ", shard.ranks, " ranks' rows");
  const auto& cpu = ctx.cpu();
  if (ctx.rank() == 0)
    std::printf("classification: %lld classes, %lld parameters, %s on %d rank(s), global batch %lld\n",
                static_cast<long long>(st.classes), static_cast<long long>(nn::parameter_count(trainer.model())), how, ctx.size(),
                static_cast<long long>(st.batch));
  for (std::int64_t s = trainer.steps() + 1; s <= st.steps; ++s) {  // resumed (--checkpoint.dir): from its step; step s's rows are fixed
    auto t0 = std::chrono::steady_clock::now();
    const double loss = trainer.step(batch_rows(cpu, st, s, shard));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ctx.rank() == 0) epl::print_progress(s, loss, static_cast<double>(st.batch) / secs, "samples", cpu.id());
  }
  // Accuracy on a batch it never trained on: trainer.predict gives each rank its rows' whole
  // logits (the split classifier's columns gathered), and the ranks add up their counts.
  const epl::Batch held_out = batch_rows(cpu, st, st.steps + 1, shard);
  const epl::Tensor logits = trainer.predict(held_out.inputs);
  double counts[2] = {0, static_cast<double>(logits.dim(0))};  // right, rows (stages that share rows count them alike)
  for (std::int64_t r = 0; r < logits.dim(0); ++r) {
    const float* row = logits.span<float>().data() + r * st.classes;
    counts[0] += static_cast<double>(std::max_element(row, row + st.classes) - row == held_out.targets.span<std::int32_t>()[r]);
  }
  ctx.world().all_reduce(epl::comm::Buffer(counts, 2, epl::DType::kF64), epl::comm::ReduceOp::kSum);
  if (ctx.rank() == 0)
    std::printf("held-out accuracy: %.1f%% of %lld samples\n", 100 * counts[0] / counts[1], static_cast<long long>(st.batch));
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> classes{"classes", 100000, "classes of the classifier (a multiple of the ranks)", {.min = 2, .max = 1 << 26}};
  const epl::Flag<std::int64_t> steps{"steps", 150, "optimizer steps", {.min = 1}};
  const epl::Flag<std::int64_t> batch{"batch", 64, "samples per global batch", {.min = 1, .max = 1 << 20}};
  const epl::Flag<std::int64_t> ranks{"ranks", 0, "thread ranks: 1, 2 or 4 (0: EPL_NUM_RANKS, else 1)", {.min = 0, .max = 4}};
  const epl::Flag<bool> replicate{"replicate", false, "train the classifier data parallel instead of split (for comparison)"};
  const epl::Flag<bool> separate{"separate", false, "4 ranks: the backbone on 2, the classifier split over the 2 others"};
  auto cfg = epl::Config::from_args(argc, argv, classes, steps, batch, ranks, replicate, separate);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("classification", "A replicated backbone and a split 100,000-class classifier on the same devices.").c_str(),
               stdout);
    return 0;
  }
  const Settings st{cfg.get(classes), cfg.get(steps), cfg.get(batch)};
  auto classifier = [&] { return Classifier{nn::Linear(kFeatures, st.classes)}; };
  return epl::launch(cfg, [&](epl::Context& ctx) {
    const int n = ctx.size();
    if (cfg.get(replicate) || n == 1) return train(ctx, cfg, st, Replicated{backbone(), classifier()}, "data parallel");
    if (cfg.get(separate)) {
      EPL_CHECK(n == 4, "--separate places the backbone and the classifier on 2 ranks each: run it on 4 ranks (--ranks=4), got ", n);
      return train(ctx, cfg, st, Colocated<2>{epl::Replicate<2, Backbone>(backbone()), epl::Split<2, Classifier>(classifier())},
                   "backbone and split classifier on separate ranks");
    }
    epl::Config colocated = cfg;
    colocated.set(epl::keys::colocate_split_and_replicate, true);
    if (n == 2)
      return train(ctx, colocated, st, Colocated<2>{epl::Replicate<2, Backbone>(backbone()), epl::Split<2, Classifier>(classifier())},
                   "split classifier, colocated");
    EPL_CHECK(n == 4, "the classification example runs split on 1, 2 or 4 ranks (--ranks), got ", n, "; other counts with --replicate");
    train(ctx, colocated, st, Colocated<4>{epl::Replicate<4, Backbone>(backbone()), epl::Split<4, Classifier>(classifier())},
          "split classifier, colocated");
  }, {.ranks = static_cast<int>(cfg.get(ranks))});
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
