// The compile-time search (plan::static_search): every combination priced from the layers' static
// costs in a constant expression — the fastest that fits first, the state bytes plan::fits
// predicts, the cluster's links and GEMM rate deciding between replicas, stages and splits — and
// a clear error when nothing fits.
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/plan/estimate.hpp"
#include "epl/plan/search.hpp"
#include "epl/plan/static_search.hpp"

using namespace epl;

namespace {
// A layer whose costs are in its type: P parameters (and P multiply-adds a token), A activation
// bytes a row, O output bytes a row, T bytes a row its split group all-reduces in C collectives.
template <std::int64_t P, std::int64_t A, std::int64_t O = 0, std::int64_t T = 0, int C = 0>
struct Layer {
  nn::Linear l{1, 1};
  template <class V> void visit(V&& v) { l.visit(v); }
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { return l.forward(ctx, x); }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return l.backward(ctx, dy); }
};
}  // namespace

template <std::int64_t P, std::int64_t A, std::int64_t O, std::int64_t T, int C>
struct epl::strategy::static_cost<Layer<P, A, O, T, C>> {
  static constexpr Cost value{.macs_per_token = static_cast<double>(P), .parameters = P, .activation_bytes = A, .output_bytes = O,
                              .tensor_bytes = T, .tensor_collectives = C};
};

