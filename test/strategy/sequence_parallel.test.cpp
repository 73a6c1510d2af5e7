// Sequence parallelism (split.sequence_parallel) on thread ranks: the LayerNorm, dropout and
// residual regions between a Split's tensor-parallel blocks run on each rank's part of the
// sequence and train exactly like one device (the split GPT 2 and 4 ways, with accumulation, with
// data parallelism, as a pipeline stage, a Split between replicated parts, dropout in the regions);
// each rank holds 1/N of those regions' activations (the allocator's bytes); the tensor axis moves
// the bytes tensor parallelism moves plus the replicated parameters' gradient sums, nothing else;
// bad setups are clear errors.
#include "split_helpers.hpp"

using namespace epl;
using namespace epl::test::split;

namespace test_strategy_sequence_parallel {

namespace {
Config sequence_config(std::int64_t micro) {
  Config c = config(micro);
  c.set(keys::sequence_parallel, true);
  return c;
}
// The GPT with only its blocks split: the embedding and the head replicated over the group, so
// the Split scatters the sequence at its entry and gathers it at its exit.
template <int N>
struct BodySplitGpt {
  gpt::Embed embed;
  Split<N, nn::Repeat<gpt::Block>> body;
  gpt::Head head;
};
template <int N>
BodySplitGpt<N> make_body_split_gpt() {
  gpt::Gpt g = gpt::make_gpt(shape());
  return {g.embed, Split<N, nn::Repeat<gpt::Block>>(g.body), g.head};
}
// A block with dropout after attention and after the Mlp: the masks are drawn on sequence parts.
struct DropBlock {
  nn::Residual<nn::LayerNorm, nn::CausalSelfAttention, nn::Dropout> attn;
  nn::Residual<nn::LayerNorm, nn::Mlp, nn::Dropout> mlp;
};
struct DropGpt {
  gpt::Embed embed;
  nn::Repeat<DropBlock> body;
  gpt::Head head;
};
template <int N>
struct SplitDropGpt {
  Split<N, gpt::Embed> embed;
  Split<N, nn::Repeat<DropBlock>> body;
  Split<N, gpt::Head> head;
};
DropGpt make_drop_gpt() {
  const auto s = shape();
  DropGpt g{{nn::Embedding(s.vocab, s.dim), nn::PositionEmbedding(s.context, s.dim)}, {}, {nn::LayerNorm(s.dim), nn::Linear(s.dim, s.vocab)}};
  for (int i = 0; i < 2; ++i)
    g.body.layers.push_back({decltype(DropBlock::attn)(nn::LayerNorm(s.dim), nn::CausalSelfAttention(s.dim, s.heads), nn::Dropout(0.2)),
                             decltype(DropBlock::mlp)(nn::LayerNorm(s.dim), nn::Mlp(s.dim), nn::Dropout(0.3))});
  return g;
}
template <int N>
SplitDropGpt<N> make_split_drop_gpt() {
  DropGpt g = make_drop_gpt();
  return {Split<N, gpt::Embed>(g.embed), Split<N, nn::Repeat<DropBlock>>(g.body), Split<N, gpt::Head>(g.head)};
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("sequence parallel: the split GPT 2 and 4 ways equals one device, with accumulation and with data parallelism") {
  for (std::int64_t micro : {1, 2}) {
    CAPTURE(micro);
    const Run ref = reference(config(micro));
    expect_equal(2, sequence_config(micro), ref, [] { return make_split_gpt<2>(shape()); });
    expect_equal(4, sequence_config(micro), ref, [] { return make_split_gpt<4>(shape()); });
  }
  expect_equal(4, sequence_config(2), reference(config(2)), [] { return make_split_gpt<2>(shape()); }, 2);  // x 2 replicas
}

TEST_CASE("sequence parallel: a Split between replicated parts scatters at its entry and gathers at its exit") {
  const Run ref = reference(config(2));
  expect_equal(2, sequence_config(2), ref, [] { return make_body_split_gpt<2>(); });
  expect_equal(4, sequence_config(2), ref, [] { return make_body_split_gpt<4>(); });
}

TEST_CASE("sequence parallel: dropout in the regions draws the single-device masks") {
  Context solo = Context::solo(397);
  const Run ref = train(solo, config(2), make_drop_gpt());
  expect_equal(2, sequence_config(2), ref, [] { return make_split_drop_gpt<2>(); });
  expect_equal(4, sequence_config(2), ref, [] { return make_split_drop_gpt<4>(); });
}

TEST_CASE("sequence parallel: a split pipeline stage after a replicated one, with and without data parallelism") {
  auto make = [] { return make_split_stage_gpt(); };
  Config cfg = sequence_config(4);
  cfg.set(keys::pipeline_strategy, "PreferBackward");
  const Run ref = reference(config(4));
  expect_equal(4, cfg, ref, make, 2);
  expect_equal(8, cfg, ref, make, 2);
}

// Cut into pipeline stages inside the split model, the activations between stages are sequence
// parts: each rank sends its part to its counterpart on the next stage, half of what tensor
// parallelism sends on 2 ranks.
TEST_CASE("sequence parallel: a split GPT cut into 2 pipeline stages sends sequence parts between them") {
  Config cfg = sequence_config(2);
  cfg.set(keys::num_stages, 2).set(keys::auto_parallel, true);
  expect_equal(4, cfg, reference(config(2)), [] { return make_split_gpt<2>(shape()); }, 2);
  auto pipeline_bytes = [](bool sequence) {
    std::int64_t sent = -1;
    comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 490 + c.rank());
      Config k = config(2);
      k.set(keys::num_stages, 2).set(keys::auto_parallel, true).set(keys::sequence_parallel, sequence);
      Trainer<gpt::SplitGpt<2>, optim::SGD> t(ctx, k, make_split_gpt<2>(shape()), optim::SGD({}));
      auto ds = test::token_corpus(4000);
      data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
      (void)t.step(loader.next(ctx.cpu()));
      if (c.rank() == 0) sent = t.pipeline_stats().bytes_sent;
    });
    return sent;
  };
  const std::int64_t tensor = pipeline_bytes(false), sequence = pipeline_bytes(true);
  CAPTURE(tensor);
  CAPTURE(sequence);
  CHECK(sequence > 0);
  CHECK(sequence < tensor * 6 / 10);  // half the activations' bytes, the same headers
}

