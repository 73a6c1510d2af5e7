// A small mixture-of-experts transformer on the fortunes text (EPL's MoE example): attention and
// the gate replicated on every rank, the experts split over the ranks (all_to_all dispatch and
// combine). A progress line per step: loss (with the load-balancing term), tokens/s, peak memory,
// and the share of expert choices dropped for want of capacity.
//
//   moe [--ranks=N] [--steps=100] [--experts=8] [--top_k=2] [--capacity=1.25] [--layers=2]
//       [--dim=64] [--heads=4] [--context=32] [--batch=8] [--data=FILE]...
// N = 1, 2 or 4 thread ranks (or MPI processes under epl-launch); the experts divide among them.
#include <epl/epl.hpp>
#include <epl/runtime/launch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "../gpt/gpt.hpp"

namespace nn = epl::nn;

namespace {
template <int N>
struct MoeBlock {
  nn::Residual<nn::LayerNorm, nn::CausalSelfAttention> attn;
  nn::Residual<epl::Split<N, nn::LayerNorm, nn::MoE>> ffn;  // the experts split N ways
};
template <int N>
struct MoeGpt {
  gpt::Embed embed;
  nn::Repeat<MoeBlock<N>> blocks;
  gpt::Head head;
};
struct Settings {
  gpt::Shape shape;
  nn::MoE::Options moe;
  std::int64_t steps = 0, batch = 0;
  std::vector<std::filesystem::path> files;
};
template <int N>
MoeGpt<N> make(const Settings& st) {
  const auto& s = st.shape;
  auto g = gpt::make_gpt(s);
  MoeGpt<N> m{g.embed, {}, g.head};
  for (std::int64_t i = 0; i < s.layers; ++i)
    m.blocks.layers.push_back({nn::Residual<nn::LayerNorm, nn::CausalSelfAttention>(nn::LayerNorm(s.dim), nn::CausalSelfAttention(s.dim, s.heads)),
                               nn::Residual<epl::Split<N, nn::LayerNorm, nn::MoE>>(epl::Split<N, nn::LayerNorm, nn::MoE>(
                                   nn::LayerNorm(s.dim), nn::MoE(st.moe)))});
  return m;
}
template <int N>
void train(epl::Context& ctx, const epl::Config& cfg, const Settings& st) {
  epl::Trainer<MoeGpt<N>, epl::optim::AdamW> trainer(ctx, cfg, make<N>(st), epl::optim::AdamW({.lr = 2e-3, .weight_decay = 0}),
                                                     {.seed = 42, .clip_norm = 1.0});
  const auto& cpu = ctx.cpu();
  auto text = epl::data::TokenDataset::from_text(st.files);
  epl::data::WindowLoader loader(text, st.shape.context, st.batch, 1234, trainer.data_shard());
  trainer.watch(loader);  // saved with checkpoints (--checkpoint.dir), restored on resume
  if (ctx.rank() == 0)
    std::printf("moe: %lld parameters, %lld experts (top-%lld, capacity factor %.2f) split over %d rank(s), %lld layers, dim %lld\n",
                static_cast<long long>(nn::parameter_count(trainer.model())), static_cast<long long>(st.moe.experts),
                static_cast<long long>(st.moe.top_k), st.moe.capacity_factor, ctx.size(), static_cast<long long>(st.shape.layers),
                static_cast<long long>(st.shape.dim));
  auto dropped = [&] {
    std::int64_t d = 0, r = 0;
    for (auto& b : trainer.model().blocks.layers) {
      const auto& moe = std::get<2>(std::get<0>(b.ffn.body.layers).body().layers);
      d += moe.dropped();
      r += moe.routed();
    }
    return std::pair{d, r};
  };
  for (std::int64_t s = trainer.steps() + 1; s <= st.steps; ++s) {  // resumed: from the checkpoint's step
    const auto before = dropped();
    const auto sent = trainer.mesh().tensor().stats().bytes_sent;  // the experts' all_to_all and all-gathers
    auto t0 = std::chrono::steady_clock::now();
    const double loss = trainer.step(loader.next(cpu));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto after = dropped();
    if (ctx.rank() == 0) {
      std::printf("dropped %5.1f%%  sent %7.1f KiB  ", 100.0 * static_cast<double>(after.first - before.first) /
                                                           static_cast<double>(std::max<std::int64_t>(1, after.second - before.second)),
                  static_cast<double>(trainer.mesh().tensor().stats().bytes_sent - sent) / 1024.0);
      epl::print_progress(s, loss, static_cast<double>(st.batch * st.shape.context) / secs, "tokens", cpu.id());
    }
  }
}
std::vector<std::filesystem::path> default_corpus() {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat" && e.path().extension() != ".u8") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  EPL_CHECK(!files.empty(), "no text found in ", dir, "; install the Debian package fortunes (or fortunes-min), or pass --data=FILE");
  return files;
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> steps{"steps", 100, "optimizer steps", {.min = 1}};
  const epl::Flag<std::vector<std::string>> data{"data", {}, "a text file to train on (give it once per file); default: the fortunes"};
  const epl::Flag<std::int64_t> experts{"experts", 8, "experts per MoE layer (a multiple of the ranks)", {.min = 1, .max = 4096}};
  const epl::Flag<std::int64_t> top_k{"top_k", 2, "experts each token goes to", {.min = 1, .max = 2}};
  const epl::Flag<double> capacity{"capacity", 1.25, "capacity factor: an expert takes at most factor x tokens x k / experts", {.min = 0.01, .max = 1000}};
  const epl::Flag<std::int64_t> layers{"layers", 2, "transformer blocks", {.min = 1, .max = 256}};
  const epl::Flag<std::int64_t> dim{"dim", 64, "model width (a multiple of --heads)", {.min = 1, .max = 16384}};
  const epl::Flag<std::int64_t> heads{"heads", 4, "attention heads", {.min = 1, .max = 1024}};
  const epl::Flag<std::int64_t> context{"context", 32, "tokens per window", {.min = 1, .max = 1 << 16}};
  const epl::Flag<std::int64_t> batch{"batch", 8, "windows per global batch", {.min = 1}};
  const epl::Flag<std::int64_t> ranks{"ranks", 0, "thread ranks: 1, 2 or 4 (0: EPL_NUM_RANKS, else 1)", {.min = 0, .max = 4}};
  auto cfg = epl::Config::from_args(argc, argv, steps, data, experts, top_k, capacity, layers, dim, heads, context, batch, ranks);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("moe", "A mixture-of-experts transformer with its experts split over the ranks.").c_str(), stdout);
    return 0;
  }
  Settings st;
  st.shape = {.vocab = 256, .context = cfg.get(context), .layers = cfg.get(layers), .heads = cfg.get(heads), .dim = cfg.get(dim)};
  EPL_CHECK(st.shape.dim % st.shape.heads == 0, "--dim=", st.shape.dim, " is not a multiple of --heads=", st.shape.heads);
  st.moe = {.dim = st.shape.dim, .hidden = 2 * st.shape.dim, .experts = cfg.get(experts), .top_k = cfg.get(top_k),
            .capacity_factor = cfg.get(capacity), .aux_weight = 0.01};
  st.steps = cfg.get(steps);
  st.batch = cfg.get(batch);
  for (const auto& f : cfg.get(data)) st.files.emplace_back(f);
  if (st.files.empty()) st.files = default_corpus();
  return epl::launch(cfg, [&](epl::Context& ctx) {
    switch (ctx.size()) {
      case 1: return train<1>(ctx, cfg, st);
      case 2: return train<2>(ctx, cfg, st);
      case 4: return train<4>(ctx, cfg, st);
      default: EPL_FAIL("the moe example splits its experts over 1, 2 or 4 ranks (--ranks), got ", ctx.size());
    }
  }, {.ranks = static_cast<int>(cfg.get(ranks))});
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
