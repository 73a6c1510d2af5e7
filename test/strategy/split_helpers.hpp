#pragma once
// What the split tests share: train a model a few steps on thread ranks and compare every rank's
// losses and its parts of the parameters with one device's.
#include <map>
#include <set>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

namespace epl::test::split {
inline gpt::Shape shape() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .dim = 16}; }
constexpr int kSteps = 4;
constexpr std::int64_t kBatch = 8;

using gpt::make_split_gpt;

struct Run {
  std::vector<double> losses;
  std::map<std::int64_t, std::vector<double>> params;  // by ordinal: this rank's part
  std::map<std::int64_t, nn::Parameter> specs;          // how each is sharded
};
inline Config config(std::int64_t micro) {
  Config c;
  c.set(keys::num_micro_batch, micro);
  return c;
}
template <class Model>
inline Run train(Context& ctx, const Config& cfg, Model model, double dropout_free_lr = 0.05) {
  Trainer<Model, optim::Momentum> t(ctx, cfg, std::move(model), optim::Momentum({.lr = dropout_free_lr}), {.seed = 3, .clip_norm = 0.5});
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
  Run r;
  for (int s = 0; s < kSteps; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
  nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
    if (!p.materialized()) return;
    r.params[p.ordinal] = test::values(p.value);
    r.specs[p.ordinal] = p;
  });
  return r;
}
// The elements of the whole parameter that a part holds, from the whole's values.
inline std::vector<double> part_of(const nn::Parameter& spec, const std::vector<double>& whole) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < spec.numel(); ++i) out.push_back(whole.at(spec.global_index(i)));
  return out;
}
// n ranks, split `tensor` ways: every rank's losses and its parts of the parameters against one
// device's; together the ranks hold every parameter, and the split ones really are split.
template <class Make>
void expect_equal(int n, const Config& cfg, const Run& ref, Make make, int tensor = 0) {
  if (tensor == 0) tensor = n;
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 400 + c.rank());
    runs[c.rank()] = train(ctx, cfg, make());
  });
  std::set<std::int64_t> held;
  int sharded = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(test::max_rel_diff(runs[r].losses, ref.losses) < 1e-5);
    for (const auto& [ordinal, spec] : runs[r].specs) sharded += spec.shard.parts == tensor;
    for (const auto& entry : runs[r].params) {
      const std::int64_t ordinal = entry.first;  // named, not bound: clang 14's CAPTURE cannot take a binding
      CAPTURE(ordinal);
      CHECK(test::max_rel_diff(entry.second, part_of(runs[r].specs.at(ordinal), ref.params.at(ordinal))) < 1e-5);
      held.insert(ordinal);
    }
  }
  CHECK(held.size() == ref.params.size());
  CHECK(sharded > 0);  // the split parts really are split
}
// The GPT as a 2-stage pipeline: the embedding and block 0 replicated, block 1 and the head split 2 ways.
using SplitStageGpt = Pipeline<Replicate<1, gpt::Embed, nn::Repeat<gpt::Block>>, Split<2, nn::Repeat<gpt::Block>, gpt::Head>>;
inline SplitStageGpt make_split_stage_gpt() {
  using Stage0 = Replicate<1, gpt::Embed, nn::Repeat<gpt::Block>>;
  using Stage1 = Split<2, nn::Repeat<gpt::Block>, gpt::Head>;
  auto g = gpt::make_gpt(shape());
  nn::Repeat<gpt::Block> first({g.body.layers[0]}), second({g.body.layers[1]});
  return SplitStageGpt(Stage0(g.embed, first), Stage1(second, g.head));
}
inline Run reference(const Config& cfg) {
  Context solo = Context::solo(399);
  return train(solo, cfg, gpt::make_gpt(shape()));
}
}  // namespace epl::test::split
