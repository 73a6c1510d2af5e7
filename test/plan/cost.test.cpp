// The planner's cost model: each rank's parameter, gradient and optimizer bytes predicted before
// anything is drawn equal the allocator's after a step, and ZeRO's blocks in flight a step's peaks
// over them, for data parallel, ZeRO 1-3, offload, micro-batches, a pipeline and a split; a
// unit's activation bytes measured by the probe; the compile-time check and its run-time message;
// the search returns only plans the plan accepts, fastest first, and says by how much nothing fits.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/plan/fits.hpp"
#include "epl/plan/search.hpp"

using namespace epl;

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
using All = Policies<Zero<3>, Offload<offload::V0>>;

struct Held {
  plan::StateBytes state;
  plan::InFlightBytes in_flight;  // a step's peaks of parameters and gradients over the state
  int stage = 0, tensor = 0;
};

// n thread ranks train two steps of Model under cfg; each rank's state bytes from the allocator,
// and what the second step drew of parameters and gradients beyond them (ZeRO's blocks in flight).
template <class Model, class Make>
std::vector<Held> measure(int n, const Config& cfg, Make make) {
  std::vector<Held> held(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 300 + c.rank());
    Trainer<Model, optim::AdamW, All> t(ctx, cfg, make(), optim::AdamW({.lr = 0.01}), {.seed = 5});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    t.step(loader.next(ctx.cpu()));
    memory_account(ctx.cpu().id()).reset_peaks();
    t.step(loader.next(ctx.cpu()));
    const auto m = memory_stats(ctx.cpu().id());
    const auto h = memory_stats(DeviceId{DeviceKind::kHost, ctx.cpu().id().index});
    auto& out = held[static_cast<std::size_t>(c.rank())];
    out.state = {m.current_of(MemoryCategory::kParameters), m.current_of(MemoryCategory::kGradients),
                 m.current_of(MemoryCategory::kOptimizerState), h.current_of(MemoryCategory::kParameters),
                 h.current_of(MemoryCategory::kGradients), h.current_of(MemoryCategory::kOptimizerState)};
    out.in_flight = {m.peak_of(MemoryCategory::kParameters) - m.current_of(MemoryCategory::kParameters),
                     m.peak_of(MemoryCategory::kGradients) - m.current_of(MemoryCategory::kGradients)};
    out.stage = t.mesh().coord().pipeline;
    out.tensor = t.mesh().coord().tensor;
  });
  return held;
}

// The keys as a command line gives them (zero.level and offload.level off unless given).
Config config(std::initializer_list<std::pair<const char*, const char*>> keys) {
  std::vector<std::string> args{"test"};
  auto given = [&](std::string_view key) {
    return std::any_of(keys.begin(), keys.end(), [&](const auto& kv) { return key == kv.first; });
  };
  for (const char* off : {"zero.level", "offload.level"})
    if (!given(off)) args.push_back(std::string("--") + off + "=");
  for (const auto& [k, v] : keys) args.push_back(std::string("--") + k + "=" + v);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return Config::parse(static_cast<int>(argv.size()), argv.data());
}

// The state exactly; ZeRO's blocks in flight exactly, or (`bound`) at most the prediction and
// at least `least` of it: a layer whose parameters lie in two blocks under offload and
// micro-batches, a layer that runs another inside it.
template <class Model, class Make>
void expect_exact(int n, const Config& cfg, Make make, bool bound = false, double least = 0.9) {
  const Model model = make();
  const auto plan = plan::make<Model, All>(plan_options(cfg, {}), n);
  const auto predicted = plan::predict_state<Model, All>(model, plan, n, optim::AdamW::kStateSlots);
  const auto places = plan::detail::predict_places<Model, All, device::Cpu>(model, plan, n, optim::AdamW::kStateSlots);
  for (const auto& h : measure<Model>(n, cfg, make)) {
    CAPTURE(h.stage);
    CAPTURE(h.tensor);
    const auto& p = predicted.at(static_cast<std::size_t>(h.stage * plan.tensor + h.tensor));
    const auto& f = places.at(static_cast<std::size_t>(h.stage * plan.tensor + h.tensor)).in_flight;
    CHECK(h.state.parameters == p.parameters);
    CHECK(h.state.gradients == p.gradients);
    CHECK(h.state.optimizer_state == p.optimizer_state);
    CHECK(h.state.host_parameters == p.host_parameters);
    CHECK(h.state.host_gradients == p.host_gradients);
    CHECK(h.state.host_optimizer_state == p.host_optimizer_state);
    CHECK(p.device() + p.host() > 0);
    // ZeRO's blocks in flight: stage 3's gathered blocks, stages 2 and 3's gradient blocks and their staging
    if (bound) {
      CHECK(h.in_flight.parameters <= f.parameters);
      CHECK(h.in_flight.gradients <= f.gradients);
      CHECK(h.in_flight.total() >= f.total() * least);
    } else {
      CHECK(h.in_flight.parameters == f.parameters);
      CHECK(h.in_flight.gradients == f.gradients);
    }
    CHECK((f.gradients > 0) == (plan.policies.zero_stage >= 2));
    CHECK((f.parameters > 0) == (plan.policies.zero_stage == 3));
  }
}

// A layer that runs another inside it while its own parameters are gathered: nn::MoE its gate.
struct MoeLm {
  nn::Embedding tok;
  nn::MoE moe;
  nn::Linear head;
};

// A stranger's model of Linears and GELUs (their widths uneven): gradient_checkpoint.type = auto
// recomputes [0, 3) and [3, 5) and keeps the rest.
struct LinearsAndGelus {
  nn::Linear l0{16, 96};
  nn::GELU g0;
  nn::Linear l1{96, 300};
  nn::GELU g1;
  nn::Linear l2{300, 200};
  nn::GELU g2;
  nn::Linear l3{200, 40};
  nn::GELU g3;
  nn::Linear l4{40, 10};
};

// A layer whose costs are in its type: plan::fits reads them at compile time.
template <std::int64_t Params, std::int64_t Activations>
struct Static {
  nn::Linear l{1, 1};
  template <class V> void visit(V&& v) { l.visit(v); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { return l.forward(ctx, x); }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return l.backward(ctx, dy); }
};
}  // namespace

template <std::int64_t P, std::int64_t A>
struct epl::strategy::static_cost<Static<P, A>> {
  static constexpr Cost value{.macs_per_token = static_cast<double>(P), .parameters = P, .activation_bytes = A};
};

