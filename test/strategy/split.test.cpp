// Split (tensor parallelism) on thread ranks trains exactly like one device with the same global
// batch: each built-in rule (Linear column/row pairs in Mlp, attention by heads, Embedding and
// the cross-entropy by vocabulary, Dropout on split columns) on 2 and 4 ranks, Split x data
// parallel, Split inside a pipeline stage; each rule moves exactly its formula's bytes; bad
// setups are clear errors.
#include <atomic>

#include "../multirank_matrix.hpp"
#include "split_helpers.hpp"

using namespace epl;

using namespace epl::test::split;

namespace test_strategy_split {

TEST_SUITE("cpu") {
TEST_CASE("split: the GPT's embedding, blocks and head split 2 and 4 ways equal one device, with accumulation") {
  for (std::int64_t micro : {1, 2}) {
    CAPTURE(micro);
    const Run ref = reference(config(micro));
    expect_equal(2, config(micro), ref, [] { return make_split_gpt<2>(shape()); });
    expect_equal(4, config(micro), ref, [] { return make_split_gpt<4>(shape()); });
  }
}

TEST_CASE("split x data parallel: the split GPT on 2 x 2 ranks equals one device") {
  const Run ref = reference(config(2));
  expect_equal(4, config(2), ref, [] { return make_split_gpt<2>(shape()); }, 2);
}

TEST_CASE("split inside a pipeline stage: a replicated stage and a split stage, with and without data parallel") {
  auto make = [] { return make_split_stage_gpt(); };
  Config cfg = config(4);
  cfg.set(keys::pipeline_strategy, "PreferBackward");
  const Run ref = reference(config(4));
  expect_equal(4, cfg, ref, make, 2);  // 2 stages x tensor 2
  expect_equal(8, cfg, ref, make, 2);  // x 2 replicas
}

TEST_CASE("split with dropout on split columns draws the single-device masks") {
  struct Net {
    nn::Embedding tok;
    Split<2, nn::Linear, nn::GELU, nn::Dropout, nn::Linear> mlp;
    nn::Dropout drop;
    nn::Linear out;
  };
  struct Plain {
    nn::Embedding tok;
    nn::Seq<nn::Linear, nn::GELU, nn::Dropout, nn::Linear> mlp;
    nn::Dropout drop;
    nn::Linear out;
  };
  auto ref_run = [&] {
    Context solo = Context::solo(398);
    return train(solo, config(2), Plain{nn::Embedding(32, 16), nn::Seq<nn::Linear, nn::GELU, nn::Dropout, nn::Linear>(
                                        nn::Linear(16, 64), {}, nn::Dropout(0.3), nn::Linear(64, 16)), nn::Dropout(0.2), nn::Linear(16, 32)});
  }();
  expect_equal(2, config(2), ref_run, [] {
    return Net{nn::Embedding(32, 16), Split<2, nn::Linear, nn::GELU, nn::Dropout, nn::Linear>(nn::Linear(16, 64), {}, nn::Dropout(0.3),
                                                                                              nn::Linear(64, 16)),
               nn::Dropout(0.2), nn::Linear(16, 32)};
  });
}

// A layer that needs the whole activation after a dropout on split columns makes the Linear that
// split them gather: the dropout then runs on the whole and must draw the whole tensor's mask (it
// once kept drawing at its column positions).
TEST_CASE("split: a dropout on split columns followed by a layer that needs the whole draws the whole mask") {
  struct Net {
    nn::Embedding tok;
    Split<2, nn::Linear, nn::Dropout, nn::LayerNorm, nn::Linear> body;
    nn::Linear out;
  };
  struct Plain {
    nn::Embedding tok;
    nn::Seq<nn::Linear, nn::Dropout, nn::LayerNorm, nn::Linear> body;
    nn::Linear out;
  };
  Context solo = Context::solo(396);
  const Run ref = train(solo, config(2), Plain{nn::Embedding(32, 16), nn::Seq<nn::Linear, nn::Dropout, nn::LayerNorm, nn::Linear>(
                                                     nn::Linear(16, 32), nn::Dropout(0.3), nn::LayerNorm(32), nn::Linear(32, 16)),
                                                 nn::Linear(16, 32)});
  expect_equal(2, config(2), ref, [] {
    return Net{nn::Embedding(32, 16), Split<2, nn::Linear, nn::Dropout, nn::LayerNorm, nn::Linear>(nn::Linear(16, 32), nn::Dropout(0.3),
                                                                                                  nn::LayerNorm(32), nn::Linear(32, 16)),
               nn::Linear(16, 32)};
  });
}

// Exact communication: a split Mlp moves one all-reduce of the block's activations forward and
// one backward; the vocabulary-parallel loss moves 3 values a row, whatever the vocabulary.
TEST_CASE("split: the bytes each block moves over the tensor axis equal the formula") {
  constexpr std::int64_t rows = 12, dim = 8, vocab = 4000;
  auto bytes_of_a_step = [&](auto make, int n) {
    std::int64_t sent = -1;
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 420 + c.rank());
      auto model = make();
      Trainer<decltype(model), optim::SGD> t(ctx, Config{}, std::move(model), optim::SGD({}));
      Tensor x = test::random({rows, dim}, 5), y = test::ids({rows}, 8, 6);
      const auto before = t.mesh().tensor().stats().bytes_sent;
      (void)t.step({x, y});
      if (c.rank() == 0) sent = t.mesh().tensor().stats().bytes_sent - before;
    });
    return sent;
  };
  for (int n : {2, 4}) {
    CAPTURE(n);
    const std::int64_t ring = 2 * (n - 1);  // an all-reduce moves 2(n-1)/n of its buffer per rank
    struct MlpNet {
      Split<4, nn::Mlp> mlp;
    };
    struct MlpNet2 {
      Split<2, nn::Mlp> mlp;
    };
    const std::int64_t mlp = n == 2 ? bytes_of_a_step([] { return MlpNet2{Split<2, nn::Mlp>(nn::Mlp(dim, 32))}; }, 2)
                                    : bytes_of_a_step([] { return MlpNet{Split<4, nn::Mlp>(nn::Mlp(dim, 32))}; }, 4);
    // forward: proj's all-reduce of [rows, dim]; backward: fc's input gradient [rows, dim]
    CHECK(mlp == 2 * ring * rows * dim * 4 / n);
  }
  struct Classifier {
    Split<2, nn::Linear> fc;
  };
  const std::int64_t loss = bytes_of_a_step([] { return Classifier{Split<2, nn::Linear>(nn::Linear(dim, vocab))}; }, 2);
  // max and (sum, target logit) a row forward, the input gradient [rows, dim] backward: no vocabulary term
  CHECK(loss == 2 * (3 * rows + rows * dim) * 4 / 2);
}