namespace {
constexpr std::int64_t kM = 1'000'000;
using Block = Layer<10 * kM, 4 * kM, kM, 2 * kM, 4>;
struct Four {
  Block a, b, c, d;
};
struct SplitFour {
  Split<2, Four> body;
};
using TwoStages = Pipeline<Replicate<1, Block, Block>, Replicate<1, Block, Block>>;
using Adam = Policies<Zero<3>, Offload<offload::V0>>;

// one rank: the search's only plan is the model itself, priced as a roofline
constexpr auto one = plan::static_search<Four>({.ranks = 1, .macs_per_second = 1e12}, {.bytes = 0, .rows = 8, .tokens_per_row = 16},
                                               {.micro_batches = {1, 0, 0, 0, 0}, .recompute = false});
static_assert(one.count == 1 && one.tried == 1);
static_assert(one.best().data == 1 && one.best().pipeline == 1 && one.best().micro_batches == 1);
// its state is plan::fits' (16 bytes an element with AdamW), its activations every unit's for 8 rows
// and the loss's gradient of the model's output (the last unit's output bytes)
static_assert(one.best().bytes.state.device() == plan::static_footprint<Four>({.ranks = 1}, {.rows = 8}).state.device());
static_assert(one.best().bytes.state.device() == 40 * kM * 16);
static_assert(one.best().bytes.activations == (4 * 4 * kM + kM) * 8);
// ZeRO's blocks in flight, one rule for fits and the search: on 4 ranks under ZeRO 3 with
// communication.max_splits 4, each unit (10 M elements) is a block; two are gathered (80 MB) and
// three reducing (120 MB)
static_assert([] {
  plan::Combination c{.data = 4};
  c.policies.zero = 3;
  const auto priced = plan::static_price<Four>({.ranks = 4}, {.rows = 8, .max_splits = 4}, c);
  const auto footprint = plan::static_footprint<Four, Policies<Zero<3>>>({.ranks = 4}, {.rows = 8, .max_splits = 4});
  return priced.bytes.in_flight.parameters == 80 * kM && priced.bytes.in_flight.gradients == 120 * kM &&
         footprint.in_flight.parameters == 80 * kM && footprint.in_flight.gradients == 120 * kM &&
         priced.bytes.total() == footprint.total();
}());
// an EMA of the weights is one value more an element, priced by static_price as by static_search
// (4 bytes x 40 M elements on one rank)
static_assert(plan::static_price<Four, Policies<Ema>>({.ranks = 1}, {.rows = 8}, {.data = 1}).bytes.state.device() ==
              plan::static_price<Four>({.ranks = 1}, {.rows = 8}, {.data = 1}).bytes.state.device() + 40 * kM * 4);
static_assert(plan::static_price<Four, Policies<Ema>>({.ranks = 1}, {.rows = 8}, {.data = 1}).bytes.state.device() ==
              plan::static_search<Four, Policies<Ema>>({.ranks = 1}, {.rows = 8}, {.micro_batches = {1, 0, 0, 0, 0}, .recompute = false})
                  .best()
                  .bytes.state.device());
// 40 M multiply-adds a token, 128 tokens, forward and backward (3x), at 1e12 a second
static_assert(one.best().seconds > 3 * 40e6 * 128 / 1e12 * 0.999999 && one.best().seconds < 3 * 40e6 * 128 / 1e12 * 1.000001);

// four ranks, plenty of memory, fast links: replicas do it all with no bubble
constexpr plan::Cluster fast{.ranks = 4, .macs_per_second = 1e12, .data = {1e-6, 1e12}, .pipeline = {1e-6, 1e12}, .tensor = {1e-6, 1e12}};
constexpr auto roomy = plan::static_search<Four, Adam>(fast, {.bytes = std::int64_t{1} << 40, .rows = 64, .tokens_per_row = 16});
static_assert(roomy.best().data == 4 && roomy.best().pipeline == 1 && !roomy.best().policies.recompute);
// ZeRO-1 moves what an all-reduce moves: as fast, and smaller, so it comes first
static_assert(roomy.best().policies.zero > 0 && [] {
  for (int i = 1; i < roomy.count; ++i) {
    const auto& p = roomy.plans[static_cast<std::size_t>(i)];
    if (p.seconds == roomy.best().seconds && p.bytes.total() < roomy.best().bytes.total()) return false;
  }
  return true;
}());
static_assert(roomy.fit + roomy.refused == roomy.tried && roomy.refused > 0 && roomy.count == 8);  // refused: recompute of a 1-unit stage
// fastest first
static_assert([] {
  for (int i = 1; i < roomy.count; ++i)
    if (roomy.plans[static_cast<std::size_t>(i)].seconds < roomy.plans[static_cast<std::size_t>(i - 1)].seconds) return false;
  return true;
}());

// 300 MB a rank: a whole replica's 640 MB of state does not fit; ZeRO or stages must shard it
constexpr plan::Budget tight{.bytes = 300 * kM, .rows = 64, .tokens_per_row = 16};
constexpr auto sharded = plan::static_search<Four, Adam>(fast, tight);
static_assert(sharded.too_big > 0 && sharded.fit > 0);
static_assert(sharded.best().policies.zero > 0 || sharded.best().pipeline > 1);
static_assert([] {
  for (int i = 0; i < sharded.count; ++i)
    if (sharded.plans[static_cast<std::size_t>(i)].bytes.total() > tight.bytes) return false;
  return true;
}());

// a slow data link: the gradients' all-reduce costs more than a pipeline's bubble
constexpr plan::Cluster slow_data{.ranks = 4, .macs_per_second = 1e12, .data = {1e-3, 1e7}, .pipeline = {1e-6, 1e12}, .tensor = {1e-6, 1e12}};
static_assert(plan::static_search<Four, Adam>(slow_data, {.bytes = std::int64_t{1} << 40, .rows = 64, .tokens_per_row = 16}).best().pipeline == 4);

// a declared pipeline keeps its two stages; its data-parallel degree is what is left
constexpr auto declared = plan::static_search<TwoStages>(fast, {.bytes = std::int64_t{1} << 40, .rows = 64, .tokens_per_row = 16});
static_assert([] {
  for (int i = 0; i < declared.count; ++i)
    if (declared.plans[static_cast<std::size_t>(i)].pipeline != 2 || declared.plans[static_cast<std::size_t>(i)].data != 2) return false;
  return true;
}());
static_assert(declared.best().bytes.state.device() == 20 * kM * 16);  // a stage's two blocks

// the split degree is the type's: the tensor-parallel model halves each rank's state and GEMMs,
// and pays its all-reduces on the path; merge() compares the two types' plans
constexpr auto split = plan::static_search<SplitFour, Adam>(fast, {.bytes = std::int64_t{1} << 40, .rows = 64, .tokens_per_row = 16});
static_assert(split.best().tensor == 2 && split.best().data * split.best().pipeline == 2);
static_assert(split.best().tensor_seconds > 0);
constexpr plan::Cluster slow_tensor{.ranks = 4, .macs_per_second = 1e12, .data = {1e-6, 1e12}, .pipeline = {1e-6, 1e12}, .tensor = {1e-3, 1e7}};
constexpr plan::Budget roomy_budget{.bytes = std::int64_t{1} << 40, .rows = 64, .tokens_per_row = 16};
// fits_v: the same answer as fits, from constants of static storage (a misfit's compile error, with
// its bytes, is compile_fail.does_not_fit_figures)
static_assert(plan::fits_v<Four, Adam, fast, roomy_budget> && plan::fits<Four, Adam>(fast, roomy_budget));
// (each search a constant of its own: two in one expression pass clang's step limit for one)
constexpr auto split_slow_tensor = plan::static_search<SplitFour, Adam>(slow_tensor, roomy_budget);
constexpr auto whole_slow_tensor = plan::static_search<Four, Adam>(slow_tensor, roomy_budget);
static_assert(plan::merge(split_slow_tensor, whole_slow_tensor).best().tensor == 1);
// a slow data link and a fast split group: tp2 x pp2 has half the bubble of four stages
constexpr auto split_slow_data = plan::static_search<SplitFour, Adam>(slow_data, roomy_budget);
constexpr auto whole_slow_data = plan::static_search<Four, Adam>(slow_data, roomy_budget);
static_assert(plan::merge(split_slow_data, whole_slow_data).best().tensor == 2);
// plan::fits reads a split model too (its entry states nothing)
static_assert(plan::fits<SplitFour>({.ranks = 2}, {.bytes = std::int64_t{1} << 40, .rows = 8}));
// a budget of 0 is the cluster's bytes per rank, in fits as in static_search
static_assert(plan::fits<Four>({.ranks = 1, .bytes_per_rank = std::int64_t{1} << 40}, {.bytes = 0, .rows = 8}));
// the model's own output is not pipeline traffic: a big last output costs a pipeline nothing more
struct BigOutput {
  Block a, b, c;
  Layer<10 * kM, 4 * kM, std::int64_t{1} << 30> d;
};
constexpr plan::Cluster slow_replicas{.ranks = 2, .macs_per_second = 1e12, .data = {1e-3, 1e6}, .pipeline = {1e-6, 1e9}};
static_assert(plan::static_search<BigOutput>(slow_replicas, roomy_budget).best().pipeline == 2);
static_assert(plan::static_search<Four>(slow_replicas, roomy_budget).best().pipeline == 2);
static_assert(plan::static_search<BigOutput>(slow_replicas, roomy_budget).best().pipeline_seconds ==
              plan::static_search<Four>(slow_replicas, roomy_budget).best().pipeline_seconds);  // the same boundary, a block's
// offload is not free: on a roomy budget the search keeps the state on the device
static_assert(!plan::static_search<Four, Adam>(fast, roomy_budget).best().policies.offload);

using Huge = Layer<std::int64_t{1} << 62, 1>;
struct HugeModel {
  Huge a;
};
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("static_search: bad clusters, budgets and costs are errors, never a price") {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto with = [](auto change) {
    plan::Cluster c = fast;
    change(c);
    return c;
  };
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(with([&](auto& c) { c.macs_per_second = nan; }), roomy_budget)),
                       doctest::Contains("plan::static_search: the cluster's macs_per_second"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(with([&](auto& c) { c.tensor.beta = nan; }), roomy_budget)),
                       doctest::Contains("links (data, pipeline, tensor, host)"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(with([&](auto& c) { c.data.alpha = -1; }), roomy_budget)),
                       doctest::Contains("links"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(with([&](auto& c) { c.data.beta = inf; }), roomy_budget)),
                       doctest::Contains("links"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = -5, .rows = 64})), doctest::Contains("Budget::bytes must be 0"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<SplitFour>({.ranks = -1}, roomy_budget)), doctest::Contains("ranks must be at least 1"), Error);
  // a declared two-stage pipeline on 5 ranks: the world size, not "nothing fits"
  CHECK_THROWS_WITH_AS((plan::static_search<TwoStages>({.ranks = 5}, roomy_budget)), doctest::Contains("use a multiple of 2"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<TwoStages>({.ranks = 5}, {.rows = 8})), doctest::Contains("use a multiple of 2"), Error);
  // nothing to try: rows that divide into no replica count; a negative micro-batch count
  CHECK_THROWS_WITH_AS((plan::static_search<Four>({.ranks = 8}, {.rows = 7}, {.pipelines = false})),
                       doctest::Contains("no combination to try on 8 ranks"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, roomy_budget, {.micro_batches = {1, -1, 0, 0, 0}})),
                       doctest::Contains("micro_batches must hold counts from 1 to 65536"), Error);
  // a count listed twice is tried once
  CHECK(plan::static_search<Four>(fast, roomy_budget, {.micro_batches = {2, 2, 0, 0, 0}}).tried ==
        plan::static_search<Four>(fast, roomy_budget, {.micro_batches = {2, 0, 0, 0, 0}}).tried);
  // more ranks or micro-batches than the planner counts: an error, not a wrapped answer
  CHECK_THROWS_WITH_AS((plan::static_search<Four>({.ranks = 2147483647}, {.rows = 2147483647})), doctest::Contains("at most 65536"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>({.ranks = 2}, {.rows = std::int64_t{1} << 31}, {.micro_batches = {1 << 30, 0, 0, 0, 0}})),
                       doctest::Contains("counts from 1 to 65536"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>({.ranks = 8}, {.rows = std::int64_t{1} << 40, .tokens_per_row = std::int64_t{1} << 50})),
                       doctest::Contains("past what 64 bits count"), Error);
  // costs past 64-bit sums: an error, not a wrapped count that fits
  CHECK_THROWS_WITH_AS((plan::static_search<HugeModel>(fast, roomy_budget)), doctest::Contains("strategy::Cost is out of range"), Error);
  CHECK_THROWS_WITH_AS((plan::fits<HugeModel>(fast, roomy_budget)), doctest::Contains("strategy::Cost is out of range"), Error);
}