namespace {
// 1 G parameters and 1 MB of activations a row; a pipeline of two such stages.
struct Big {
  Static<1'000'000'000, 1'000'000> a;
};
using BigPipe = Pipeline<Replicate<1, Static<1'000'000'000, 1'000'000>>, Replicate<1, Static<1'000'000'000, 1'000'000>>>;
constexpr std::int64_t kGiB = std::int64_t{1} << 30;
// fp32 AdamW: 16 bytes an element whole; ZeRO 1 over 8 ranks: 4 + 4 + 1 = 9
static_assert(plan::fits<Big>({.ranks = 8}, {.bytes = 17 * kGiB, .rows = 8}));
static_assert(plan::fits<Big, Policies<Zero<1>>>({.ranks = 8}, {.bytes = 9 * kGiB, .rows = 8}));
static_assert(plan::static_footprint<Big, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 0, .rows = 8}).state.device() == 2'000'000'000);
// A hundred units of 10 M parameters each (and the same activations as Big in all).
template <std::int64_t P>
struct TenOf {
  Static<P, 10'000> a, b, c, d, e, f, g, h, i, j;
};
struct Hundred {
  TenOf<10'000'000> a, b, c, d, e, f, g, h, i, j;
};
// ZeRO's blocks in flight: communication.max_splits 5 cuts Hundred into blocks of 20 units (200 M
// elements): stage 3 gathers two (1.6 GB), stages 2 and 3 reduce three (2.4 GB); 100 cuts it into
// blocks of one unit (Big's one unit is one block whatever it is: its parameter is never split).
static_assert(plan::static_footprint<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.rows = 8}).in_flight.parameters == 1'600'000'000);
static_assert(plan::static_footprint<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.rows = 8}).in_flight.gradients == 2'400'000'000);
static_assert(plan::static_footprint<Hundred, Policies<Zero<2>>>({.ranks = 8}, {.rows = 8}).in_flight.parameters == 0);
static_assert(plan::static_footprint<Hundred, Policies<Zero<1>>>({.ranks = 8}, {.rows = 8}).in_flight.total() == 0);
static_assert(plan::static_footprint<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.rows = 8, .max_splits = 100}).in_flight.total() == 200'000'000);
static_assert(plan::static_footprint<Big, Policies<Zero<3>>>({.ranks = 8}, {.rows = 8, .max_splits = 100}).in_flight.total() == 8'000'000'000);
// offload stages each gathered block's host shard (an eighth of a block) and each reduced gradient block's
static_assert(plan::static_footprint<Hundred, Policies<Zero<3>, Offload<offload::V0>>>({.ranks = 8}, {.rows = 8, .max_splits = 100}).in_flight.parameters ==
              85'000'000);
static_assert(plan::static_footprint<Hundred, Policies<Zero<3>, Offload<offload::V0>>>({.ranks = 8}, {.rows = 8, .max_splits = 100}).in_flight.gradients ==
              135'000'000);
// two stages on 2 x 4 ranks: each rank holds one stage, a quarter of the state under ZeRO 3
static_assert(plan::static_footprint<BigPipe, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 0, .rows = 8}).state.device() == 4'000'000'000);
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("cost: predicted state bytes and ZeRO's blocks in flight equal the allocator's (data parallel, ZeRO 1-3, offload)") {
  auto make = [] { return gpt::make_gpt(tiny()); };
  expect_exact<gpt::Gpt>(1, config({}), make);
  expect_exact<gpt::Gpt>(2, config({}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v0"}}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v1"}, {"communication.max_splits", "3"}}), make);
  expect_exact<gpt::Gpt>(4, config({{"zero.level", "v2"}}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v2"}, {"offload.level", "v0"}}), make);
  expect_exact<gpt::Gpt>(4, config({{"zero.level", "v2"}, {"offload.level", "v0"}, {"communication.max_splits", "20"}}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v1"}, {"pipeline.num_micro_batch", "2"}}), make);
  expect_exact<gpt::Gpt>(4, config({{"zero.level", "v2"}, {"pipeline.num_micro_batch", "2"}, {"communication.max_splits", "8"}}), make);
  // one block, reduced once a micro-batch: the first micro-batch's is still in flight in the second
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v2"}, {"pipeline.num_micro_batch", "2"}, {"communication.max_splits", "1"}}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v2"}, {"pipeline.num_micro_batch", "4"}, {"communication.max_splits", "2"}}), make);
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v2"}, {"communication.max_splits", "1048576"}}), make);
  // every parameter a block of its own: a Linear's weight and bias are two, gathered together
  expect_exact<gpt::Gpt>(2, config({{"zero.level", "v2"}, {"offload.level", "v0"}, {"pipeline.num_micro_batch", "2"},
                                    {"communication.max_splits", "1048576"}}),
                         make, true);
}

TEST_CASE("cost: ZeRO's blocks in flight of a layer that runs another inside it (nn::MoE's gate) are the prediction") {
  auto moe = [] { return MoeLm{nn::Embedding(32, 16), nn::MoE({.dim = 16, .hidden = 24, .experts = 4, .top_k = 2}), nn::Linear(16, 32)}; };
  for (const char* splits : {"5", "40"}) {
    CAPTURE(splits);
    expect_exact<MoeLm>(2, config({{"zero.level", "v2"}, {"communication.max_splits", splits}}), moe, true);
    expect_exact<MoeLm>(2, config({{"zero.level", "v1"}, {"communication.max_splits", splits}}), moe, true);
  }
}

TEST_CASE("cost: predicted state bytes and ZeRO's blocks in flight equal the allocator's (a pipeline, a split, both with ZeRO)") {
  auto two = [] { return gpt::make_two_stage_gpt(tiny()); };
  expect_exact<gpt::TwoStageGpt>(2, config({{"pipeline.num_micro_batch", "2"}}), two);
  expect_exact<gpt::TwoStageGpt>(4, config({{"zero.level", "v1"}, {"pipeline.num_micro_batch", "2"}}), two);
  expect_exact<gpt::TwoStageGpt>(4, config({{"zero.level", "v2"}, {"pipeline.num_micro_batch", "4"}}), two);
  auto cut = [] { return gpt::make_gpt(tiny()); };  // a balanced cut into 2 stages
  expect_exact<gpt::Gpt>(2, config({{"pipeline.num_stages", "2"}, {"auto.auto_parallel", "true"}, {"pipeline.num_micro_batch", "2"}}),
                         cut);
  // Interleaved: each rank's two chunks run their backward for several micro-batches in a row,
  // and the gradient blocks are reduced in that order (they were priced in the arena's, under)
  for (const std::string zero : {"v1", "v2"}) {
    CAPTURE(zero);
    auto interleaved = [&](const char* splits) {
      return config({{"pipeline.num_stages", "2"}, {"auto.auto_parallel", "true"}, {"pipeline.strategy", "Interleaved"},
                     {"pipeline.num_micro_batch", "4"}, {"zero.level", zero.c_str()}, {"communication.max_splits", splits}});
    };
    expect_exact<gpt::Gpt>(4, interleaved("1"), cut);
    expect_exact<gpt::Gpt>(4, interleaved("8"), cut);
    // 3 splits put a Linear's weight and bias in two blocks: every layer is priced as if it held
    // two (the running layer's s blocks with s the most), a bound (79% of it measured)
    expect_exact<gpt::Gpt>(4, interleaved("3"), cut, true, 0.75);
  }
  auto split = [] { return gpt::make_split_gpt<2>(tiny()); };
  expect_exact<gpt::SplitGpt<2>>(2, config({}), split);
  expect_exact<gpt::SplitGpt<2>>(4, config({{"zero.level", "v0"}}), split);
}

TEST_CASE("cost: predicted activation peaks are the allocator's, with recompute too (a recomputed piece holds its output's gradient)") {
  constexpr std::int64_t kRows = 12;
  const Tensor x = test::random<float>({kRows, 16}, 3), y = test::ids({kRows}, 10, 4);
  for (const int stages : {1, 2})
    for (const bool recompute : {false, true}) {
      CAPTURE(stages);
      CAPTURE(recompute);
      const LinearsAndGelus model;
      const auto prof = plan::profile(model, test::cpu(), x, y, 1);
      plan::Candidate candidate{.data = 1, .pipeline = stages};
      candidate.policies.recompute = recompute;
      const auto e = plan::estimate<LinearsAndGelus>(model, prof, candidate, {.ranks = stages}, kRows, optim::AdamW::kStateSlots);
      Config cfg = config({});
      for (const auto& [key, value] : candidate.keys()) cfg.set_text(key, value);
      std::vector<std::int64_t> peak(static_cast<std::size_t>(stages));
      comm::run_threads(stages, [&](comm::ThreadCommunicator& c) {
        Context ctx(c, 500 + c.rank());  // each rank's own device (its memory accounted apart)
        Trainer<LinearsAndGelus, optim::AdamW> t(ctx, cfg, LinearsAndGelus{}, optim::AdamW({}));
        const Batch b{x, y};
        t.step(b);
        peak[static_cast<std::size_t>(c.rank())] = test::peak_during(ctx.cpu().id(), MemoryCategory::kActivations, [&] { t.step(b); });
      });
      const std::int64_t measured = *std::max_element(peak.begin(), peak.end());
      // within 1% (the loss's few bytes a row); priced without the received gradient, the step peaked 17% over
      CHECK(static_cast<double>(measured) == doctest::Approx(static_cast<double>(e.activations)).epsilon(0.01));
    }
}