TEST_CASE("split: sizes that do not divide, a world that does not fit and split ranks with other rows are errors") {
  auto fails = [](int ranks, auto make, const char* message) {
    CHECK_THROWS_WITH_AS(comm::run_threads(ranks, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 440 + c.rank());
      auto model = make();
      Trainer<decltype(model), optim::SGD> t(ctx, Config{}, std::move(model), optim::SGD({}));
    }, {.report = false}), doctest::Contains(message), Error);
  };
  struct Att {
    Split<2, nn::CausalSelfAttention> att;
  };
  fails(2, [] { return Att{Split<2, nn::CausalSelfAttention>(nn::CausalSelfAttention(12, 3))}; },
        "in the split of layer `att`: CausalSelfAttention(dim 12, heads 3): 3 heads do not divide by the split degree 2");
  struct Emb {
    Split<2, nn::Embedding> tok;
    nn::Linear out;
  };
  fails(2, [] { return Emb{Split<2, nn::Embedding>(nn::Embedding(33, 4)), nn::Linear(4, 2)}; },
        "in the split of layer `tok`: Embedding(33, 4).weight (its vocabulary): dimension 0 (33) does not divide by the split degree 2");
  struct Lin {
    Split<2, nn::Linear> fc;
  };
  fails(2, [] { return Lin{Split<2, nn::Linear>(nn::Linear(4, 7))}; },
        "in the split of layer `fc`: Linear(4 -> 7).weight (its outputs): dimension 0 (7) does not divide by the split degree 2");
  struct Mlp {  // two Linears alike but for their sizes: the path says which (a stranger's finding)
    nn::Linear in;
    Split<2, nn::Linear, nn::GELU, nn::Linear> mlp;
    nn::Linear head;
  };
  fails(2, [] { return Mlp{nn::Linear(4, 16), Split<2, nn::Linear, nn::GELU, nn::Linear>(nn::Linear(16, 33), nn::GELU{}, nn::Linear(33, 16)), nn::Linear(16, 2)};
      },
        "in the split of layer `mlp.0`: Linear(16 -> 33).weight (its outputs): dimension 0 (33) does not divide by the split degree 2");
  fails(3, [] { return Lin{Split<2, nn::Linear>(nn::Linear(4, 8))}; }, "world size 3 cannot hold replicas of 2 devices each");
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 450 + c.rank());
    Trainer<Lin, optim::SGD> t(ctx, Config{}, Lin{Split<2, nn::Linear>(nn::Linear(4, 8))}, optim::SGD({}));
    (void)t.step({test::random({2, 4}, 10 + c.rank()), test::ids({2}, 8, 3)});  // each rank its own rows: wrong
  }, {.report = false}), doctest::Contains("tensor-parallel rank 1 of a split group got other inputs than its tensor-parallel rank 0"), Error);
  // the model run by hand: the split's Linear (column-parallel, vocabulary-parallel into the loss)
  // gave this rank's 4 columns as the whole 8 logits (a stranger's); a pass without the group is named
  std::atomic<int> named{0};
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 452 + c.rank());
    Trainer<Lin, optim::SGD> t(ctx, Config{}, Lin{Split<2, nn::Linear>(nn::Linear(4, 8))}, optim::SGD({}));
    nn::Pass<device::Cpu> pass(ctx.cpu());
    try {
      (void)nn::forward(t.model(), pass, test::random({2, 4}, 10));
    } catch (const Error& e) {
      if (std::string(e.what()).find("a column-parallel Linear is split over a tensor-parallel group, but this pass has none") !=
          std::string::npos)
        ++named;
    }
  });
  CHECK(named == 2);
}