// Each rank holds 1/N of the regions' activations: the bytes a step's forward keeps grow by
// exactly 1/N of tensor parallelism's with each block of LayerNorm, dropout and residual (more
// blocks minus fewer cancels what the Split's boundary and the head keep).
TEST_CASE("sequence parallel: each rank holds 1/N of the regions' activations, from the allocator") {
  constexpr std::int64_t rows = 32, dim = 16;
  using Region = nn::Residual<nn::LayerNorm, nn::Dropout>;
  auto peak = [&](bool sequence, int n, std::int64_t blocks) {
    std::int64_t result = -1;
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 460 + c.rank());
      struct Net2 {
        Split<2, nn::Repeat<Region>> body;
        nn::Linear head;
      };
      struct Net4 {
        Split<4, nn::Repeat<Region>> body;
        nn::Linear head;
      };
      nn::Repeat<Region> body(blocks, [&](std::int64_t) { return Region(nn::LayerNorm(dim), nn::Dropout(0.1)); });
      Config cfg;
      cfg.set(keys::sequence_parallel, sequence);
      auto measure = [&](auto model) {
        Trainer<decltype(model), optim::SGD> t(ctx, cfg, std::move(model), optim::SGD({}));
        const Batch b{test::random({rows, dim}, 5), test::ids({rows}, 8, 6)};
        (void)t.step(b);
        const std::int64_t peak = test::peak_during(ctx.cpu().id(), MemoryCategory::kActivations, [&] { (void)t.step(b); });
        if (c.rank() == 0) result = peak;
      };
      if (n == 2) measure(Net2{Split<2, nn::Repeat<Region>>(std::move(body)), nn::Linear(dim, 8)});
      else measure(Net4{Split<4, nn::Repeat<Region>>(std::move(body)), nn::Linear(dim, 8)});
    });
    return result;
  };
  for (int n : {2, 4}) {
    CAPTURE(n);
    const std::int64_t whole = peak(false, n, 6) - peak(false, n, 2), part = peak(true, n, 6) - peak(true, n, 2);
    CAPTURE(whole);
    CAPTURE(part);
    // four blocks' input, mean and reciprocal deviation: all of them, then this rank's 1/N
    CHECK(whole == 4 * (rows * dim + 2 * rows) * 4);
    CHECK(part * n == whole);
  }
}