TEST_CASE("cost: the probe measures a unit's activation bytes from the allocator") {
  struct Two {
    nn::Linear a{4, 8};
    nn::GELU g;
  };
  // a Linear keeps its output (8 floats a row; its input is the caller's); GELU its output too
  const Two model;
  const Tensor x = test::random<float>({3, 4}, 1);
  Tensor targets = test::ids({3}, 8, 2);
  const auto p = plan::profile(model, test::cpu(), x, targets, 1);
  REQUIRE(p.units.size() == 3);
  CHECK(p.units[0].name == "model.0");
  CHECK(p.units[0].parameters == 4 * 8 + 8);
  CHECK(p.units[0].output_bytes == 8 * 4);
  CHECK(p.units[0].activation_bytes == 8 * 4);
  CHECK(p.units[1].output_bytes == 8 * 4);
  CHECK(p.units[2].name == "loss");
  CHECK(p.units[2].activation_bytes == 0);  // the loss keeps the logits: the last unit's output
  CHECK(p.units[2].backward_bytes >= 8 * 4);  // their gradient
  CHECK(p.rows == 3);
  CHECK(p.tokens_per_row == 4);
  CHECK_THROWS_WITH_AS(plan::profile(model, test::cpu(), x, test::ids({2}, 8, 2)), doctest::Contains("3 input rows but 2 target rows"),
                       Error);
  // one row cannot part a unit's fixed cost from its cost a row: every micro-batch count would be priced alike (found by a stranger)
  CHECK_THROWS_WITH_AS(plan::profile(model, test::cpu(), x.slice(0, 1), targets.slice(0, 1)),
                       doctest::Contains("the probe batch has 1 row; give it 2 or more"), Error);
  // a sample the model cannot take: the probe names the layer by its path, as the Trainer does
  CHECK_THROWS_WITH_AS(plan::profile(model, test::cpu(), test::random<float>({3, 5}, 1), targets, 1),
                       doctest::Contains("in the forward of layer `a`: Linear(4 -> 8) got input [3, 5]"), Error);
}

TEST_CASE("cost: the probe profiles a split MoE fed rows of one token each (its tokens must divide among the split ranks)") {
  struct Experts {
    nn::Linear in;
    Split<2, nn::MoE> moe;
    nn::Linear out;
  };
  const Experts model{nn::Linear(4, 8), Split<2, nn::MoE>(nn::MoE({.dim = 8, .hidden = 12, .experts = 4, .top_k = 1})), nn::Linear(8, 3)};
  // one row of [4, 4] is one token, which 2 ranks cannot share: the small run takes 2 rows (a stranger's finding)
  const auto p = plan::profile(model, test::cpu(), test::random<float>({4, 4}, 1), test::ids({4}, 3, 2), 2);
  CHECK(p.tensor == 2);
  CHECK(p.rows == 4);
  double per_row = 0;
  for (const auto& u : p.units) per_row += u.forward_seconds + u.backward_seconds;
  CHECK(per_row > 0);
  // two rows only: one size, all of it per row
  const auto two = plan::profile(model, test::cpu(), test::random<float>({2, 4}, 1), test::ids({2}, 3, 2), 1);
  for (const auto& u : two.units) CHECK(u.fixed_seconds == 0);
  // a row is one token, so a micro-batch's rows must be a multiple of 2; the search offers no other
  // (it offered dp2 tp2 m4, one row a micro-batch, which failed at its first step)
  CHECK(p.row_multiple == 2);
  const auto found = plan::search<Experts>(model, p, {.ranks = 4}, 8, 0);
  bool two_rows = false;
  for (const auto& e : found.plans) {
    const std::int64_t micro_rows = 8 / (e.candidate.data * e.candidate.micro_batches);
    CAPTURE(e.candidate.str());
    CHECK(micro_rows % 2 == 0);
    two_rows = two_rows || micro_rows == 2;
  }
  CHECK(two_rows);
  // none divides: the error says why and what batch would
  CHECK_THROWS_WITH_AS(plan::search<Experts>(model, p, {.ranks = 2}, 3, 0),
                       doctest::Contains("in micro-batches of a multiple of 2 rows (the split MoE's tokens divide among its ranks"), Error);
  CHECK_THROWS_WITH_AS(plan::search<Experts>(model, p, {.ranks = 2}, 3, 0),
                       doctest::Contains("a multiple of a data-parallel degree (the ranks over the split degree and the pipeline stages, "
                                         "1 with as many stages as that allows) times 2"),
                       Error);
  // the calibration file keeps it
  const auto file = std::filesystem::temp_directory_path() / ("epl_row_multiple_" + std::to_string(::getpid()));
  plan::save_profile(p, file, "k");
  const auto back = plan::load_profile(file, "k");
  REQUIRE(back.has_value());
  CHECK(back->row_multiple == 2);
  std::filesystem::remove(file);
  // rows of 2 tokens each ([rows, 2, 4]): any rows divide
  const auto pairs = plan::profile(model, test::cpu(), test::random<float>({4, 2, 4}, 1), test::ids({4, 2}, 3, 2), 1);
  CHECK(pairs.row_multiple == 1);
  // a model with no split MoE: any rows
  CHECK(plan::profile(gpt::make_gpt(tiny()), test::cpu(), test::ids({2, 8}, 32, 3), test::ids({2, 8}, 32, 4), 1).row_multiple == 1);
}