// EPL's large classifier: a replicated backbone and a split classifier on the same devices
// (cluster.colocate_split_and_replicate). The backbone runs data parallel on each rank's rows; the
// features are all-gathered into the classifier and their gradients reduce-scattered back.
namespace {
struct Backbone {
  nn::Linear fc1;
  nn::ReLU act;
  nn::Linear fc2;
};
struct Classifier {
  nn::Linear fc;
};
Backbone backbone() { return {nn::Linear(12, 16), {}, nn::Linear(16, 8)}; }
template <int N>
struct Colocated {
  Replicate<N, Backbone> backbone;
  Split<N, Classifier> classifier;
};
struct Plain {
  Backbone backbone;
  Classifier classifier;
};
constexpr std::int64_t kRows = 8;
// the rows a data shard reads of step s's global batch: features and class ids from the row's index
Batch class_batch(const device::Cpu& cpu, int step, data::Shard shard, std::int64_t classes) {
  const std::int64_t per = kRows / shard.ranks;
  Tensor x = cpu.empty({per, 12}, DType::kF32), y = cpu.empty({per}, DType::kI32);
  for (std::int64_t r = 0; r < per; ++r) {
    const std::int64_t g = step * kRows + shard.rank * per + r;
    y.span<std::int32_t>()[r] = static_cast<std::int32_t>((g * 7) % classes);
    for (std::int64_t f = 0; f < 12; ++f)
      x.span<float>()[r * 12 + f] = static_cast<float>(uniform01(21, static_cast<std::uint64_t>(g * 12 + f)) - 0.5);
  }
  return {x, y};
}
// trainer.predict on a held-out batch: this rank's rows of the [kRows, classes] logits, whole
template <class T>
void predict_into(T& t, const device::Cpu& cpu, std::int64_t classes, std::vector<double>& out) {
  const Tensor y = t.predict(class_batch(cpu, 100, t.data_shard(), classes).inputs);
  REQUIRE(y.shape() == Shape{kRows / t.data_shard().ranks, classes});
  out = test::values(y);
}
// ...against one device's rows of them
void check_prediction(const std::vector<double>& mine, const std::vector<double>& one, data::Shard shard) {
  REQUIRE(mine.size() * static_cast<std::size_t>(shard.ranks) == one.size());
  const auto from = one.begin() + static_cast<std::ptrdiff_t>(mine.size()) * shard.rank;
  CHECK(test::max_rel_diff(mine, std::vector<double>(from, from + static_cast<std::ptrdiff_t>(mine.size()))) < 1e-5);
}
struct Predicted : Run {
  std::vector<double> outputs;
  data::Shard shard;
};
template <class Model>
Predicted train_classifier(Context& ctx, const Config& cfg, Model model, std::int64_t classes) {
  Trainer<Model, optim::Momentum> t(ctx, cfg, std::move(model), optim::Momentum({.lr = 0.1}), {.seed = 5, .clip_norm = 1.0});
  Predicted r;
  for (int s = 0; s < kSteps; ++s) r.losses.push_back(t.step(class_batch(ctx.cpu(), s, t.data_shard(), classes)));
  predict_into(t, ctx.cpu(), classes, r.outputs);
  r.shard = t.data_shard();
  nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
    r.params[p.ordinal] = test::values(p.value);
    r.specs[p.ordinal] = p;
  });
  return r;
}
}  // namespace