// The bytes of a step over the tensor axis: what tensor parallelism moves for the activations
// (each all-reduce now a reduce-scatter and an all-gather of the same bytes), plus the sums of
// the replicated parameters' gradients (LayerNorm's gamma and beta: an all-reduce of 2 dim a
// norm; the position table: an all-gather of each rank's rows). Nothing else.
TEST_CASE("sequence parallel: the bytes a step moves over the tensor axis are tensor parallelism's plus the norms' gradient sums") {
  auto bytes_of_a_step = [&](int n, bool sequence) {
    std::int64_t sent = -1;
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 470 + c.rank());
      Config cfg;
      cfg.set(keys::sequence_parallel, sequence);
      auto run = [&](auto model) {
        Trainer<decltype(model), optim::SGD> t(ctx, cfg, std::move(model), optim::SGD({}));
        auto ds = test::token_corpus(4000);
        data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
        const auto before = t.mesh().tensor().stats().bytes_sent;
        (void)t.step(loader.next(ctx.cpu()));
        if (c.rank() == 0) sent = t.mesh().tensor().stats().bytes_sent - before;
      };
      if (n == 2) run(make_split_gpt<2>(shape()));
      else run(make_split_gpt<4>(shape()));
    });
    return sent;
  };
  const auto s = shape();
  const std::int64_t norms = 2 * s.layers + 1, t = 8;  // each block's two and the head's; the window
  for (int n : {2, 4}) {
    CAPTURE(n);
    const std::int64_t tensor = bytes_of_a_step(n, false), sequence = bytes_of_a_step(n, true);
    CAPTURE(tensor);
    CAPTURE(sequence);
    const std::int64_t norm_sums = norms * (2 * (n - 1) * 2 * s.dim / n) * 4;  // an all-reduce of [2 dim] each
    const std::int64_t positions = (n - 1) * (t / n) * s.dim * 4;              // an all-gather of [t / n, dim]
    CHECK(sequence == tensor + norm_sums + positions);
    CHECK(norm_sums + positions < tensor / 20);  // small beside the activations
  }
}

TEST_CASE("--trace of a split run shows its tensor- and sequence-parallel collectives on every rank") {
  for (bool sequence : {false, true}) {
    CAPTURE(sequence);
    std::vector<std::map<std::string, int>> spans(2);  // per rank: span name -> count
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 400 + c.rank());
      Config cfg = sequence ? sequence_config(1) : config(1);
      cfg.set(keys::trace, "epl_split_trace_test.json");
      Trainer<gpt::SplitGpt<2>, optim::SGD> t(ctx, cfg, make_split_gpt<2>(shape()), optim::SGD({}));
      auto ds = test::token_corpus(4000);
      data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
      (void)t.step(loader.next(ctx.cpu()));
      for (const auto& span : t.timeline()->spans())
        if (span.lane == Span::Lane::kCommunication) ++spans[c.rank()][span.name];
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      if (sequence) {
        CHECK(spans[r]["reduce_scatter tensor"] > 0);  // row-parallel outputs into sequence parts
        CHECK(spans[r]["all_gather tensor"] > 0);      // column-parallel inputs from them
      } else {
        CHECK(spans[r]["all_reduce tensor"] > 0);  // each Linear pair's one all-reduce
      }
    }
  }
  std::remove("epl_split_trace_test.json");
}