TEST_CASE("cost: plan::fits at run time names the largest part, the policy that shrinks it, and by how much") {
  CHECK(plan::fits<Big>({.ranks = 8}, {.bytes = 17 * kGiB, .rows = 8}));
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8}, {.bytes = 15'000'000'000, .rows = 8})),
                       doctest::Contains("optimizer state is the largest part: add epl::Zero<1>"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8}, {.bytes = 15'000'000'000, .rows = 8})),
                       doctest::Contains("16001000000 bytes, 1001000000 more than its budget of 15000000000 (the smaller of "
                                         "Budget::bytes and Cluster::bytes_per_rank)"), Error);
  // a cluster's smaller memory is the budget, and the message says where it may have come from (a stranger's finding)
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8, .bytes_per_rank = 15'000'000'000}, {.bytes = 17 * kGiB, .rows = 8})),
                       doctest::Contains("more than its budget of 15000000000 (the smaller of Budget::bytes and Cluster::bytes_per_rank)"),
                       Error);
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<1>>>({.ranks = 8}, {.bytes = 8 * kGiB, .rows = 8, .max_splits = 100})),
                       doctest::Contains("gradients are the largest part: add epl::Zero<2>"), Error);
  // advice is given only where following it helps: Big's one parameter is one block, which stage 2
  // reduces whole, so it needs no less than stage 1 (a stranger's finding: the advice raised the need)
  CHECK_THROWS_WITH_AS((plan::fits<Big, Policies<Zero<1>>>({.ranks = 8}, {.bytes = 8 * kGiB, .rows = 8})),
                       doctest::Contains("every policy that shrinks it is on"), Error);
  // with the state in host memory already, its blocks in flight outweigh what stage 3 shards
  CHECK_THROWS_WITH_AS((plan::fits<Big, Policies<Zero<3>, Offload<offload::V0>>>({.ranks = 2},
                                                                                 {.bytes = 10'000'000'000, .rows = 2, .optimizer_slots = 0})),
                       doctest::Contains("so a lower ZeRO stage needs less: lower zero.level"), Error);
  CHECK(plan::fits<Big, Policies<Zero<1>>>({.ranks = 2}, {.bytes = 10'000'000'000, .rows = 2, .optimizer_slots = 0}));
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 1 * kGiB, .rows = 8, .max_splits = 100})),
                       doctest::Contains("add epl::Offload<epl::offload::V0>, with the epl::Zero<3> it needs, to keep the training state in host memory"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 3 * kGiB, .rows = 8 * 4096, .max_splits = 100})),
                       doctest::Contains("activations are the largest part"), Error);
  // stage 3's blocks in flight at communication.max_splits' default: 4 GB over a 2 GB state
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 3 * kGiB, .rows = 8})),
                       doctest::Contains("a rank needs 6001000000 bytes"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 3 * kGiB, .rows = 8})),
                       doctest::Contains("ZeRO's blocks in flight are the largest part"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 3 * kGiB, .rows = 8})),
                       doctest::Contains("raise communication.max_splits (Budget::max_splits)"), Error);
  CHECK(plan::fits<Hundred, Policies<Zero<3>>>({.ranks = 8}, {.bytes = 3 * kGiB, .rows = 8, .max_splits = 100}));
  CHECK_THROWS_WITH_AS((plan::fits<Hundred>({.ranks = 8}, {.bytes = kGiB, .rows = 8, .max_splits = -1})),
                       doctest::Contains("Budget::max_splits (communication.max_splits) must be from 1 to 2^20"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<BigPipe>({.ranks = 3}, {.bytes = 3 * kGiB, .rows = 8})),
                       doctest::Contains("a cluster of 3 ranks cannot hold replicas of 2 ranks"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 0}, {.bytes = kGiB, .rows = 8})), doctest::Contains("the cluster's ranks must be at least 1"),
                       Error);
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8}, {.bytes = kGiB, .rows = 8, .micro_batches = 0})),
                       doctest::Contains("plan::fits: Budget::micro_batches must be at least 1"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8}, {.bytes = kGiB, .rows = 12, .micro_batches = 1})),
                       doctest::Contains("plan::fits: a global batch of 12 rows (Budget::rows) does not divide into 8 data-parallel "
                                         "replicas x 1 micro-batch (Budget::micro_batches); give a batch that is a multiple of 8"),
                       Error);
  // where the replicas divide the batch, a micro-batch count that divides a replica's rows is the other way
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 8}, {.bytes = kGiB, .rows = 16, .micro_batches = 3})),
                       doctest::Contains("give a batch that is a multiple of 24, or a micro-batch count that divides the 2 rows a replica "
                                         "gets"),
                       Error);
  // one replica: ZeRO has nothing to shard over, so it is not the advice
  CHECK_THROWS_WITH_AS((plan::fits<Big>({.ranks = 1}, {.bytes = 4 * kGiB, .rows = 8})),
                       doctest::Contains("there is one replica, so ZeRO has nothing to shard it over"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<Big, Policies<Zero<1>>>({.ranks = 1}, {.bytes = 4 * kGiB, .rows = 8})),
                       doctest::Contains("there is one replica"), Error);
}

TEST_CASE("cost: a declared pipeline is planned at run time, one stage a rank or all on one; absurd inputs are refused") {
  const auto shape = tiny();
  const auto model = gpt::make_two_stage_gpt(shape);
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  const auto prof = plan::profile(model, test::cpu(), sample, targets, 1);
  const auto found = plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4}, 16, 2);
  bool two = false, one = false;
  for (const auto& e : found.plans) {
    CAPTURE(e.candidate.str());
    CHECK((e.candidate.pipeline == 2 || e.candidate.pipeline == 1));
    two = two || e.candidate.pipeline == 2;
    one = one || e.candidate.pipeline == 1;
    // the keys say the stages, so the run is the plan that was priced
    const auto keys = e.candidate.keys();
    CHECK(std::find(keys.begin(), keys.end(), std::pair<std::string, std::string>{"pipeline.num_stages", std::to_string(e.candidate.pipeline)}) !=
          keys.end());
    CHECK(plan::make<gpt::TwoStageGpt, All>(e.candidate.options(), 4).pipeline == e.candidate.pipeline);
  }
  CHECK((two && one));
  // absurd figures: errors, not infinite or wrapped answers
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 2147483647}, 16, 2)),
                       doctest::Contains("ranks must be at least 1 and at most 65536"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4}, 16, 2, {.micro_batches = {1 << 26}})),
                       doctest::Contains("counts from 1 to 65536"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4, .macs_per_second = 1e-300}, 16, 2)),
                       doctest::Contains("macs_per_second must be from"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4, .speed = 1e-300}, 16, 2)),
                       doctest::Contains("speed must be from"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, plan::Profile{}, {.ranks = 4}, 16, 2)),
                       doctest::Contains("the profile is empty"), Error);
  // each profile's GEMMs as its plans run them: the f32 one first, AMP's as amp_profile (stranger 37
  // gave the f32 one as both, and the AMP plans were priced with f32 GEMMs)
  plan::Profile as_amp = prof;
  as_amp.matmul = DType::kBF16;
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, as_amp, {.ranks = 4}, 16, 2)),
                       doctest::Contains("the profile was measured with bf16 GEMMs; give the f32 one"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4}, 16, 2, {.amp_profile = &prof})),
                       doctest::Contains("SearchOptions::amp_profile was measured with f32 GEMMs"), Error);
  CHECK_NOTHROW((void)plan::search<gpt::TwoStageGpt, All>(model, prof, {.ranks = 4}, 16, 2, {.amp_profile = &as_amp}));
  plan::Candidate below_zero{.data = 2, .pipeline = 2};
  below_zero.policies.zero = -1;
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::TwoStageGpt, All>(model, prof, below_zero, {.ranks = 4}, 16, 2)),
                       doctest::Contains("policies.zero = -1 is not a ZeRO stage; give 0, 1, 2 or 3"), Error);
  // what the searches never try, refused as static_price refuses it (stranger 37: estimate priced
  // ZeRO 1 on one replica, static_price refused it), and what the Trainer refuses too
  plan::Candidate one_replica{.data = 1, .pipeline = 2};
  one_replica.policies.zero = 1;
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::TwoStageGpt, All>(model, prof, one_replica, {.ranks = 2}, 16, 2)),
                       doctest::Contains("dp1 pp2 m1 1F1B zero1: ZeRO shards over the data-parallel ranks: with one, give policies.zero = 0"),
                       Error);
  plan::Candidate bubble_zero2{.data = 2, .pipeline = 2, .schedule = "ZeroBubble"};
  bubble_zero2.policies.zero = 2;
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::TwoStageGpt, All>(model, prof, bubble_zero2, {.ranks = 4}, 16, 2)),
                       doctest::Contains("refuses ZeRO 2 and 3"), Error);
  bubble_zero2.policies.zero = 1;
  CHECK_NOTHROW((void)plan::estimate<gpt::TwoStageGpt, All>(model, prof, bubble_zero2, {.ranks = 4}, 16, 2));
  plan::PlanOptions crawl;
  crawl.rank_speeds = {1, 1e-300, 1, 1};
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::TwoStageGpt, All>(model, prof, {.data = 2, .pipeline = 2}, {.ranks = 4}, 16, 2, crawl)),
                       doctest::Contains("below a millionth of the fastest"), Error);
  // a candidate's split degree is the model type's: a candidate that says otherwise is told so (found by a stranger)
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::TwoStageGpt, All>(model, prof, {.data = 1, .pipeline = 2, .tensor = 2}, {.ranks = 4}, 16, 2)),
                       doctest::Contains("uses 2 ranks, but the cluster has 4 (its split degree is the model type's epl::Split, 1, "
                                         "not the candidate's 2)"), Error);
  // a profile of the whole model for its split type: the split degree is named
  const auto split = gpt::make_split_gpt<2>(shape);
  const auto whole = plan::profile(gpt::make_gpt(shape), test::cpu(), sample, targets, 1);
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::SplitGpt<2>, All>(split, whole, {.data = 1}, {.ranks = 2}, 16, 2)),
                       doctest::Contains("probed as a rank of a split group of 1, but this model is split 2 ways"), Error);
}