TEST_CASE("colocated: a replicated backbone and a split classifier on the same 2 and 4 ranks equal one device") {
  constexpr std::int64_t classes = 64;
  Config cfg = config(1);
  Context solo = Context::solo(397);
  const Predicted ref = train_classifier(solo, cfg, Plain{backbone(), {nn::Linear(8, classes)}}, classes);
  cfg.set(keys::colocate_split_and_replicate, true);
  auto check = [&](int n, auto make, int parts) {
    std::vector<Predicted> runs(static_cast<std::size_t>(n));
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 460 + c.rank());
      runs[c.rank()] = train_classifier(ctx, cfg, make(), classes);
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(n);
      CAPTURE(r);
      CHECK(test::max_rel_diff(runs[r].losses, ref.losses) < 1e-5);
      for (const auto& [ordinal, values] : runs[r].params)
        CHECK(test::max_rel_diff(values, part_of(runs[r].specs.at(ordinal), ref.params.at(ordinal))) < 1e-5);
      CHECK(runs[r].specs.at(4).shard.parts == parts);  // the classifier's weight is split
      check_prediction(runs[r].outputs, ref.outputs, runs[r].shard);  // its rows of the group's, whole
    }
  };
  check(2, [] { return Colocated<2>{Replicate<2, Backbone>(backbone()), Split<2, Classifier>(Classifier{nn::Linear(8, classes)})}; }, 2);
  check(4, [] { return Colocated<4>{Replicate<4, Backbone>(backbone()), Split<4, Classifier>(Classifier{nn::Linear(8, classes)})}; }, 4);
  // 2 x 2: two replicas of a colocated pair
  check(4, [] { return Colocated<2>{Replicate<2, Backbone>(backbone()), Split<2, Classifier>(Classifier{nn::Linear(8, classes)})}; }, 2);
  // the split part gathers its group's rows: a rank of other many rows in an evaluation or a
  // prediction is named (it failed inside the gather, a stranger's finding)
  for (const bool predict : {true, false}) {
    CAPTURE(predict);
    CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 466 + c.rank());
      Trainer<Colocated<2>, optim::SGD> t(ctx, cfg, Colocated<2>{Replicate<2, Backbone>(backbone()),
                                                                 Split<2, Classifier>(Classifier{nn::Linear(8, classes)})}, optim::SGD({}));
      const Tensor x = test::random({3 + c.rank(), 12}, 7);
      if (predict) (void)t.predict(x);
      else (void)t.evaluate({x, test::ids({3 + c.rank()}, classes, 8)});
    }, {.report = false}), doctest::Contains((std::string("in trainer.") + (predict ? "predict" : "evaluate") + "() after step 0 "
                                              "tensor-parallel rank 1 of a split group got 4 rows and its tensor-parallel rank 0 3").c_str()),
                         Error);
  }
}