TEST_CASE("static_search: at run time, nothing that fits and nonsense are errors that say so") {
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 100, .rows = 64, .tokens_per_row = 16})),
                       doctest::Contains("no combination of the"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 100, .rows = 64, .tokens_per_row = 16})),
                       doctest::Contains("more: add ranks or memory"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>({.ranks = 0}, roomy_budget)), doctest::Contains("the cluster's ranks must be at least 1"),
                       Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 1, .rows = 0})),
                       doctest::Contains("Budget::rows (the global batch) must be from 1 to 2^50"), Error);
  // each field of the budget is named alone
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 1, .rows = 8, .micro_batches = 0})),
                       doctest::Contains("Budget::micro_batches must be at least 1"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 1, .rows = 8, .tokens_per_row = 0})),
                       doctest::Contains("Budget::tokens_per_row must be from 1 to 2^50"), Error);
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, {.bytes = 1, .rows = 8, .optimizer_slots = 65})),
                       doctest::Contains("Budget::optimizer_slots (the optimizer's state slots an element) must be from 0 to 64"), Error);
  // the reduction's buckets take communication.max_splits' range: up to 2^20, where the key allows it
  CHECK_THROWS_WITH_AS((plan::static_search<Four>(fast, roomy_budget, {.buckets = (1 << 20) + 1})),
                       doctest::Contains("StaticSearchOptions::buckets (communication.max_splits) must be from 1 to 2^20"), Error);
  CHECK(plan::static_search<Four>(fast, roomy_budget, {.buckets = 1 << 20}).count > 0);
  CHECK_THROWS_WITH_AS((plan::static_search<SplitFour>({.ranks = 3}, roomy_budget)), doctest::Contains("use a multiple of 2"), Error);
  // the same answer at run time as at compile time
  const auto r = plan::static_search<Four, Adam>(fast, tight);
  CHECK(r.count == sharded.count);
  CHECK(r.best().seconds == sharded.best().seconds);
  // the best plan as the run-time candidate: its keys run it
  const auto c = sharded.best().candidate();
  CHECK(c.data * c.pipeline == 4);
  CHECK(c.str().find("dp") == 0);
  const auto keys = c.keys();
  CHECK(std::any_of(keys.begin(), keys.end(), [](const auto& kv) { return kv.first == "zero.level"; }));
}

namespace {
// A model of built-in layers, and twins of it: the right one, one whose sum is off, one whose sum
// is right but split differently, and one with a unit too many.
struct Net {
  nn::Linear a{8, 16};
  nn::ReLU r;
  nn::Linear b{16, 4};
};
using Free = Layer<0, 0>;  // a layer of no parameters (the ReLU's stand-in)
struct NetTwin {
  Layer<8 * 16 + 16, 64> a;
  Free r;
  Layer<16 * 4 + 4, 16> b;
};
struct OffByBias {
  Layer<8 * 16, 64> a;
  Free r;
  Layer<16 * 4 + 4, 16> b;
};
struct Shifted {
  Layer<8 * 16 + 16 + 4, 64> a;
  Free r;
  Layer<16 * 4, 16> b;
};
struct Three {
  Layer<100, 64> a;
  Layer<44, 64> m;
  Layer<16 * 4 + 4, 16> b;
};
}  // namespace

namespace {
// A model of built-in layers whose sizes are in their types: planned at compile time as it is.
struct SizedNet {
  nn::SizedLinear<32, 64> in;
  nn::SizedReLU<64> a;
  nn::SizedLinear<64, 64> hidden;
  nn::SizedGELU<64> b;
  nn::SizedLinear<64, 10> out;
};
struct Plain {  // SizedNet by plain layers
  nn::Linear in{32, 64};
  nn::ReLU a;
  nn::Linear hidden{64, 64};
  nn::GELU b;
  nn::Linear out{64, 10};
};
constexpr std::int64_t kSizedParameters = 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10;
constexpr plan::Cluster kFour{.ranks = 4};
constexpr plan::Budget kSizedBudget{.bytes = 1 << 20, .rows = 64};
// fits: the state is AdamW's 16 bytes an element on each replica; the activations each layer's output, 16 rows a replica
static_assert(plan::static_footprint<SizedNet>(kFour, kSizedBudget).state.device() == 16 * kSizedParameters);
// and the most one backward allocates over them: the gradient of a 64-wide input (a stranger's finding: 20% under the allocator's)
static_assert(plan::static_footprint<SizedNet>(kFour, kSizedBudget).activations == 4 * (64 + 64 + 64 + 64 + 10 + 64) * 16);
static_assert(plan::fits_v<SizedNet, Policies<>, kFour, kSizedBudget>);
// and the whole search
constexpr auto sized = plan::static_search<SizedNet>(kFour, {.bytes = 1 << 20, .rows = 64});
static_assert(sized.count > 0 && sized.best().data * sized.best().pipeline == 4);
}  // namespace

TEST_CASE("nn::SizedLinear: the model plans at compile time with no twin, is its own twin, and trains as nn::Linear does") {
  const SizedNet sized_net;
  SizedNet counted;
  CHECK(nn::parameter_count(counted) == kSizedParameters);
  CHECK_NOTHROW(plan::check_twin(sized_net, SizedNet{}));
  CHECK_NOTHROW(plan::check_twin(Plain{}, SizedNet{}));  // the same model, by its plain layers
  // one step each from the same seed: the same losses and parameters
  Tensor x = test::cpu().empty({8, 32}, DType::kF32), y = test::cpu().empty({8}, DType::kI32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.span<float>()[i] = static_cast<float>(uniform01(3, i) - 0.5);
  for (std::int64_t i = 0; i < 8; ++i) y.span<std::int32_t>()[i] = static_cast<std::int32_t>(i % 10);
  Trainer<SizedNet, optim::AdamW> a(test::cpu(), Config{}, SizedNet{}, optim::AdamW({.lr = 0.01}), {.seed = 7});
  Trainer<Plain, optim::AdamW> b(test::cpu(), Config{}, Plain{}, optim::AdamW({.lr = 0.01}), {.seed = 7});
  for (int s = 0; s < 3; ++s) CHECK(a.step({x, y}) == b.step({x, y}));
  CHECK(test::flat_params(a.model()) == test::flat_params(b.model()));
  // the compile-time activations are the allocator's peak in a step of 8 rows
  CHECK(test::peak_during(test::cpu().id(), MemoryCategory::kActivations, [&] { (void)a.step({x, y}); }) ==
        plan::static_footprint<SizedNet>({.ranks = 1}, {.rows = 8}).activations);
}

namespace {
// Megatron's MLP of sized layers inside a split: column- then row-parallel, as nn::Linear splits
struct SplitSized {
  nn::SizedLinear<16, 16> in;
  Split<2, nn::SizedLinear<16, 32>, nn::SizedGELU<32>, nn::SizedLinear<32, 16>> mlp;
  nn::SizedLinear<16, 5> out;
};
struct FlatSized {  // the same layers, unsplit: the one device's model
  nn::SizedLinear<16, 16> in;
  nn::SizedLinear<16, 32> fc;
  nn::SizedGELU<32> act;
  nn::SizedLinear<32, 16> proj;
  nn::SizedLinear<16, 5> out;
};
}  // namespace

TEST_CASE("nn::SizedLinear in an epl::Split shards as nn::Linear does: 2 ranks train as one device") {
  Tensor x = test::cpu().empty({8, 16}, DType::kF32), y = test::cpu().empty({8}, DType::kI32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.span<float>()[i] = static_cast<float>(uniform01(5, i) - 0.5);
  for (std::int64_t i = 0; i < 8; ++i) y.span<std::int32_t>()[i] = static_cast<std::int32_t>(i % 5);
  std::vector<double> one;
  {
    Trainer<FlatSized, optim::AdamW> t(test::cpu(), Config{}, FlatSized{}, optim::AdamW({.lr = 0.01}), {.seed = 9});
    for (int s = 0; s < 3; ++s) one.push_back(t.step({x, y}));
  }
  std::vector<std::vector<double>> two(2);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 450 + c.rank());
    Trainer<SplitSized, optim::AdamW> t(ctx, Config{}, SplitSized{}, optim::AdamW({.lr = 0.01}), {.seed = 9});
    CHECK(t.mesh().tensor_size() == 2);
    for (int s = 0; s < 3; ++s) two[static_cast<std::size_t>(c.rank())].push_back(t.step({x, y}));
  });
  for (const auto& losses : two) CHECK(test::max_rel_diff(losses, one) < 1e-5);
  CHECK(one.back() < one.front());
}