TEST_CASE("cost: a profile file with impossible figures, or cut short, is refused by name") {
  const auto model = gpt::make_gpt(tiny());
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  const auto prof = plan::profile(model, test::cpu(), sample, targets, 1);
  const auto dir = std::filesystem::temp_directory_path() / ("epl_profile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "p";
  plan::save_profile(prof, file, "k");
  REQUIRE(plan::load_profile(file, "k").has_value());
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& t) {
    std::ofstream out(file, std::ios::trunc);
    out << t;
  };
  // a changed text given a check line of its own, to reach the checks on its figures
  auto resealed = [](const std::string& t) { return plan::detail::sealed(t.substr(0, t.rfind('\n', t.size() - 2) + 1)); };
  // a unit's forward time made negative
  auto bad = text;
  const auto unit = bad.find("model.0.0 ");
  REQUIRE(unit != std::string::npos);
  const auto line_end = bad.find('\n', unit);
  bad.replace(unit, line_end - unit, "model.0.0 0 1 -5 -7 -1 -1 -1 -1 -1 -1");
  write(bad);  // as an edit leaves it: the check line refuses it
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged (its last line does not check"),
                       Error);
  write(resealed(bad));  // and with a check line made for it: the figures are refused
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("impossible figures for unit model.0.0"), Error);
  write(plan::detail::sealed("epl-profile 7\n"));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("no key line"), Error);
  write("epl-profile 7\n");
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged"), Error);
  // cut short inside its check line or its last figure, a line more, one digit changed (stranger 37's
  // edit, which loaded): each fails the check line
  write(text.substr(0, text.size() - 6));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged"), Error);
  const auto last_line = text.rfind('\n', text.size() - 2) + 1;
  write(text.substr(0, last_line - 3) + "\n" + text.substr(last_line));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged"), Error);
  write(text.substr(0, last_line) + "loss 0 0 0 0 0 0 0 0 0 0 0\n" + text.substr(last_line));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged"), Error);
  write(resealed(text.substr(0, last_line) + "loss 0 0 0 0 0 0 0 0 0 0 0\n" + text.substr(last_line)));  // a line more, sealed
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("truncated or corrupt"), Error);
  auto one_digit = text;
  const auto digit = one_digit.find_first_of("123456789", one_digit.find("model.0.0 ") + 10);
  one_digit[digit] = one_digit[digit] == '9' ? '8' : static_cast<char>(one_digit[digit] + 1);
  write(one_digit);
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is truncated, edited or damaged"), Error);
  // bytes a row no measurement gives (they would overflow the estimate's sums)
  auto overflowing = text;
  const auto unit_at = overflowing.find("model.0.0 ");
  overflowing.replace(unit_at, overflowing.find('\n', unit_at) - unit_at, "model.0.0 0 1 9000000000000000000 0 0 0 0 0 0 0");
  write(resealed(overflowing));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("bytes a row over"), Error);
  // a version this epl does not read, and a key that is not one line
  write("epl-profile 99\nk\n");
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("was written by another version of epl"), Error);
  CHECK_THROWS_WITH_AS(plan::save_profile(prof, file, "two\nlines"), doctest::Contains("holds a line break"), Error);
  // a time no measurement gives (finite, but past 10^4 s), a folder at the path, and bytes that are not text
  auto huge = text;
  const auto at = huge.find("model.0.0 ");
  huge.replace(at, huge.find('\n', at) - at, "model.0.0 0 1 0 0 0 0 0 1e300 0 0");
  write(resealed(huge));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("a time over 10000 s"), Error);
  CHECK_THROWS_WITH_AS((void)plan::load_profile(dir, "k"), doctest::Contains("is a folder"), Error);
  CHECK_THROWS_WITH_AS((void)plan::load_cluster(dir, "k", {}), doctest::Contains("is a folder"), Error);
  write(std::string("\x01\xff\x7f binary\n", 11));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is not one (it does not begin with a line of text)"), Error);
  CHECK_THROWS_WITH_AS((void)plan::load_cluster(file, "k", {}), doctest::Contains("is not one (it does not begin with a line of text)"), Error);
  write("some notes\n");
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("is not one (its first line is \"some notes\")"), Error);
  // an older probe's file (no repeats, no spread; no weight-pass bytes) is measured again, not misread
  write("epl-profile 3\nk\n2 8 32 1 1\nloss 0 0 0 0 0 0 0 0\n");
  CHECK(!plan::load_profile(file, "k").has_value());
  write("epl-profile 4\nk\n2 8 32 1 1 0 1\nloss 0 0 0 0 0 0 0 0\n");
  CHECK(!plan::load_profile(file, "k").has_value());
  write("epl-profile 5\nk\n2 8 32 1 1 0 1\nloss 0 0 0 0 0 0 0 0 0 0 0\nend\n");  // no row multiple
  CHECK(!plan::load_profile(file, "k").has_value());
  write("epl-profile 6\nk\n2 8 32 1 1 0 1 1 1\nloss 0 0 0 0 0 0 0 0 0 0 0\nend\n");  // no check line
  CHECK(!plan::load_profile(file, "k").has_value());
  // a cluster's file: sealed too, an older one measured again
  plan::save_cluster({.ranks = 2, .speed = 0.5}, file, "c");
  REQUIRE(plan::load_cluster(file, "c", {}).has_value());
  CHECK(plan::load_cluster(file, "c", {})->speed == 0.5);
  std::string cluster_text;
  {
    std::ifstream in(file);
    cluster_text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto cluster_edit = cluster_text;
  cluster_edit[cluster_edit.find("0.5")] = '1';
  write(cluster_edit);
  CHECK_THROWS_WITH_AS((void)plan::load_cluster(file, "c", {}), doctest::Contains("is truncated, edited or damaged"), Error);
  write("epl-cluster 2\nc\n1 1e-05 1e+10 1e-05 1e+10 1e-05 1e+10\n");
  CHECK(!plan::load_cluster(file, "c", {}).has_value());
  // a spread that cannot be is refused
  const auto counts = text.find('\n', text.find('\n') + 1) + 1;  // the line after the key
  const auto counts_end = text.find('\n', counts);
  std::istringstream fields(text.substr(counts, counts_end - counts));
  std::int64_t rows = 0, tokens = 0, bytes = 0, tensor = 0, repeats = 0, multiple = 0, units = 0, matmul = -1;
  double spread = 0;
  fields >> rows >> tokens >> bytes >> tensor >> repeats >> spread >> multiple >> units >> matmul;
  REQUIRE(fields);
  auto counts_with = [&](const std::string& spread_is, std::int64_t multiple_is) {
    auto t = text;
    t.replace(counts, counts_end - counts, std::to_string(rows) + " " + std::to_string(tokens) + " " + std::to_string(bytes) + " " +
                                               std::to_string(tensor) + " " + std::to_string(repeats) + " " + spread_is + " " +
                                               std::to_string(multiple_is) + " " + std::to_string(units) + " " + std::to_string(matmul));
    return resealed(t);
  };
  CHECK(matmul == static_cast<int>(DType::kF32));  // the GEMMs' operand type it was measured with
  write(counts_with("0", multiple));
  CHECK(plan::load_profile(file, "k").has_value());  // the line rebuilt as it was: read
  write(counts_with("-0.5", multiple));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("truncated or corrupt"), Error);
  // a row multiple of 0, or past the split degree (no probe gives either)
  write(counts_with("0", 0));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("truncated or corrupt"), Error);
  write(counts_with("0", tensor + 1));
  CHECK_THROWS_WITH_AS((void)plan::load_profile(file, "k"), doctest::Contains("truncated or corrupt"), Error);
  std::filesystem::remove_all(dir);
}