TEST_CASE("separate placement (EPL's, without the key): the backbone on N ranks, the split classifier on N others, equal one device") {
  constexpr std::int64_t classes = 64;
  auto make = [] { return Colocated<2>{Replicate<2, Backbone>(backbone()), Split<2, Classifier>(Classifier{nn::Linear(8, classes)})}; };
  for (std::int64_t micro : {1, 2}) {
    CAPTURE(micro);
    Context solo = Context::solo(394);
    const Predicted ref = train_classifier(solo, config(micro), Plain{backbone(), {nn::Linear(8, classes)}}, classes);
    for (int n : {4, 8}) {  // 2 stages of 2 ranks, and 2 replicas of that
      CAPTURE(n);
      std::vector<Predicted> runs(static_cast<std::size_t>(n));
      std::vector<int> stage(static_cast<std::size_t>(n));
      comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
        Context ctx(c, 500 + c.rank());
        Trainer<Colocated<2>, optim::Momentum> t(ctx, config(micro), make(), optim::Momentum({.lr = 0.1}), {.seed = 5, .clip_norm = 1.0});
        stage[c.rank()] = t.mesh().coord().pipeline;
        for (int s = 0; s < kSteps; ++s) runs[c.rank()].losses.push_back(t.step(class_batch(ctx.cpu(), s, t.data_shard(), classes)));
        predict_into(t, ctx.cpu(), classes, runs[c.rank()].outputs);  // the backbone's ranks too
        runs[c.rank()].shard = t.data_shard();
        nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
          if (!p.materialized()) return;
          runs[c.rank()].params[p.ordinal] = test::values(p.value);
          runs[c.rank()].specs[p.ordinal] = p;
        });
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(test::max_rel_diff(runs[r].losses, ref.losses) < 1e-5);
        for (const auto& [ordinal, values] : runs[r].params)
          CHECK(test::max_rel_diff(values, part_of(runs[r].specs.at(ordinal), ref.params.at(ordinal))) < 1e-5);
        // the backbone's ranks hold only the backbone, the classifier's only their part of it
        CHECK(runs[r].params.count(0) == (stage[r] == 0 ? 1u : 0u));
        CHECK(runs[r].params.count(4) == (stage[r] == 1 ? 1u : 0u));
        check_prediction(runs[r].outputs, ref.outputs, runs[r].shard);
      }
    }
  }
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 470 + c.rank());
    Trainer<Colocated<2>, optim::SGD> t(ctx, config(1), make(), optim::SGD({}));
  }, {.report = false}), doctest::Contains("world size 2 cannot hold replicas of 4 devices each"), Error);
  struct Backwards {  // the replicated part after the split one
    Split<2, Classifier> classifier;
    Replicate<2, nn::Linear> after;
  };
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 475 + c.rank());
    Config cfg = config(1);
    cfg.set(keys::colocate_split_and_replicate, true);
    Trainer<Backwards, optim::SGD> t(ctx, cfg, Backwards{Split<2, Classifier>(Classifier{nn::Linear(8, 8)}), Replicate<2, nn::Linear>(nn::Linear(8, 8))},
                                     optim::SGD({}));
  }, {.report = false}), doctest::Contains("an epl::Replicate<2, ...> part after an epl::Split part"), Error);
}

TEST_CASE("split memory: a 100,000-class classifier's parameter, gradient and optimizer bytes per rank fall as 1/N") {
  constexpr std::int64_t classes = 100000;
  auto bytes = [&](int n, auto make) {
    std::int64_t held = 0;
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 480 + c.rank());
      Config cfg;
      cfg.set(keys::colocate_split_and_replicate, n > 1);
      auto model = make();
      Trainer<decltype(model), optim::AdamW> t(ctx, cfg, std::move(model), optim::AdamW({.lr = 1e-3}));
      (void)t.step(class_batch(ctx.cpu(), 0, t.data_shard(), classes));
      const auto st = memory_stats(ctx.cpu().id());
      if (c.rank() == 0)
        held = st.current_of(MemoryCategory::kParameters) + st.current_of(MemoryCategory::kGradients) +
               st.current_of(MemoryCategory::kOptimizerState);
    });
    return held;
  };
  const std::int64_t one = bytes(1, [] { return Plain{backbone(), {nn::Linear(8, classes)}}; });
  const std::int64_t backbone_bytes = 4 * 4 * (12 * 16 + 16 + 16 * 8 + 8 + 4 * 16);  // with alignment padding, roughly
  const std::int64_t two = bytes(2, [] { return Colocated<2>{Replicate<2, Backbone>(backbone()), Split<2, Classifier>(Classifier{nn::Linear(8, classes)})}; });
  const std::int64_t four = bytes(4, [] { return Colocated<4>{Replicate<4, Backbone>(backbone()), Split<4, Classifier>(Classifier{nn::Linear(8, classes)})}; });
  CAPTURE(one);
  CAPTURE(two);
  CAPTURE(four);
  CHECK(one > 4 * 4 * 9 * classes);  // AdamW: value, gradient and 2 state words for the 9 x 100,000 classifier
  CHECK(std::abs(static_cast<double>(two - backbone_bytes) / static_cast<double>(one - backbone_bytes) - 0.5) < 0.01);
  CHECK(std::abs(static_cast<double>(four - backbone_bytes) / static_cast<double>(one - backbone_bytes) - 0.25) < 0.01);
}