namespace {
// Two declared stages of sized layers, the second the busier (in its state and its activations):
// the rank a static price's footprint is
using SizedStages = Pipeline<Replicate<1, nn::SizedLinear<8, 16>, nn::SizedReLU<16>>,
                             Replicate<1, nn::SizedLinear<16, 64>, nn::SizedReLU<64>, nn::SizedLinear<64, 10>>>;
}  // namespace

TEST_CASE("static_price: a pipeline's compile-time activations are its busiest rank's peak under GPipe, a bound under 1F1B and ZeroBubble") {
  // the second stage keeps the input it receives (16 floats a row, which its first Linear saves)
  // and its layers' outputs (64 + 64 + 10) for each micro-batch in flight, under GPipe all 4, and
  // one backward's input gradient (64 floats) over them. Priced without the input it receives,
  // GPipe was 22% under a stranger's measurement; with the output a stage sends on, 1F1B 12% over.
  // Under ZeroBubble a B pass leaves each Linear's input and output gradient for W: priced without
  // them, a stranger's plans peaked up to 43% over, past the budget a search had fitted them to.
  constexpr std::int64_t kRows = 16;
  const Tensor x = test::random<float>({kRows, 8}, 3), y = test::ids({kRows}, 10, 4);
  const std::pair<const char*, int> runs[] = {{"PreferForward", 4}, {"PreferBackward", 4}, {"ZeroBubble", 1}, {"ZeroBubble", 4}};
  for (const auto& run : runs) {  // not a structured binding: clang 14 does not capture one in CAPTURE
    const std::string name = run.first;
    const int micro_batches = run.second;
    const auto* schedule = strategy::find_schedule(name);
    CAPTURE(name);
    CAPTURE(micro_batches);
    const plan::Combination c{.data = 1, .pipeline = 2, .micro_batches = micro_batches, .schedule = schedule};
    const auto priced = plan::static_price<SizedStages>({.ranks = 2}, {.rows = kRows}, c);
    Config cfg;
    for (const auto& [key, value] : priced.candidate().keys()) cfg.set_text(key, value);
    std::vector<std::int64_t> peak(2);
    comm::run_threads(2, [&](comm::ThreadCommunicator& comm) {
      Context ctx(comm, 520 + comm.rank());  // each rank's own device (its memory accounted apart)
      Trainer<SizedStages, optim::AdamW> t(ctx, cfg, SizedStages{}, optim::AdamW({}));
      t.step({x, y});
      peak[static_cast<std::size_t>(comm.rank())] = test::peak_during(ctx.cpu().id(), MemoryCategory::kActivations, [&] { t.step({x, y}); });
    });
    CAPTURE(peak[0]);
    CAPTURE(peak[1]);
    if (schedule->name == "PreferForward") {
      CHECK(priced.bytes.activations == 4 * ((16 + 64 + 64 + 10) * 4 + 64) * 4);
      CHECK(peak[1] == priced.bytes.activations);
    } else {  // 1F1B: the second stage holds one micro-batch, priced as the first stage's two; ZeroBubble a bound
      CHECK(peak[1] <= priced.bytes.activations);
      CHECK(peak[1] * 2 >= priced.bytes.activations);
    }
  }
}

namespace {
// A stranger's model of sized layers: under gradient_checkpoint.type = "auto" three segments, the
// first two recomputed
struct Widths {
  nn::SizedLinear<16, 48> l0;
  nn::SizedReLU<48> a0;
  nn::SizedLinear<48, 96> l1;
  nn::SizedGELU<96> a1;
  nn::SizedLinear<96, 24> l2;
  nn::SizedReLU<24> a2;
  nn::SizedLinear<24, 64> l3;
  nn::SizedGELU<64> a3;
  nn::SizedLinear<64, 10> l4;
};
constexpr plan::Combination kRecomputed = [] {
  plan::Combination c{.data = 1};
  c.policies.recompute = true;
  return c;
}();
// recompute saves memory at compile time too: priced by keeping every unit's output and one
// unit's activations again, it cost more than no recompute (21,312 bytes against 18,240)
static_assert(plan::static_price<Widths>({.ranks = 1}, {.rows = 8}, kRecomputed).bytes.activations <
              plan::static_price<Widths>({.ranks = 1}, {.rows = 8}, {.data = 1}).bytes.activations);
}  // namespace