namespace {
// device::Cpu whose GEMMs are 20 times slower in some of the probe's runs: GEMM calls are counted,
// and the runs are told apart by `period`, the GEMMs of one repeat (the whole batch and one row).
struct Bursty : device::Cpu {
  explicit Bursty(std::int64_t period) : device::Cpu(350, 1), period(period) {}
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
            DType inputs = DType::kF32) const {
    const auto t0 = std::chrono::steady_clock::now();
    device::Cpu::gemm(a, ta, b, tb, c, alpha, beta, inputs);
    hold(t0);
  }
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
                    DType inputs = DType::kF32) const {
    const auto t0 = std::chrono::steady_clock::now();
    device::Cpu::gemm_batched(a, ta, b, tb, c, alpha, beta, inputs);
    hold(t0);
  }
  // repeats 0, 1, 3 and 4 of five are slow, repeat 2 fast: the median run is slow, the fastest not
  // the first (period 0: never slow)
  void hold(std::chrono::steady_clock::time_point t0) const {
    const std::int64_t call = calls++;
    const bool slow = period > 0 && (call / period) % 5 != 2;
    if (!slow) return;
    const auto until = t0 + (std::chrono::steady_clock::now() - t0) * 20 + std::chrono::microseconds(200);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  std::int64_t period;
  mutable std::int64_t calls = 0;
};
}  // namespace

TEST_CASE("cost: the probe interleaves its repeats and keeps the spread of its runs, in its search and its file") {
  const auto model = gpt::make_gpt(tiny());
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  // never slow: counts the GEMMs of one repeat (the probe also runs one split backward, once)
  Bursty counting(0), twice(0);
  (void)plan::profile(model, counting, sample, targets, 1);
  (void)plan::profile(model, twice, sample, targets, 2);
  const std::int64_t repeat = twice.calls - counting.calls;
  REQUIRE(repeat > 0);
  // repeats 0, 1, 3 and 4 slow, 2 fast: the probe runs each repeat whole (both sizes) in turn. What
  // it makes of the times is time_units' (the next test, without a clock: a timed check here failed
  // once in CI, on a loaded machine)
  Bursty bursty(repeat);
  const auto prof = plan::profile(model, bursty, sample, targets, 5);
  CHECK(bursty.calls == counting.calls + 4 * repeat);
  CHECK(prof.repeats == 5);
  CHECK(prof.spread >= 0);
  for (const auto& u : prof.units) {
    CHECK(u.forward_seconds >= 0);
    CHECK(u.backward_seconds >= 0);
    CHECK(u.fixed_seconds >= 0);
  }
  // the search carries the spread; its report says when the probe cannot rank the first two plans
  const plan::Cluster cluster{.ranks = 2};
  auto r = plan::search<gpt::Gpt, All>(model, prof, cluster, 16, optim::AdamW::kStateSlots);
  CHECK(r.spread == prof.spread);
  REQUIRE(r.plans.size() > 1);
  r.spread = r.plans[1].seconds / r.plans[0].seconds;  // the second within the first's spread (a ratio >= 1, so > ratio - 1)
  CHECK(!r.ranked());
  CHECK(plan::report(r, 3).find("the probe cannot rank them; measure them") != std::string::npos);
  // after auto_plan measured them it does not advise measuring (a stranger's finding)
  CHECK(plan::report(r, 3, true).find("the probe cannot rank them; the choice above is the measurements'") != std::string::npos);
  CHECK(plan::report(r, 3, true).find("measure them") == std::string::npos);
  r.spread = 0;
  CHECK(r.ranked() == (r.plans[1].seconds > r.plans[0].seconds));
  // the file keeps repeats and spread
  const auto file = std::filesystem::temp_directory_path() / ("epl_spread_" + std::to_string(::getpid()));
  plan::save_profile(prof, file, "k");
  const auto back = plan::load_profile(file, "k");
  REQUIRE(back.has_value());
  CHECK(back->repeats == 5);
  CHECK(back->spread == prof.spread);
  std::filesystem::remove(file);
}

TEST_CASE("cost: the probe's times are each unit's fastest of each size, affine in the rows, and its spread the median step's over the fastest") {
  // a machine that is slow in runs 0, 1, 3 and 4 (every figure 20 times) and fast in run 2; two
  // units and the loss, a batch of 6 rows and its first 2
  plan::Profile p;
  p.rows = 6;
  p.units.resize(3);
  const plan::detail::RunTimes all_fast{{0.010, 0.020}, {0.006, 0.012}, {0.002, 0.002}};  // seconds of 6 rows
  const plan::detail::RunTimes few_fast{{0.004, 0.008}, {0.002, 0.004}, {0.001, 0.001}};  // of 2 rows
  auto slow = [](plan::detail::RunTimes run, double by) {
    for (auto& [f, b] : run) f *= by, b *= by;
    return run;
  };
  std::vector<plan::detail::RunTimes> alls, ones;
  for (int r = 0; r < 5; ++r) {
    alls.push_back(r == 2 ? all_fast : slow(all_fast, 20 + r));
    ones.push_back(r == 2 ? few_fast : slow(few_fast, 20 + r));
  }
  ones[4][1].second = 0.003;  // the fastest of one figure in a slow run: the minimum is a figure's, not a run's
  plan::detail::time_units(p, alls, ones, 2);
  // each unit: (all - few) / 4 extra rows a row, and the few rows' time less their rows' part fixed
  CHECK(p.units[0].forward_seconds == doctest::Approx(0.0015));
  CHECK(p.units[0].backward_seconds == doctest::Approx(0.003));
  CHECK(p.units[0].fixed_seconds == doctest::Approx(0.012 - 2 * 0.0045));
  CHECK(p.units[1].forward_seconds == doctest::Approx(0.001));
  CHECK(p.units[1].backward_seconds == doctest::Approx(0.00225));
  CHECK(p.units[1].fixed_seconds == 0);  // 0.005 - 2 * 0.00325 is below 0: none
  CHECK(p.units[2].forward_seconds == doctest::Approx(0.00025));
  CHECK(p.units[2].fixed_seconds == doctest::Approx(0.002 - 2 * 0.0005));
  // the whole batch's steps: 0.052 fast, 0.052 * (20, 21, 23, 24) slow; the median 0.052 * 21
  CHECK(p.spread == doctest::Approx(20));
  // one size only: every figure a row's share of the fastest whole run, nothing fixed
  plan::Profile q;
  q.rows = 6;
  q.units.resize(3);
  plan::detail::time_units(q, alls, {}, 6);
  CHECK(q.units[0].forward_seconds == doctest::Approx(0.010 / 6));
  CHECK(q.units[1].backward_seconds == doctest::Approx(0.012 / 6));
  CHECK(q.units[2].fixed_seconds == 0);
  // a steady machine: no spread
  plan::Profile steady;
  steady.rows = 6;
  steady.units.resize(3);
  plan::detail::time_units(steady, {all_fast, all_fast, all_fast}, {few_fast, few_fast, few_fast}, 2);
  CHECK(steady.spread == 0);
  CHECK_THROWS_WITH_AS(plan::detail::time_units(steady, {}, {}, 2), doctest::Contains("no run"), epl::Error);
}