// A mixture-of-experts transformer (test/multirank_matrix.hpp's): attention and the gate
// replicated, the experts split over the group with all_to_all dispatch and combine.
using test::matrix::make_moe_gpt;
using test::matrix::moe_options;
using test::matrix::PlainFfn;
using test::matrix::SplitFfn;

TEST_CASE("moe: experts split 2 and 4 ways equal one device, with and without dropped tokens, top-2 and the balancing loss") {
  for (double capacity : {2.0, 0.5}) {  // 2: nothing dropped (4 experts, top-2); 0.5: drops
    CAPTURE(capacity);
    Context solo = Context::solo(396);
    const Run ref = train(solo, config(2), make_moe_gpt<PlainFfn>(capacity, 0.05));
    expect_equal(2, config(2), ref, [&] { return make_moe_gpt<SplitFfn<2>>(capacity, 0.05); });
    expect_equal(4, config(2), ref, [&] { return make_moe_gpt<SplitFfn<4>>(capacity, 0.05); });
  }
  // x data parallel: each replica routes its own tokens, so without drops and the balancing loss
  // (both depend on which tokens meet) it equals one device
  Context solo = Context::solo(395);
  const Run ref = train(solo, config(1), make_moe_gpt<PlainFfn>(2.0, 0));
  expect_equal(4, config(1), ref, [&] { return make_moe_gpt<SplitFfn<2>>(2.0, 0); }, 2);
}

TEST_CASE("moe: dropped tokens are counted, the all_to_all moves each routed token twice each way") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 490 + c.rank());
    struct Net {
      SplitFfn<2> ffn;
    };
    Trainer<Net, optim::SGD> t(ctx, Config{}, Net{SplitFfn<2>(nn::LayerNorm(16), nn::MoE(moe_options(0.5, 0.01)))}, optim::SGD({}));
    Tensor x = test::random({8, 16}, 31), y = test::ids({8}, 16, 32);
    const auto before = t.mesh().tensor().stats().bytes_sent;
    (void)t.step({x, y});
    const std::int64_t sent = t.mesh().tensor().stats().bytes_sent - before;
    auto& moe = std::get<2>(t.model().ffn.body().layers);
    const auto& r = moe.last_routing();
    CHECK(r.capacity == 2);  // ceil(0.5 x 8 tokens x 2 / 4 experts)
    CHECK(r.dropped == 16 - 4 * 2);
    CHECK(moe.dropped() == r.dropped);
    // my tokens' accepted choices for the other rank's experts go there and their outputs come
    // back (forward), their gradients go and input gradients come back (backward); plus the
    // all-gathers of the outputs, the probabilities' gradient and the input gradient (rank 0's
    // half each): 4 x 4 bytes x 16 per row sent out, 3 all-gathers of 4 rows of 16 and 4 rows of 4
    std::int64_t remote = 0;
    for (std::int64_t e = 2; e < 4; ++e)  // rank 1's experts
      for (auto choice : r.by_expert[static_cast<std::size_t>(e)]) remote += choice / 2 < 4;  // tokens 0-3 are rank 0's
    std::int64_t local_sent_to_me = 0;
    for (std::int64_t e = 0; e < 2; ++e)
      for (auto choice : r.by_expert[static_cast<std::size_t>(e)]) local_sent_to_me += choice / 2 >= 4;
    if (c.rank() == 0) CHECK(sent == 4 * 16 * (2 * remote + 2 * local_sent_to_me) + 4 * (4 * 16 + 4 * 4 + 4 * 16));
  });
}
}
}  // namespace test_strategy_split