TEST_CASE("static_price: recompute's activations are the step's peak, walked piece by piece as plan::estimate walks them") {
  // 8 rows on one rank: each segment's input kept, the last segment's activations, and the peak
  // while the middle segment runs its forward again under its output's gradient
  constexpr std::int64_t kRows = 8;
  const Tensor x = test::random<float>({kRows, 16}, 11), y = test::ids({kRows}, 10, 12);
  const auto priced = plan::static_price<Widths>({.ranks = 1}, {.rows = kRows}, kRecomputed);
  Config cfg;
  for (const auto& [key, value] : priced.candidate().keys()) cfg.set_text(key, value);
  CHECK(cfg.peek<std::string>("gradient_checkpoint.type") == "auto");
  Trainer<Widths, optim::AdamW> t(test::cpu(), cfg, Widths{}, optim::AdamW({}));
  t.step({x, y});
  const std::int64_t measured = test::peak_during(test::cpu().id(), MemoryCategory::kActivations, [&] { t.step({x, y}); });
  CHECK(measured == 15'680);
  CHECK(priced.bytes.activations == measured);
  // the run-time planner over the same costs walks the same pieces
  const Widths model;
  const auto estimated = plan::estimate<Widths, Policies<>>(model, plan::static_profile(model, {.ranks = 1}, 1), priced.candidate(),
                                                            {.ranks = 1}, kRows, optim::AdamW::kStateSlots);
  CHECK(estimated.activations == measured);
}

namespace {
// Narrow and wide layers by turns: the gradients the backward holds show in its peak
struct Narrow {
  nn::SizedLinear<16, 128> l0;
  nn::SizedReLU<128> a0;
  nn::SizedLinear<128, 16> l1;
  nn::SizedGELU<16> a1;
  nn::SizedLinear<16, 160> l2;
  nn::SizedReLU<160> a2;
  nn::SizedLinear<160, 8> l3;
  nn::SizedGELU<8> a3;
  nn::SizedLinear<8, 200> l4;
  nn::SizedLinear<200, 10> l5;
};
}  // namespace

TEST_CASE("plan::estimate and static_price: the gradients a backward holds, on one rank under recompute and on two stages under 1F1B") {
  // Walked without them, the run-time planner priced these 3.3% and 11.3% under the step's peak:
  // a piece's caller holds the gradient it passed until the piece's backward ends (the last chunk's
  // the loss's, the gradient of the model's output), and the output a chunk sends on left its
  // activations when it was sent, not again in its backward.
  constexpr std::int64_t kRows = 16;
  const Tensor x = test::random<float>({kRows, 16}, 13), y = test::ids({kRows}, 10, 14);
  plan::Combination recomputed{.data = 1};
  recomputed.policies.recompute = true;
  const plan::Combination stages{.data = 1, .pipeline = 2, .micro_batches = 4, .schedule = strategy::find_schedule("PreferBackward")};
  const std::pair<plan::Combination, std::int64_t> runs[] = {{recomputed, 34'432}, {stages, 13'568}};
  for (const auto& run : runs) {
    const plan::Combination c = run.first;
    const int ranks = c.pipeline;
    const plan::Cluster cluster{.ranks = ranks};
    const auto priced = plan::static_price<Narrow>(cluster, {.rows = kRows}, c);
    CAPTURE(priced.candidate().str());
    Config cfg;
    for (const auto& [key, value] : priced.candidate().keys()) cfg.set_text(key, value);
    std::vector<std::int64_t> peak(static_cast<std::size_t>(ranks));
    comm::run_threads(ranks, [&](comm::ThreadCommunicator& comm) {
      Context ctx(comm, 560 + comm.rank());
      Trainer<Narrow, optim::AdamW> t(ctx, cfg, Narrow{}, optim::AdamW({}));
      t.step({x, y});
      peak[static_cast<std::size_t>(comm.rank())] = test::peak_during(ctx.cpu().id(), MemoryCategory::kActivations, [&] { t.step({x, y}); });
    });
    const std::int64_t measured = *std::max_element(peak.begin(), peak.end());
    CHECK(measured == run.second);
    CHECK(priced.bytes.activations == measured);  // the busier rank: the first stage, its state the larger too
    const Narrow model;
    const auto estimated = plan::estimate<Narrow, Policies<>>(model, plan::static_profile(model, cluster, 1), priced.candidate(), cluster,
                                                              kRows, optim::AdamW::kStateSlots);
    CHECK(estimated.activations == measured);
  }
}

namespace {
// A stranger's: wide and narrow by turns, the first chunk the heaviest
struct Turns {
  nn::SizedLinear<16, 256> l0;
  nn::SizedReLU<256> a0;
  nn::SizedLinear<256, 8> l1;
  nn::SizedGELU<8> a1;
  nn::SizedLinear<8, 512> l2;
  nn::SizedReLU<512> a2;
  nn::SizedLinear<512, 32> l3;
  nn::SizedGELU<32> a3;
  nn::SizedLinear<32, 10> l4;
};
}  // namespace

TEST_CASE("static_price: Interleaved walks each rank's schedule over its chunks, as plan::estimate does") {
  // 2 ranks of 2 chunks, 4 micro-batches of 8 rows. Priced as a rank's chunks in equal shares times
  // the warm-up's micro-batches, a stranger's plans of uneven chunks were up to 28.6% under their
  // peak, and static_search fitted them to budgets they then broke.
  constexpr std::int64_t kRows = 32;
  const Tensor x = test::random<float>({kRows, 16}, 15), y = test::ids({kRows}, 10, 16);
  const plan::Combination c{.data = 1, .pipeline = 2, .micro_batches = 4, .schedule = strategy::find_schedule("Interleaved"), .virtual_stages = 2};
  const auto priced = plan::static_price<Turns>({.ranks = 2}, {.rows = kRows}, c);
  Config cfg;
  for (const auto& [key, value] : priced.candidate().keys()) cfg.set_text(key, value);
  std::vector<std::int64_t> peak(2);
  comm::run_threads(2, [&](comm::ThreadCommunicator& comm) {
    Context ctx(comm, 580 + comm.rank());
    Trainer<Turns, optim::AdamW> t(ctx, cfg, Turns{}, optim::AdamW({}));
    t.step({x, y});
    peak[static_cast<std::size_t>(comm.rank())] = test::peak_during(ctx.cpu().id(), MemoryCategory::kActivations, [&] { t.step({x, y}); });
  });
  CAPTURE(peak[0]);
  CAPTURE(peak[1]);
  CHECK(peak[0] == 166'912);  // the first rank, whose state is the larger too: the plan's
  CHECK(priced.bytes.activations == peak[0]);
  const Turns model;
  const auto estimated = plan::estimate<Turns, Policies<>>(model, plan::static_profile(model, {.ranks = 2}, 1), priced.candidate(),
                                                           {.ranks = 2}, kRows, optim::AdamW::kStateSlots);
  CHECK(estimated.activations == std::max(peak[0], peak[1]));
}

namespace {
// A stranger's model of sized layers, uneven widths: cut into 4 chunks, each rank holds two
struct Uneven4 {
  nn::SizedLinear<16, 48> l0;
  nn::SizedReLU<48> r0;
  nn::SizedLinear<48, 40> l1;
  nn::SizedReLU<40> r1;
  nn::SizedLinear<40, 56> l2;
  nn::SizedReLU<56> r2;
  nn::SizedLinear<56, 24> l3;
  nn::SizedReLU<24> r3;
  nn::SizedLinear<24, 64> l4;
  nn::SizedReLU<64> r4;
  nn::SizedLinear<64, 10> l5;
};
// the Interleaved combination below, priced in a constant expression (the schedule's actions are one)
constexpr plan::Combination kInterleavedZero2 = [] {
  plan::Combination c{.data = 2, .pipeline = 2, .micro_batches = 4, .schedule = strategy::find_schedule("Interleaved"), .virtual_stages = 2};
  c.policies.zero = 2;
  return c;
}();
static_assert(plan::static_price<Uneven4>({.ranks = 4}, {.rows = 32, .max_splits = 8}, kInterleavedZero2).bytes.in_flight.gradients == 37'152);
}  // namespace

TEST_CASE("static_price: ZeRO-2's gradient blocks under Interleaved follow the schedule's order of the chunks' backward passes") {
  // 2 replicas x 2 ranks of 2 chunks each, 4 micro-batches, blocks of an eighth of a rank's
  // parameters: a rank reduces one chunk's blocks for two micro-batches, then the other's. Priced
  // in the arena's order (the chunks one after the other, a pass a micro-batch) the compile-time
  // planner said 27,276 bytes where the step held 37,248 (27% under); it walks the schedule's
  // actions now, as the run-time planner does: 37,152 (the constant expression above). Within 1%:
  // the compile-time layout counts no alignment (state bytes alike).
  constexpr std::int64_t kRows = 32;
  const Tensor x = test::random<float>({kRows, 16}, 5), y = test::ids({kRows}, 10, 6);
  const auto priced = plan::static_price<Uneven4>({.ranks = 4}, {.rows = kRows, .max_splits = 8}, kInterleavedZero2);
  Config cfg;
  for (const auto& [key, value] : priced.candidate().keys()) cfg.set_text(key, value);
  cfg.set_text("communication.max_splits", "8");
  std::vector<std::int64_t> gradients(4);
  comm::run_threads(4, [&](comm::ThreadCommunicator& comm) {
    Context ctx(comm, 540 + comm.rank());
    Trainer<Uneven4, optim::AdamW, Policies<Zero<2>>> t(ctx, cfg, Uneven4{}, optim::AdamW({}));
    const auto shard = t.data_shard();
    const Batch b{x.slice(shard.first_of(kRows), shard.first_of(kRows) + shard.rows_of(kRows)),
                  y.slice(shard.first_of(kRows), shard.first_of(kRows) + shard.rows_of(kRows))};
    t.step(b);
    gradients[static_cast<std::size_t>(comm.rank())] = test::peak_during(ctx.cpu().id(), MemoryCategory::kGradients, [&] { t.step(b); });
  });
  const std::int64_t measured = *std::max_element(gradients.begin(), gradients.end());
  CAPTURE(measured);
  CHECK(static_cast<double>(priced.bytes.in_flight.gradients) == doctest::Approx(static_cast<double>(measured)).epsilon(0.01));
}

namespace {
// A Residual and a Recompute boundary of sized layers: each one unit, its parts' costs summed
struct Composite {
  nn::SizedLinear<32, 64> in;
  nn::Residual<nn::SizedLinear<64, 64>, nn::SizedGELU<64>> res;
  Recompute<nn::SizedLinear<64, 64>, nn::SizedReLU<64>> again;
  nn::SizedLinear<64, 10> out;
};
static_assert(strategy::static_cost_of<nn::Residual<nn::SizedLinear<64, 64>, nn::SizedGELU<64>>>().parameters == 64 * 64 + 64);
static_assert(plan::static_search<Composite>(kFour, {.bytes = 1 << 20, .rows = 64}).count > 0);
static_assert(plan::fits_v<Composite, Policies<>, kFour, kSizedBudget>);
}  // namespace

TEST_CASE("nn::Sized layers in a Residual or a Recompute plan as one unit; check_twin compares the strategies too") {
  CHECK_NOTHROW(plan::check_twin(Composite{}, Composite{}));
  // a twin without the model's split, or with a split the model lacks, plans other plans: named
  CHECK_THROWS_WITH_AS(plan::check_twin(SplitSized{}, FlatSized{}), doctest::Contains("is split 1 way over 1 pipeline stage, but the model"),
                       Error);
  CHECK_THROWS_WITH_AS(plan::check_twin(FlatSized{}, SplitSized{}), doctest::Contains("give the twin the model's epl::Split"), Error);
}

TEST_CASE("check_twin: a twin that describes the model passes; one whose parameters differ, in all or by unit, is named") {
  const Net net;
  CHECK_NOTHROW(plan::check_twin(net, NetTwin{}));
  CHECK_THROWS_WITH_AS(plan::check_twin(net, OffByBias{}), doctest::Contains("states 196 parameters, but the model"), Error);
  CHECK_THROWS_WITH_AS(plan::check_twin(net, OffByBias{}), doctest::Contains("has 212"), Error);
  CHECK_THROWS_WITH_AS(plan::check_twin(net, Shifted{}), doctest::Contains("unit 0 of the model"), Error);
  CHECK_THROWS_WITH_AS(plan::check_twin(net, Shifted{}), doctest::Contains("(the unit of a.weight) has 144 parameters, but the twin's unit 0 states 148"),
                       Error);
  CHECK_THROWS_WITH_AS(plan::check_twin(net, Three{}), doctest::Contains("has 3 units that hold parameters, but the model"), Error);
}
namespace {
// Eight equal sized blocks: a model both searches price, the run-time one from a profile of its
// static costs, so both go through one candidate loop and one formula (plan::price)
struct Eight {
  nn::SizedLinear<256, 256> a, b, c, d, e, f, g, h;
};
// uneven units (a stranger's): Interleaved's slowest chunk is not half a stage
struct Uneven {
  nn::SizedLinear<32, 64> a;
  nn::SizedReLU<64> b;
  nn::SizedLinear<64, 64> c;
  nn::SizedReLU<64> d;
  nn::SizedLinear<64, 10> e;
};
template <class Model, int K>
void same_prices(const plan::Cluster& cluster, bool recompute) {
  constexpr std::int64_t rows = 64;
  using Adam = Policies<Zero<3>, Offload<offload::V0>>;
  const auto compile_time = plan::static_search<Model, Adam, K>(cluster, {.bytes = std::int64_t{1} << 40, .rows = rows},
                                                                 {.micro_batches = {1, 2, 4, 8}, .recompute = recompute});
  const auto profile = plan::static_profile(Model{}, cluster, 1);
  const auto run_time = plan::search<Model, Adam>(Model{}, profile, cluster, rows, 2, {.micro_batches = {1, 2, 4, 8}, .recompute = recompute});
  // the same combinations tried, the same refused
  REQUIRE(compile_time.count == compile_time.fit);
  CHECK(compile_time.count < K);  // all kept
  CHECK(run_time.plans.size() == static_cast<std::size_t>(compile_time.count));
  CHECK(run_time.tried == compile_time.tried);
  CHECK(run_time.refused == compile_time.refused);
  // each plan priced alike: compute, pipeline, data-parallel and offload times
  for (int i = 0; i < compile_time.count; ++i) {
    const auto& s = compile_time.plans[static_cast<std::size_t>(i)];
    const auto key = s.candidate().str();
    CAPTURE(key);
    const auto it = std::find_if(run_time.plans.begin(), run_time.plans.end(), [&](const plan::Estimate& e) { return e.candidate.str() == key; });
    REQUIRE(it != run_time.plans.end());
    CHECK(it->compute_seconds == doctest::Approx(s.compute_seconds).epsilon(1e-9));
    CHECK(it->pipeline_seconds == doctest::Approx(s.pipeline_seconds).epsilon(1e-9));
    CHECK(it->data_seconds == doctest::Approx(s.data_seconds).epsilon(1e-9));
    CHECK(it->host_seconds == doctest::Approx(s.host_seconds).epsilon(1e-9));
    CHECK(it->bubble == doctest::Approx(s.bubble).epsilon(1e-12));
    CHECK(it->seconds == doctest::Approx(s.seconds).epsilon(1e-9));
  }
  // so the rankings agree, ties aside: the k-th fastest of each is as fast
  for (int i = 0; i < compile_time.count; ++i)
    CHECK(run_time.plans[static_cast<std::size_t>(i)].seconds ==
          doctest::Approx(compile_time.plans[static_cast<std::size_t>(i)].seconds).epsilon(1e-9));
  CHECK(run_time.best().seconds == doctest::Approx(compile_time.best().seconds).epsilon(1e-9));
}
}  // namespace

TEST_CASE("the run-time and compile-time searches: one candidate loop and one formula, so one ranking on a model both price") {
  // parameters that fill the arena's alignment: every figure alike, the reduction's too
  same_prices<Eight, 512>({.ranks = 4, .macs_per_second = 1e9, .data = {1e-4, 1e9}, .pipeline = {1e-5, 1e9}}, false);
  same_prices<Eight, 512>({.ranks = 8, .macs_per_second = 1e10, .data = {1e-3, 1e8}, .pipeline = {1e-6, 1e10}}, false);
  // and with recompute: both run again the segments gradient_checkpoint.type = "auto" chooses
  same_prices<Eight, 512>({.ranks = 4, .macs_per_second = 1e9, .data = {1e-4, 1e9}, .pipeline = {1e-5, 1e9}}, true);
  same_prices<Eight, 1024>({.ranks = 8, .macs_per_second = 1e10, .data = {1e-3, 1e8}, .pipeline = {1e-6, 1e10}}, true);
  // uneven units whose arena pads them (free data and host links: the padding's bytes cost nothing), and
  // recompute refused where a rank has no chunk of 2 units to cut, as plan::make refuses it
  same_prices<Uneven, 512>({.ranks = 4, .macs_per_second = 50e9, .data = {0, 1e18}, .pipeline = {0, 1e18}, .host = {0, 1e18}}, false);
  same_prices<Uneven, 512>({.ranks = 4, .macs_per_second = 50e9, .data = {0, 1e18}, .pipeline = {0, 1e18}, .host = {0, 1e18}}, true);
  {
    const auto found = plan::static_search<Uneven, Policies<Zero<3>, Offload<offload::V0>>, 512>({.ranks = 4}, {.bytes = 1 << 20, .rows = 64});
    CHECK(found.refused > 0);
    const auto profile = plan::static_profile(Uneven{}, plan::Cluster{.ranks = 4}, 1);
    for (int i = 0; i < found.count; ++i)  // every plan it keeps is one the run-time estimate accepts
      CHECK_NOTHROW((void)plan::estimate<Uneven, Policies<Zero<3>, Offload<offload::V0>>>(
          Uneven{}, profile, found.plans[static_cast<std::size_t>(i)].candidate(), {.ranks = 4}, 64, 2));
  }
  // static_price names what makes a combination one the search never tries
  const plan::Cluster four{.ranks = 4};
  const plan::Budget batch{.rows = 64};
  const auto* zb = strategy::find_schedule("ZeroBubble");
  const auto* il = strategy::find_schedule("Interleaved");
  CHECK(plan::static_price<Uneven>(four, batch, {.data = 4}).seconds > 0);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, {.data = 2}),
                       doctest::Contains("(2 x 1 x 1 = 2) is not the cluster's 4 ranks: give degrees whose product is 4"), Error);
  // a combination with its policy axes set (policies.zero, .offload, .recompute, .amp)
  auto with = [](plan::Combination c, auto set) {
    set(c.policies);
    return c;
  };
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, with({.data = 4}, [](auto& p) { p.offload = true; })),
                       doctest::Contains("give policies.zero = 3"), Error);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, with({.data = 2, .pipeline = 2, .micro_batches = 4, .schedule = zb},
                                                                    [](auto& p) { p.zero = 2; })),
                       doctest::Contains("refuses ZeRO 2 and 3"), Error);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>({.ranks = 2}, batch, {.data = 1, .pipeline = 2, .micro_batches = 3, .schedule = il,
                                                                       .virtual_stages = 2}),
                       doctest::Contains("does not divide into 1 data-parallel replica x 3 micro-batches (the combination's micro_batches)"),
                       Error);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, {.data = 1, .pipeline = 4, .micro_batches = 4, .schedule = il,
                                                                 .virtual_stages = 2}),
                       doctest::Contains("the model has 5 units, fewer than the combination's 8 chunks (4 pipeline stages x 2 virtual stages)"),
                       Error);
  // recompute where a rank's chunk is one unit: nothing to cut, as the Trainer refuses (a stranger's finding: it was priced)
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, with({.data = 1, .pipeline = 4, .micro_batches = 4,
                                                                     .schedule = strategy::find_schedule("PreferBackward")},
                                                                    [](auto& p) { p.recompute = true; })),
                       doctest::Contains("policies.recompute needs a chunk of two units or more on every rank"), Error);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>({.ranks = 1}, batch, with({.data = 1}, [](auto& p) { p.zero = 1; })),
                       doctest::Contains("with one, give policies.zero = 0"), Error);
  // one replica offloads through stage 3: its device holds none of the state the host holds
  const auto offloaded = plan::static_price<Uneven>({.ranks = 1}, batch, with({.data = 1}, [](auto& p) {
                                                      p.zero = 3;
                                                      p.offload = true;
                                                    }));
  const auto kept = plan::static_price<Uneven>({.ranks = 1}, batch, {.data = 1});
  CHECK(offloaded.bytes.state.device() < kept.bytes.state.device());
  CHECK(offloaded.bytes.state.host_parameters > 0);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, {.data = 2, .pipeline = 2, .schedule = nullptr}),
                       doctest::Contains("no schedule"), Error);
  CHECK_THROWS_WITH_AS(plan::static_price<Uneven>(four, batch, with({.data = 4}, [](auto& p) { p.amp = true; })),
                       doctest::Contains("give policies.amp = false"), Error);
  CHECK_THROWS_WITH_AS(plan::static_calibrate<Uneven>(four, batch, {.data = 4}, 1e10), doctest::Contains("below 1e9"), Error);
  // the shared loop and formula check what they are given
  const int counts[] = {1, 2};
  CHECK_THROWS_WITH_AS(plan::for_each_combination({.ranks = 8, .tensor = 3, .rows = 64, .micro_batches = counts, .micro_batch_counts = 2},
                                                  [](const plan::Combination&) {}),
                       doctest::Contains("multiple of the split degree"), Error);
  CHECK_THROWS_WITH_AS(plan::for_each_combination({.ranks = 4, .rows = 0, .micro_batches = counts, .micro_batch_counts = 2},
                                                  [](const plan::Combination&) {}),
                       doctest::Contains("the rows 1 or more"), Error);
  CHECK_THROWS_WITH_AS(plan::for_each_combination({.ranks = 4, .rows = 64, .row_multiple = 0, .micro_batches = counts, .micro_batch_counts = 2},
                                                  [](const plan::Combination&) {}),
                       doctest::Contains("the row multiple 1 or more"), Error);
  // a row multiple leaves out the micro-batches of other rows: 64 rows on 4 replicas are 16 a
  // replica, in 1 or 2 micro-batches of 16 or 8 rows; a multiple of 16 keeps the first
  const int one_two[] = {1, 2};
  int sixteen = 0;
  const int with_multiple = plan::for_each_combination({.ranks = 4, .rows = 64, .row_multiple = 16, .micro_batches = one_two, .micro_batch_counts = 2,
                                                        .pipelines = false},
                                                       [&](const plan::Combination& c) { sixteen += c.data == 4 && c.micro_batches == 1; });
  CHECK(with_multiple == 1);
  CHECK(sixteen == 1);
  CHECK(plan::for_each_combination({.ranks = 4, .rows = 64, .micro_batches = one_two, .micro_batch_counts = 2, .pipelines = false},
                                   [](const plan::Combination&) {}) == 2);
  CHECK_THROWS_WITH_AS(plan::for_each_combination({.ranks = 4, .rows = 64, .micro_batch_counts = 4}, [](const plan::Combination&) {}),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(plan::price(four, {.data = 2, .pipeline = 2, .schedule = nullptr}, {}, 5), doctest::Contains("needs a schedule"), Error);
  CHECK_THROWS_WITH_AS(plan::price(four, {.pipeline = 0}, {}, 5), doctest::Contains("1 or more"), Error);
  CHECK_THROWS_WITH_AS(plan::price(four, {.data = 4}, {.gradient_bytes = -1e12}, 5), doctest::Contains("finite and 0 or more"), Error);
  CHECK_THROWS_WITH_AS(plan::price(four, {.data = 4}, {.chunk_seconds = std::nan("")}, 5), doctest::Contains("finite and 0 or more"), Error);
  CHECK_THROWS_WITH_AS(plan::price({.ranks = 8, .data = {1e-5, 0}}, {.data = 8}, {}, 5), doctest::Contains("links"), Error);
  CHECK_THROWS_WITH_AS((void)plan::dgx_a100(1, 3.0), doctest::Contains("at most 1"), Error);
  CHECK_THROWS_WITH_AS((void)plan::dgx_a100(1 << 28), doctest::Contains("1 to 8192"), Error);
  // a model whose static costs do not describe its run-time units is refused by name
  CHECK_THROWS_WITH_AS(plan::static_profile(SplitSized{}, plan::Cluster{.ranks = 2}, 1), doctest::Contains("runs as"), Error);
}
}

