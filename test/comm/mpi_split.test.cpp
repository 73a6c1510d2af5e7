// Split over MPI processes: the GPT with its embedding, blocks and head split over every process
// of this mpirun (2 or 4; with 4 also 2-way split x 2 replicas), a colocated backbone and split
// classifier, and an expert-parallel MoE each equal the same run on one device (the GPT's and the
// MoE's predictions of a held-out batch too).
#include <map>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/mpi/mpi.hpp"

using namespace epl;

extern epl::comm::MpiCommunicator* g_world;

namespace test_comm_mpi_split {

namespace {
const gpt::Shape kShape{.vocab = 32, .context = 8, .layers = 2, .heads = 4, .dim = 16};
template <int N>
gpt::SplitGpt<N> make_split_gpt() {
  return gpt::make_split_gpt<N>(kShape);
}
template <int N>
struct MoeNet {
  gpt::Embed embed;
  nn::Residual<Split<N, nn::LayerNorm, nn::MoE>> ffn;
  gpt::Head head;
};
struct PlainMoeNet {
  gpt::Embed embed;
  nn::Residual<nn::LayerNorm, nn::MoE> ffn;
  gpt::Head head;
};
nn::MoE moe() { return nn::MoE({.dim = 16, .hidden = 24, .experts = 4, .top_k = 2, .capacity_factor = 0.75, .aux_weight = 0.05}); }

struct Run {
  std::vector<double> losses;
  std::map<std::int64_t, nn::Parameter> params;  // by ordinal: this rank's part, its values and spec
  std::vector<double> outputs;                    // trainer.predict on a held-out batch: this rank's rows, whole
  std::int64_t first_row = -1;                    // -1: not predicted
};
template <class Model>
Run train(Context& ctx, Model model) {
  Config cfg;
  cfg.set(keys::num_micro_batch, 2);
  Trainer<Model, optim::Momentum> t(ctx, cfg, std::move(model), optim::Momentum({.lr = 0.05}), {.seed = 3, .clip_norm = 0.5});
  auto ds = test::token_corpus(4000);
  data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
  Run r;
  for (int s = 0; s < 4; ++s) r.losses.push_back(t.step(loader.next(ctx.cpu())));
  data::WindowLoader held_out(ds, 8, 8, 29, t.data_shard());
  r.outputs = test::values(t.predict(held_out.next(ctx.cpu()).inputs));  // the vocabulary's columns gathered
  r.first_row = t.data_shard().first_of(8);
  nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
    if (p.materialized()) r.params[p.ordinal] = p;
  });
  return r;
}
void expect_equal(const Run& got, const Run& ref) {
  CHECK(test::max_rel_diff(got.losses, ref.losses) < 1e-5);
  CHECK(got.params.size() == ref.params.size());
  int split = 0;
  for (const auto& [ordinal, p] : got.params) {
    const auto whole = test::values(ref.params.at(ordinal).value);
    std::vector<double> part;
    for (std::int64_t i = 0; i < p.numel(); ++i) part.push_back(whole.at(p.global_index(i)));
    CHECK(test::max_rel_diff(test::values(p.value), part) < 1e-5);
    split += !p.shard.whole();
  }
  CHECK(split > 0);
  if (got.first_row >= 0) CHECK(test::max_rel_diff(got.outputs, test::rows_like(ref.outputs, 8, got.outputs, got.first_row)) < 1e-5);
}
}  // namespace

TEST_SUITE("mpi") {
TEST_CASE("mpi: split GPT, split x data parallel and expert-parallel MoE over MPI processes equal one device") {
  auto& world = *g_world;
  Context solo = Context::solo(91, 1);
  Context ctx(world, -1, 1);
  const Run ref = train(solo, gpt::make_gpt(kShape));
  if (world.size() == 2) {
    expect_equal(train(ctx, make_split_gpt<2>()), ref);
  } else if (world.size() == 4) {
    expect_equal(train(ctx, make_split_gpt<4>()), ref);
    expect_equal(train(ctx, make_split_gpt<2>()), ref);  // 2-way split x 2 replicas
  }
  auto g = gpt::make_gpt(kShape);
  const Run moe_ref = train(solo, PlainMoeNet{g.embed, nn::Residual<nn::LayerNorm, nn::MoE>(nn::LayerNorm(16), moe()), g.head});
  if (world.size() == 2)
    expect_equal(train(ctx, MoeNet<2>{g.embed, nn::Residual<Split<2, nn::LayerNorm, nn::MoE>>(Split<2, nn::LayerNorm, nn::MoE>(
                                                                                             nn::LayerNorm(16), moe())),
                                      g.head}),
                 moe_ref);
  else
    expect_equal(train(ctx, MoeNet<4>{g.embed, nn::Residual<Split<4, nn::LayerNorm, nn::MoE>>(Split<4, nn::LayerNorm, nn::MoE>(
                                                                                             nn::LayerNorm(16), moe())),
                                      g.head}),
                 moe_ref);
}

TEST_CASE("mpi: a colocated backbone and split classifier over MPI processes equal one device") {
  auto& world = *g_world;
  struct Backbone {
    nn::Embedding tok;
    nn::Linear fc;
    nn::ReLU act;
  };
  struct Classifier {
    nn::Linear out;
  };
  struct Plain {
    Backbone b;
    Classifier c;
  };
  auto backbone = [] { return Backbone{nn::Embedding(32, 16), nn::Linear(16, 16), {}}; };
  Context solo = Context::solo(92, 1);
  Context ctx(world, -1, 1);
  Config cfg;
  auto run = [&](Context& c, auto model, const Config& conf) {
    using M = decltype(model);
    Trainer<M, optim::Momentum> t(c, conf, std::move(model), optim::Momentum({.lr = 0.1}), {.seed = 4});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 1, 8, 9, t.data_shard());  // windows of one token: one row each
    Run r;
    for (int s = 0; s < 4; ++s) {
      Batch b = loader.next(c.cpu());
      r.losses.push_back(t.step({b.inputs.view({b.inputs.dim(0)}), b.targets.view({b.targets.dim(0)})}));
    }
    nn::for_each_parameter(t.model(), [&](nn::Parameter& p) { r.params[p.ordinal] = p; });
    return r;
  };
  const Run ref = run(solo, Plain{backbone(), {nn::Linear(16, 64)}}, cfg);
  cfg.set(keys::colocate_split_and_replicate, true);
  if (world.size() == 2) {
    struct Colocated {
      Replicate<2, Backbone> b;
      Split<2, Classifier> c;
    };
    expect_equal(run(ctx, Colocated{Replicate<2, Backbone>(backbone()), Split<2, Classifier>(Classifier{nn::Linear(16, 64)})}, cfg), ref);
  } else {
    struct Colocated {
      Replicate<4, Backbone> b;
      Split<4, Classifier> c;
    };
    expect_equal(run(ctx, Colocated{Replicate<4, Backbone>(backbone()), Split<4, Classifier>(Classifier{nn::Linear(16, 64)})}, cfg), ref);
  }
}
}
}  // namespace test_comm_mpi_split