TEST_CASE("cost: search returns only plans the plan accepts, fastest first, and says by how much nothing fits") {
  const auto model = gpt::make_gpt(tiny());
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  const auto prof = plan::profile(model, test::cpu(), sample, targets, 1);
  const plan::Cluster cluster{.ranks = 4};
  const auto r = plan::search<gpt::Gpt, All>(model, prof, cluster, 16, optim::AdamW::kStateSlots);
  // communication.max_splits given through a program's options is checked as the key is (a
  // stranger's 0 divided by zero)
  for (const std::int64_t splits : {std::int64_t{0}, std::int64_t{-3}, std::int64_t{1} << 21}) {
    plan::SearchOptions bad;
    bad.base.policies.max_splits = splits;
    const auto search = [&] { return plan::search<gpt::Gpt, All>(model, prof, cluster, 16, optim::AdamW::kStateSlots, bad); };
    CHECK_THROWS_WITH_AS((void)search(), doctest::Contains("must be from 1 to 1048576 (the gradient buckets, and ZeRO's blocks"), Error);
    // said once, before any combination is tried (not as every combination's refusal)
    CHECK_THROWS_WITH_AS((void)search(), doctest::Contains("plan::search: SearchOptions::base.policies.max_splits (communication.max_splits) = "),
                         Error);
  }
  // more optimizer state slots than any optimizer keeps are a mistake, as plan::fits says
  CHECK_THROWS_WITH_AS(((void)plan::search<gpt::Gpt, All>(model, prof, cluster, 16, 65)), doctest::Contains("65 optimizer state slots per "
                                                                                                           "element; give the optimizer's kStateSlots (0 to 64)"),
                       Error);
  CHECK_THROWS_WITH_AS(((void)plan::estimate<gpt::Gpt, All>(model, prof, {.data = 4}, cluster, 16, 1000)),
                       doctest::Contains("the optimizer's state slots an element are 1000; give 0 (SGD) to 64"), Error);
  // each of estimate's conditions says which failed, with its value (a stranger met one message for four)
  const auto est = [&](plan::Candidate c, std::int64_t rows = 16) {
    return [&model, &prof, &cluster, c, rows] { (void)plan::estimate<gpt::Gpt, All>(model, prof, c, cluster, rows, 2); };
  };
  plan::Candidate zero5{.data = 4};
  zero5.policies.zero = 5;
  CHECK_THROWS_WITH_AS(est(zero5)(), doctest::Contains("policies.zero = 5 is not a ZeRO stage; give 0, 1, 2 or 3"), Error);
  CHECK_THROWS_WITH_AS(est({.data = 2, .pipeline = 2, .virtual_stages = 0})(), doctest::Contains("virtual_stages = 0; give 1, or 2"), Error);
  CHECK_THROWS_WITH_AS(est({.data = 4, .micro_batches = 70000})(), doctest::Contains("70000 micro-batches; give at most 65536"), Error);
  CHECK_THROWS_WITH_AS(est({.data = 4}, std::int64_t{1} << 51)(), doctest::Contains("rows; give at most 2^50"), Error);
  CHECK_THROWS_WITH_AS(est({.data = 4}, 0)(), doctest::Contains("a global batch of 0 rows; give 1 or more"), Error);
  CHECK_THROWS_WITH_AS(est({.data = 4, .micro_batches = 0})(), doctest::Contains("micro_batches = 0; each must be 1 or more"), Error);
  REQUIRE(!r.plans.empty());
  CHECK(r.refused > 0);  // too few units for 4 stages with Interleaved's 2 each, recompute of a stage of one unit...
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const auto& e = r.plans[i];
    CAPTURE(e.candidate.str());
    CHECK_NOTHROW((void)plan::make<gpt::Gpt, All>(e.candidate.options(), 4));
    CHECK(e.candidate.data * e.candidate.pipeline == 4);
    if (i > 0) CHECK(r.plans[i - 1].seconds <= e.seconds);
    CHECK(e.seconds > 0);
    CHECK(e.activations > 0);
  }
  // ZeRO 3 holds a quarter of what no ZeRO holds, as the allocator would
  const auto find = [&](int data, int zero) {
    for (const auto& e : r.plans)
      if (e.candidate.data == data && e.candidate.policies.zero == zero && e.candidate.micro_batches == 1 && !e.candidate.policies.recompute &&
          !e.candidate.policies.offload)
        return e;
    REQUIRE(false);  // no such plan
    return plan::Estimate{};
  };
  CHECK(find(4, 3).state.device() * 3 < find(4, 0).state.device());
  CHECK(plan::report(r, 3).find("fastest first") != std::string::npos);
  // what auto_plan measures: the fastest predicted first, then the fastest of each other layout
  CHECK(plan::shortlist(r, 1) == std::vector<std::size_t>{0});
  CHECK(plan::shortlist(r, 100000).size() == r.plans.size());
  const auto listed = plan::shortlist(r, 3);
  REQUIRE(listed.size() == 3);
  CHECK(listed.front() == 0);
  std::set<std::pair<int, int>> layouts;
  for (const auto i : listed) layouts.emplace(r.plans[i].candidate.data, r.plans[i].candidate.pipeline);
  CHECK(layouts.size() == 3);  // dp4, dp2 pp2 and pp4: each layout's fastest, not three of one
  for (const auto i : listed)
    for (std::size_t j = 0; j < i; ++j)  // no faster plan of the same layout was passed over
      CHECK(!(r.plans[j].candidate.data == r.plans[i].candidate.data && r.plans[j].candidate.pipeline == r.plans[i].candidate.pipeline));
  // then the fastest of each other shape (schedule, micro-batches): not a shape's ZeRO or recompute siblings
  auto shape = [&](std::size_t i) {  // the plan's name without its memory policies
    auto c = r.plans[i].candidate;
    c.policies = {};
    return c.str();
  };
  std::set<std::string> shapes;
  for (std::size_t i = 0; i < r.plans.size(); ++i) shapes.insert(shape(i));
  REQUIRE(shapes.size() > 8);
  const auto eight = plan::shortlist(r, 8);
  std::set<std::string> listed_shapes;
  for (const auto i : eight) {
    CAPTURE(r.plans[i].candidate.str());
    CHECK(listed_shapes.insert(shape(i)).second);  // each once
    for (std::size_t j = 0; j < i; ++j) CHECK(shape(j) != shape(i));  // its shape's fastest
  }
  // a budget below every plan: the error says which comes closest and by how much
  const auto smallest = std::min_element(r.plans.begin(), r.plans.end(), [](const auto& a, const auto& b) {
                          return a.device_bytes() < b.device_bytes();
                        })->device_bytes();
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, 16, 2, {.budget = smallest - 100})),
                       doctest::Contains("100 more, its largest part the"), Error);
  // nonsense in, an error out: rows, slots, ranks, another model's profile
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, 0, 2)), doctest::Contains("a global batch of 0 rows"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, 16, -1)), doctest::Contains("-1 optimizer state slots"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, {.ranks = 0}, 16, 2)), doctest::Contains("plan::search: the cluster's ranks must be at least 1"), Error);
  auto deeper = tiny();
  deeper.layers = 3;
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(gpt::make_gpt(deeper), prof, cluster, 16, 2)),
                       doctest::Contains("the profile was measured on another model: it has 8 units, this model 10"), Error);
  auto wider = tiny();
  wider.dim = 32;
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(gpt::make_gpt(wider), prof, cluster, 16, 2)),
                       doctest::Contains("the profile was measured on another model: its unit"), Error);
}
}