TEST_CASE("sequence parallel: a sequence that does not divide, colocation and a model without a Split are errors") {
  auto fails = [](int ranks, const Config& cfg, auto make, const Batch& batch, const char* message) {
    CHECK_THROWS_WITH_AS(comm::run_threads(ranks, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 480 + c.rank());
      auto model = make();
      Trainer<decltype(model), optim::SGD> t(ctx, cfg, std::move(model), optim::SGD({}));
      (void)t.step(batch);
    }, {.report = false}), doctest::Contains(message), Error);
  };
  struct Blocks {
    Split<2, nn::Repeat<gpt::Block>> body;
    nn::Linear head;
  };
  auto blocks = [] { return Blocks{Split<2, nn::Repeat<gpt::Block>>(gpt::make_gpt(shape()).body), nn::Linear(16, 8)}; };
  // [batch 2, t 7, dim 16]: 7 tokens do not divide by 2
  fails(2, sequence_config(1), blocks, Batch{test::random({2, 7, 16}, 3), test::ids({2, 7}, 8, 4)},
        "sequence parallelism: an epl::Split's entry cuts the sequence of its [2, 7, 16] (dimension 1, 7) into 2 parts, but it "
        "does not divide by the split degree 2");
  // 2-D rows: the sequence is the rows each data-parallel replica holds (a global 6, 3 a replica)
  struct Rows {
    Split<2, nn::Residual<nn::LayerNorm, nn::Linear, nn::ReLU, nn::Linear>> body;
    nn::Linear head;
  };
  fails(4, sequence_config(1), [] {
    return Rows{Split<2, nn::Residual<nn::LayerNorm, nn::Linear, nn::ReLU, nn::Linear>>(
                    nn::Residual<nn::LayerNorm, nn::Linear, nn::ReLU, nn::Linear>(nn::LayerNorm(16), nn::Linear(16, 32), {}, nn::Linear(32, 16))),
                nn::Linear(16, 4)};
  }, Batch{test::random({3, 16}, 3), test::ids({3}, 4, 4)}, "the rows of a 2-D input as each data-parallel replica's micro-batch holds them");
  struct Plain {
    nn::Linear fc;
  };
  fails(1, sequence_config(1), [] { return Plain{nn::Linear(4, 4)}; }, Batch{test::random({2, 4}, 3), test::ids({2}, 4, 4)},
        "split.sequence_parallel=true, but the model has no epl::Split<N, ...> part");
  struct Colocated {
    Replicate<2, nn::Linear> backbone;
    Split<2, nn::Linear> classifier;
  };
  Config both = sequence_config(1);
  both.set(keys::colocate_split_and_replicate, true);
  fails(2, both, [] { return Colocated{Replicate<2, nn::Linear>(nn::Linear(4, 4)), Split<2, nn::Linear>(nn::Linear(4, 8))}; },
        Batch{test::random({2, 4}, 3), test::ids({2}, 8, 4)}, "(colocated by cluster.colocate_split_and_replicate): the Split's input is");
  // without the key, EPL's placement puts the two parts on separate ranks: the same refusal, naming it
  fails(4, sequence_config(1), [] { return Colocated{Replicate<2, nn::Linear>(nn::Linear(4, 4)), Split<2, nn::Linear>(nn::Linear(4, 8))}; },
        Batch{test::random({4, 4}, 3), test::ids({4}, 8, 4)}, "(on separate ranks, EPL's placement): the Split's input is");
}
}
}  // namespace test_strategy_sequence_parallel