TEST_CASE("the policy axes: each home's values, tried where no axis refuses them, keyed, named and broadcast as the home says") {
  // what Policies<Zero<3>, Offload<V0>, Amp<BF16>> lets the searches try: every axis on
  constexpr policy::Choice most = policy::reach(policy::compiled<Policies<Zero<3>, Offload<offload::V0>, Amp<amp::BF16>>>(false));
  static_assert(policy::kAxes == 4 && most.zero == 3 && most.offload && most.recompute && most.amp);
  static_assert(!policy::reach(policy::compiled<Policies<>>(false)).offload && policy::reach(policy::compiled<Policies<>>(false)).recompute);
  auto tried = [&](policy::Layout l) {
    std::vector<std::string> names;
    policy::for_each_choice(most, l, [&](const policy::Choice& c) {
      CHECK_FALSE(policy::refusal(c, l));
      names.push_back(policy::label(c));
    });
    return names;
  };
  // one replica: no ZeRO stage but 3 with offload (its per-layer gathers stream the host's shards);
  // recompute and AMP each way, the first axis slowest
  CHECK(tried({.data = 1}) == std::vector<std::string>{"", " amp", " recompute", " recompute amp", " zero3 offload", " zero3 offload amp",
                                                       " zero3 offload recompute", " zero3 offload recompute amp"});
  // replicas: stages 0-3, offload only with stage 3: (4 + 1) x 2 x 2
  CHECK(tried({.data = 2}).size() == 20);
  // a schedule that splits backward refuses ZeRO 2 and 3 (and so offload): stages 0 and 1
  CHECK(tried({.data = 2, .pipeline = 2, .splits_backward = true}).size() == 8);
  CHECK(tried({.data = 2, .pipeline = 2, .splits_backward = false}).size() == 20);
  // the loop the searches share tries exactly those on each layout
  const int counts[] = {1};
  const int combinations = plan::for_each_combination(
      {.ranks = 2, .rows = 8, .micro_batches = counts, .micro_batch_counts = 1, .pipelines = false, .policies = most}, [](const plan::Combination&) {});
  CHECK(combinations == 20);  // dp2 only (no pipelines asked for)
  // what each refuses, by name
  policy::Choice c;
  c.offload = true;
  CHECK(std::string(policy::refusal(c, {.data = 2}).why).find("give policies.zero = 3") != std::string::npos);
  c.offload = false;
  c.zero = 4;
  CHECK(std::string(policy::refusal(c, {.data = 2}).why).find("must be 0 to 3") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)(plan::Candidate{.data = 2, .policies = c}.keys()), doctest::Contains("policies.zero = 4 is not a ZeRO stage"),
                       Error);
  c.zero = 3;
  CHECK(std::string(policy::refusal(c, {.data = 1}).why).find("or 3 with policies.offload") != std::string::npos);
  c.offload = true;
  CHECK_FALSE(policy::refusal(c, {.data = 1}));
  // every choice broadcasts as kAxes integers and comes back the same, keys and name alike
  policy::for_each_choice(most, {.data = 2}, [](const policy::Choice& each) {
    std::int64_t wire[policy::kAxes] = {};
    policy::encode(each, wire);
    const policy::Choice back = policy::decode(wire);
    CHECK(policy::label(back) == policy::label(each));
    std::vector<std::pair<std::string, std::string>> a, b;
    policy::append_keys(each, a);
    policy::append_keys(back, b);
    CHECK(a == b);
  });
  // a candidate's keys and options say its choice in each home's keys
  plan::Candidate cand{.data = 2};
  cand.policies.zero = 3;
  cand.policies.offload = true;
  cand.policies.recompute = true;
  const auto keys = cand.keys();
  auto value = [&](const std::string& key) {
    for (const auto& [k, v] : keys)
      if (k == key) return v;
    return std::string("(absent)");
  };
  CHECK(value("zero.level") == "v2");
  CHECK(value("offload.level") == "v0");
  CHECK(value("gradient_checkpoint.type") == "auto");
  CHECK(value("amp.level") == "");
  CHECK(cand.str() == "dp2 pp1 m1 zero3 offload recompute");
  const plan::PlanOptions o = cand.options();
  CHECK(o.policies.zero_level == std::optional<std::string>("v2"));
  CHECK(o.policies.offload_level == std::optional<std::string>("v0"));
  CHECK(o.policies.recompute == std::optional<std::string>("auto"));
  CHECK(o.policies.amp_level == std::optional<std::string>(""));
}