TEST_SUITE("cpu") {
TEST_CASE("cost: a split model's estimate does its share of the GEMMs and prices its group's all-reduces") {
  const auto shape = tiny();
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  const auto whole = gpt::make_gpt(shape);
  const auto split = gpt::make_split_gpt<2>(shape);
  const auto prof = plan::profile(whole, test::cpu(), sample, targets, 1);
  const auto split_prof = plan::profile(split, test::cpu(), sample, targets, 1);
  plan::Cluster cluster{.ranks = 2};
  cluster.tensor = {.alpha = 1e-3, .beta = 1e6};  // slow enough to see
  const std::int64_t rows = 16;
  const auto e = plan::estimate<gpt::SplitGpt<2>, All>(split, split_prof, {.data = 1}, cluster, rows, optim::AdamW::kStateSlots);
  CHECK(e.candidate.tensor == 2);
  CHECK(e.candidate.str() == "dp1 tp2 pp1 m1");
  // the split model is probed as one rank of its group: a block keeps less than the whole one
  CHECK(split_prof.tensor == 2);
  // (the first block's attention: model.1.0.0 whole, model.1.1.0.0 after the split's entry)
  CHECK(split_prof.unit("model.1.1.0.0").activation_bytes < prof.unit("model.1.0.0").activation_bytes);
  CHECK(split_prof.unit("model.1.1.0.0").parameters == prof.unit("model.1.0.0").parameters);  // counted whole, as the model's
  // Megatron's four all-reduces of a block (attention's and the MLP's input gradient backward,
  // their output forward), the vocabulary-parallel embedding's output, the head's input gradient:
  // (4 layers + 2) x dim f32 values a token, of every row on the one replica
  const std::int64_t per_token = (4 * shape.layers + 2) * shape.dim;
  CHECK(e.tensor_bytes == per_token * shape.context * rows * 4);
  const int collectives = 4 * static_cast<int>(shape.layers) + 2;
  CHECK(e.tensor_seconds == doctest::Approx(collectives * 2.0 * 1e-3 + 1.0 * static_cast<double>(e.tensor_bytes) / 1e6));
  CHECK(e.compute_seconds > e.tensor_seconds);
  // two micro-batches move the same bytes in twice the messages
  const auto e2 = plan::estimate<gpt::SplitGpt<2>, All>(split, split_prof, {.data = 1, .micro_batches = 2}, cluster, rows, 2);
  CHECK(e2.tensor_bytes == e.tensor_bytes);
  CHECK(e2.tensor_seconds == doctest::Approx(2 * collectives * 2.0 * 1e-3 + 1.0 * static_cast<double>(e.tensor_bytes) / 1e6));
  // with free links, a split rank's compute is about half the unsplit model's on one rank: its
  // GEMMs are halved, its norms and the attention's softmax are not
  cluster.tensor = {.alpha = 0, .beta = 1e18};
  const auto free_split = plan::estimate<gpt::SplitGpt<2>, All>(split, split_prof, {.data = 1}, cluster, rows, 2);
  const auto one = plan::estimate<gpt::Gpt, All>(whole, prof, {.data = 1}, {.ranks = 1}, rows, 2);
  CHECK(free_split.tensor_bytes == e.tensor_bytes);
  CHECK(free_split.flops < 0.75 * one.flops);
  CHECK(free_split.flops > 0.5 * one.flops);
  // merge: the tp2 and dp2 plans of a 2-rank cluster in one list, fastest first
  const auto merged = plan::merge({plan::search<gpt::SplitGpt<2>, All>(split, split_prof, {.ranks = 2}, rows, 2),
                                   plan::search<gpt::Gpt, All>(whole, prof, {.ranks = 2}, rows, 2)});
  bool tp = false, dp = false;
  for (std::size_t i = 0; i < merged.plans.size(); ++i) {
    tp = tp || merged.plans[i].candidate.tensor == 2;
    dp = dp || merged.plans[i].candidate.data == 2;
    if (i > 0) CHECK(merged.plans[i - 1].seconds <= merged.plans[i].seconds);
  }
  CHECK((tp && dp));
  CHECK_THROWS_WITH_AS(plan::merge({}), doctest::Contains("none of the 0 searches found a plan"), Error);
}

TEST_CASE("cost: on uneven devices the estimate gives the slow rank its share and the search prices it") {
  const auto model = gpt::make_gpt(tiny());
  const auto sample = test::ids({2, 8}, 32, 3), targets = test::ids({2, 8}, 32, 4);
  const auto prof = plan::profile(model, test::cpu(), sample, targets, 1);
  const plan::Cluster cluster{.ranks = 2};
  const std::int64_t rows = 12;
  const auto even = plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, cluster, rows, 2);
  plan::PlanOptions slow;
  slow.rank_speeds = {1.0, 0.5};
  // the Trainer shares 8 and 4 rows; the slow rank's 4 at half speed take as long as 8: the step
  // takes 8 rows' time where the even split's slow rank would take 6 rows at half speed, 12
  const auto uneven = plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, cluster, rows, 2, slow);
  const double fixed = even.compute_seconds;  // 6 rows at full speed
  CHECK(uneven.compute_seconds == doctest::Approx(fixed * 8.0 / 6.0));
  CHECK(uneven.compute_seconds > fixed);
  // a pipeline of the two ranks: the slow stage gets the smaller cut, the path its slower speed
  const auto piped = plan::estimate<gpt::Gpt, All>(model, prof, {.pipeline = 2, .micro_batches = 2}, cluster, rows, 2, slow);
  CHECK(piped.compute_seconds > 0);
  // speeds for another world size are refused, by the plan
  plan::PlanOptions wrong;
  wrong.rank_speeds = {1.0, 0.5, 2.0};
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, cluster, rows, 2, wrong)),
                       doctest::Contains("cluster.rank_speeds gives 3 speeds for 2 ranks"), Error);
  // the speeds are relative: the fastest runs at the cluster's speed
  plan::PlanOptions halves, doubled;
  halves.rank_speeds = {0.5, 0.5};
  doubled.rank_speeds = {2.0, 1.0};
  CHECK(plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, cluster, rows, 2, halves).seconds == doctest::Approx(even.seconds));
  CHECK(plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, cluster, rows, 2, doubled).seconds == doctest::Approx(uneven.seconds));
  // the search says what is wrong with them, not that nothing fits
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.base = wrong})),
                       doctest::Contains("gives 3 speeds for a cluster of 2 ranks"), Error);
  plan::PlanOptions zero;
  zero.rank_speeds = {1.0, 0.0};
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.base = zero})),
                       doctest::Contains("refused every one of the"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.base = zero})),
                       doctest::Contains("is not a positive finite number"), Error);
  // nonsense links and speeds are errors in the run-time search too
  plan::Cluster bad = cluster;
  bad.data.beta = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, bad, rows, 2)), doctest::Contains("plan::search: the cluster's links"), Error);
  bad = cluster;
  bad.speed = 0;
  CHECK_THROWS_WITH_AS((plan::estimate<gpt::Gpt, All>(model, prof, {.data = 2}, bad, rows, 2)), doctest::Contains("speed must be"), Error);
  bad = cluster;
  bad.cores = -2;
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, bad, rows, 2)), doctest::Contains("cores must be 0"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.micro_batches = {}})),
                       doctest::Contains("micro_batches must list one or more"), Error);
  // 12 rows a step on 2 ranks divide into no 5 or 7 micro-batches: the counts are named, not only the batch
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.micro_batches = {5, 7}})),
                       doctest::Contains("times SearchOptions::micro_batches' counts (5, 7); use a batch"), Error);
  CHECK_THROWS_WITH_AS((plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.micro_batches = {5, 7}})),
                       doctest::Contains("times one of the counts (the counts hold no 1: add it to try one micro-batch a step)"), Error);
  // the search prices it too: its dp2 plan is the uneven estimate
  const auto found = plan::search<gpt::Gpt, All>(model, prof, cluster, rows, 2, {.pipelines = false, .recompute = false, .base = slow});
  bool seen = false;
  for (const auto& e : found.plans)
    if (e.candidate.data == 2 && e.candidate.micro_batches == 1 && e.candidate.policies.zero == 0) {
      seen = true;
      CHECK(e.seconds == doctest::Approx(uneven.seconds));
    }
  CHECK(seen);
}
}
