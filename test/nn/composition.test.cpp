// User structs as layers: order of forward and backward, parameter walk, activations in the
// per-micro-batch context, and clear errors for bad shapes.
#include <limits>

#include "../helpers.hpp"

using namespace epl;
namespace nn = epl::nn;

namespace test_nn_composition {

namespace {
struct Recorder {  // records call order, passes data through
  std::vector<std::string>* log;
  std::string name;
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    log->push_back("f" + name);
    ctx.save(this, {});
    return x;
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    (void)ctx.restore(this);
    log->push_back("b" + name);
    return dy;
  }
};
struct Inner { Recorder b; Recorder c; };
struct Outer { Recorder a; Inner inner; Recorder d; };

struct Net { nn::Linear fc1; nn::ReLU act; nn::Linear fc2; };
Net net() { return {nn::Linear(4, 8), nn::ReLU{}, nn::Linear(8, 3)}; }

static_assert(nn::layer<Net>);
static_assert(nn::layer<nn::Linear>);
static_assert(nn::layer<Outer>);
static_assert(!nn::layer<int>);
struct NotALayer { int x; };
struct HasBadField { nn::Linear ok; NotALayer bad; };
static_assert(!nn::layer<NotALayer>);
static_assert(!nn::layer<HasBadField>);
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("aggregate: forward in field order, backward in reverse, recursively") {
  std::vector<std::string> log;
  Outer m{{&log, "a"}, {{&log, "b"}, {&log, "c"}}, {&log, "d"}};
  test::CpuPass ctx(test::cpu());
  Tensor y = nn::forward(m, ctx, test::random({2}, 1));
  nn::backward(m, ctx, y);
  CHECK(log == std::vector<std::string>{"fa", "fb", "fc", "fd", "bd", "bc", "bb", "ba"});
  CHECK(ctx.saved_count() == 0);
}

TEST_CASE("parameters: paths, count, deterministic materialize") {
  Net m = net();
  std::vector<std::string> names;
  nn::visit_parameters(m, [&](std::string_view n, nn::Parameter&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(nn::parameter_count(m) == 4 * 8 + 8 + 8 * 3 + 3);
  Net a = net(), b = net(), c = net();
  (void)param::materialize(a, test::cpu(), {.seed = 1});
  (void)param::materialize(b, test::cpu(), {.seed = 1});
  (void)param::materialize(c, test::cpu(), {.seed = 2});
  CHECK(test::values(a.fc1.weight.value) == test::values(b.fc1.weight.value));
  CHECK(test::values(a.fc1.weight.value) != test::values(c.fc1.weight.value));
  for (double w : test::values(a.fc1.weight.value)) CHECK(std::abs(w) <= 0.5);  // U(-1/sqrt(4), 1/sqrt(4))
  CHECK(a.fc1.weight.value.category() == MemoryCategory::kParameters);
  CHECK(a.fc1.weight.grad.category() == MemoryCategory::kGradients);
  nn::CausalSelfAttention attn(8, 2);
  names.clear();
  nn::visit_parameters(attn, [&](std::string_view n, nn::Parameter&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
}

TEST_CASE("activations live in the context: two micro-batches in flight through one model") {
  Net m = net();
  (void)param::materialize(m, test::cpu64(), {.dtype = DType::kF64, .seed = 4});
  Tensor x1 = test::random<double>({3, 4}, 1), x2 = test::random<double>({3, 4}, 2);
  // sequential reference
  auto grads = [&] {
    std::vector<double> g;
    nn::visit_parameters(m, [&](std::string_view, nn::Parameter& p) {
      auto v = test::values<double>(p.grad);
      g.insert(g.end(), v.begin(), v.end());
    });
    return g;
  };
  auto zero_grads = [&] { nn::for_each_parameter(m, [&](nn::Parameter& p) { test::cpu64().fill(p.grad, 0.0); }); };
  zero_grads();
  for (const Tensor* x : {&x1, &x2}) {
    test::Ctx64 ctx(test::cpu64());
    Tensor y = nn::forward(m, ctx, *x);
    nn::backward(m, ctx, y);
  }
  auto sequential = grads();
  // interleaved: both forwards first, then both backwards in the other order
  zero_grads();
  test::Ctx64 c1(test::cpu64()), c2(test::cpu64());
  Tensor y1 = nn::forward(m, c1, x1), y2 = nn::forward(m, c2, x2);
  CHECK(c1.saved_bytes() > 0);
  nn::backward(m, c2, y2);
  nn::backward(m, c1, y1);
  CHECK(test::max_rel_diff(grads(), sequential) < 1e-15);
}

namespace {
// Hooks that log each leaf whose backward is done (what gradient reduction starts from).
struct LogHooks {
  std::vector<std::string>* log;
  template <class L, class Ctx> void before_forward(L&, Ctx&) {}
  template <class L, class Ctx> void after_backward(L&, Ctx&) { log->push_back(std::is_same_v<L, nn::Linear> ? "linear" : "other"); }
};
}  // namespace

TEST_CASE("split backward: a B pass leaves weight gradients and the hooks for the W pass, which gives the whole backward's") {
  Net m = net();
  (void)param::materialize(m, test::cpu64(), {.dtype = DType::kF64, .seed = 4});
  const Tensor x = test::random<double>({3, 4}, 1);
  auto grads = [&] {
    std::vector<double> g;
    nn::for_each_parameter(m, [&](nn::Parameter& p) {
      auto v = test::values<double>(p.grad);
      g.insert(g.end(), v.begin(), v.end());
    });
    return g;
  };
  std::vector<std::string> log;
  LogHooks hooks{&log};
  using Pass = nn::Pass<device::CpuF64, LogHooks>;
  Pass whole(test::cpu64(), {}, &hooks);
  const Tensor dx_whole = nn::backward(m, whole, nn::forward(m, whole, x));
  const auto want = grads();
  CHECK(log == std::vector<std::string>{"linear", "other", "linear"});
  nn::for_each_parameter(m, [&](nn::Parameter& p) { test::cpu64().fill(p.grad, 0.0); });
  log.clear();
  Pass split(test::cpu64(), {}, &hooks);
  Pass::Deferred later;
  const Tensor y = nn::forward(m, split, x);
  split.defer_into(&later);
  const Tensor dx = nn::backward(m, split, y);  // B: the input gradient only
  CHECK(test::values<double>(dx) == test::values<double>(dx_whole));
  CHECK(log.empty());
  for (double g : grads()) CHECK(g == 0);
  CHECK(later.size() == 5);  // two Linears' weight work, three leaves' hooks
  split.run_deferred(later);  // W
  CHECK(later.empty());
  CHECK(log == std::vector<std::string>{"linear", "other", "linear"});
  CHECK(grads() == want);
}

TEST_CASE("backward out of order or without forward is a clear error") {
  Net m = net();
  (void)param::materialize(m, test::cpu());
  test::CpuPass ctx(test::cpu());
  CHECK_THROWS_WITH_AS(nn::backward(m, ctx, test::random({2, 3}, 1)), doctest::Contains("run forward on this context first"), Error);
  Tensor h = m.fc1.forward(ctx, test::random({2, 4}, 1));
  (void)m.act.forward(ctx, h);
  CHECK_THROWS_WITH_AS(m.fc1.backward(ctx, h), doctest::Contains("backward called out of order"), Error);
}

TEST_CASE("bad shapes name the layer and the expected shape") {
  test::CpuPass ctx(test::cpu());
  nn::Linear lin(4, 2);
  (void)param::materialize(lin, test::cpu());
  CHECK_THROWS_WITH_AS(lin.forward(ctx, test::random({3, 5}, 1)), doctest::Contains("Linear(4 -> 2) got input [3, 5]"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(10, 3), doctest::Contains("dim must be divisible by heads"), Error);
  nn::PositionEmbedding pos(4, 2);
  (void)param::materialize(pos, test::cpu());
  CHECK_THROWS_WITH_AS(pos.forward(ctx, test::random({1, 6, 2}, 1)), doctest::Contains("t <= 4"), Error);
  CHECK_THROWS_WITH_AS(nn::Dropout(1.0), doctest::Contains("must be in [0, 1)"), Error);
}

TEST_CASE("a negative or zero size names the layer; a default-constructed layer says how to construct it") {
  // the sizes were checked after the parameters' shapes were made: "negative extent -8 in a shape",
  // no layer named, and heads 0 was "not divisible" (a stranger's findings)
  CHECK_THROWS_WITH_AS(nn::Linear(6, -8), doctest::Contains("Linear(6, -8): both sizes must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::Mlp(8, -4), doctest::Contains("Mlp(dim 8, hidden -4): dim must be positive and hidden positive or 0"), Error);
  CHECK_THROWS_WITH_AS(nn::Mlp(-8), doctest::Contains("Mlp(dim -8, hidden 0)"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(16, 0), doctest::Contains("CausalSelfAttention(dim 16, heads 0): both must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(-16, 2), doctest::Contains("CausalSelfAttention(dim -16, heads 2): both must be positive"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(-3, 4), doctest::Contains("Embedding(-3, 4): both sizes must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::PositionEmbedding(4, -1), doctest::Contains("PositionEmbedding(4, -1): both sizes must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::LayerNorm(-2), doctest::Contains("LayerNorm(-2): the size must be positive"), Error);
  test::CpuPass ctx(test::cpu());
  nn::Linear empty;
  (void)param::materialize(empty, test::cpu());
  CHECK_THROWS_WITH_AS(empty.forward(ctx, test::random({4, 8}, 1)),
                       doctest::Contains("Linear() was default-constructed, with no sizes: construct it as Linear(in, out)"), Error);
  nn::LayerNorm no_norm;
  CHECK_THROWS_WITH_AS(no_norm.forward(ctx, test::random({4, 8}, 1)), doctest::Contains("LayerNorm() was default-constructed"), Error);
  nn::CausalSelfAttention no_attention;
  CHECK_THROWS_WITH_AS(no_attention.forward(ctx, test::random({1, 4, 8}, 1)), doctest::Contains("CausalSelfAttention() was default-constructed"),
                       Error);
  nn::Embedding no_table;
  CHECK_THROWS_WITH_AS(no_table.forward(ctx, test::ids({2, 3}, 5, 1)), doctest::Contains("Embedding() was default-constructed"), Error);
}

namespace {
struct Throws {  // a layer whose backward fails
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor&) { throw Error("Throws: no gradient here"); }
};
struct Forgets {  // a layer whose forward returns nothing
  template <class Ctx> Tensor forward(Ctx&, const Tensor&) { return {}; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct Narrows {  // returns a gradient one column short of its input's
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) { return ctx.empty({dy.dim(0), dy.dim(1) - 1}, dy.dtype()); }
};
struct KeepsSaved {  // saves its input and never restores it
  template <class Ctx> Tensor forward(Ctx& ctx, const Tensor& x) { ctx.save(this, {x}); return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct Stops {  // returns no input gradient
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor&) { return {}; }
};
struct Block { nn::Linear fc; nn::ReLU act; };
struct Deep { nn::Linear in; nn::Repeat<Block> blocks; Throws last; };
Deep deep(std::int64_t second_in) {
  std::vector<Block> blocks{Block{nn::Linear(6, 6), {}}, Block{nn::Linear(second_in, 6), {}}};
  return {nn::Linear(4, 6), nn::Repeat<Block>(std::move(blocks)), {}};
}
}  // namespace

TEST_CASE("an error leaving a layer names it by its path in the model, in forward and in backward") {
  Deep m = deep(5);
  (void)param::materialize(m, test::cpu());
  test::CpuPass ctx(test::cpu());
  try {
    (void)nn::forward(m, ctx, test::random({2, 4}, 1));
    FAIL("a Linear(5 -> 6) took a width of 6");
  } catch (Error& e) {
    CHECK(e.layer() == &m.blocks.layers[1].fc);  // the innermost layer it left
    CHECK(e.layer_key() == nn::layer_key<nn::Linear>());
    CHECK(std::string(e.what()).find("layer `") == std::string::npos);  // named only by the one that knows the model
    nn::name_layer(m, e);
    CHECK(std::string(e.what()).find("epl error at epl/nn/linear.hpp:") == 0);  // where it was raised, as before
    CHECK_MESSAGE(std::string(e.what()).find(": in the forward of layer `blocks.1.fc`: Linear(5 -> 6) got input [2, 6]") !=
                      std::string::npos, e.what());
    CHECK(e.detail().find("in the forward of layer `blocks.1.fc`: Linear(5 -> 6)") == 0);
    const std::string once = e.what();
    nn::name_layer(m, e);  // named once
    CHECK(std::string(e.what()) == once);
  }
  Deep ok = deep(6);
  (void)param::materialize(ok, test::cpu());
  test::CpuPass pass(test::cpu());
  const Tensor y = nn::forward(ok, pass, test::random({2, 4}, 1));
  try {
    (void)nn::backward(ok, pass, y);
    FAIL("Throws::backward returned");
  } catch (Error& e) {
    CHECK(e.layer() == &ok.last);
    nn::name_layer(ok, e);
    CHECK(std::string(e.what()).find("in the backward of layer `last`: Throws: no gradient here") != std::string::npos);
  }
  // a forward that returns an undefined tensor is named, not the next layer for its input [] (a stranger's finding)
  struct Gap {
    nn::Linear a;
    Forgets b;
    nn::Linear head;
  } gap{nn::Linear(4, 4), {}, nn::Linear(4, 2)};
  (void)param::materialize(gap, test::cpu());
  test::CpuPass gap_pass(test::cpu());
  try {
    (void)nn::forward(gap, gap_pass, test::random({2, 4}, 1));
    FAIL("Forgets::forward's undefined tensor went on");
  } catch (Error& e) {
    nn::name_layer(gap, e);
    CHECK_MESSAGE(std::string(e.what()).find("in the forward of layer `b`: its forward returned an undefined tensor") != std::string::npos,
                  e.what());
  }
  // A backward that returns a gradient of the wrong shape, or does not take back what its
  // forward saved, is named, not the layer before it for what it then gets (a stranger's finding)
  const auto blamed = [](auto& model, const std::string& expected) {
    (void)param::materialize(model, test::cpu());
    test::CpuPass pass(test::cpu());
    const Tensor y = nn::forward(model, pass, test::random({2, 4}, 1));
    try {
      (void)nn::backward(model, pass, y);
      FAIL("the faulty backward went on: ", expected);
    } catch (Error& e) {
      nn::name_layer(model, e);
      CHECK_MESSAGE(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
  };
  struct Narrowed { nn::Linear a; Narrows b; nn::Linear head; } narrowed{nn::Linear(4, 4), {}, nn::Linear(4, 2)};
  blamed(narrowed, "in the backward of layer `b`: its backward returned an input gradient of shape [2, 3] for an input of "
                   "shape [2, 4]");
  struct Kept { nn::Linear a; KeepsSaved b; nn::Linear head; } kept{nn::Linear(4, 4), {}, nn::Linear(4, 2)};
  blamed(kept, "in the backward of layer `b`: its backward left 1 of the activation frames its forward saved");
  // a layer returning no input gradient (an embedding's, for token ids) stays allowed
  struct Stopped { Stops s; nn::Linear head; } stopped{{}, nn::Linear(4, 2)};
  (void)param::materialize(stopped, test::cpu());
  test::CpuPass stop_pass(test::cpu());
  CHECK_FALSE(nn::backward(stopped, stop_pass, nn::forward(stopped, stop_pass, test::random({2, 4}, 1))).defined());
  CHECK(stop_pass.saved_count() == 0);
  // but a layer before it is then given no gradient: that is named, not its first product's empty
  // tensor and a parameter left out of visit (a stranger's finding)
  struct StoppedMid { nn::Linear a; Stops s; nn::Linear head; } stopped_mid{nn::Linear(4, 4), {}, nn::Linear(4, 2)};
  blamed(stopped_mid, "in the backward of layer `a`: it was given no output gradient (an undefined tensor): the layer after it "
                      "returned none from its backward");
  // An error from no layer, or from a layer of another model, is left as it was.
  Error plain("not from a layer");
  nn::name_layer(ok, plain);
  CHECK(std::string(plain.what()).find("layer `") == std::string::npos);
  try {
    (void)nn::forward(m, ctx, test::random({2, 4}, 1));
  } catch (Error& e) {
    const std::string before = e.what();
    nn::name_layer(ok, e);
    CHECK(std::string(e.what()) == before);
  }
}

TEST_CASE("MoE: a capacity factor past every token drops none, however large; bad options name the MoE") {
  for (double factor : {4.0, 1e9, 1e19, 1e300}) {  // 1e19 once overflowed the capacity and dropped 39 of 48 (a stranger's finding)
    CAPTURE(factor);
    nn::MoE moe({.dim = 6, .hidden = 5, .experts = 4, .top_k = 1, .capacity_factor = factor, .aux_weight = 0});
    (void)param::materialize(moe, test::cpu(), {.seed = 3});
    test::CpuPass ctx(test::cpu());
    (void)moe.forward(ctx, test::random({12, 6}, 7));
    CHECK(moe.last_routing().capacity == 12);  // all 12 tokens' one choice each
    CHECK(moe.last_routing().dropped == 0);
  }
  CHECK_THROWS_WITH_AS(nn::MoE({.dim = 6, .hidden = 5, .experts = 0}), doctest::Contains("MoE(dim 6, hidden 5, experts 0): the sizes must be positive"),
                       Error);  // not the gate's Linear(6, 0)
  CHECK_THROWS_WITH_AS(nn::MoE({.dim = 6, .hidden = 5, .experts = 4, .capacity_factor = std::numeric_limits<double>::infinity()}),
                       doctest::Contains("capacity_factor = inf must be a finite positive number"), Error);
}

TEST_CASE("dropout: identity in evaluation; masks by step and by global sample position") {
  nn::Dropout drop(0.5);
  (void)param::materialize(drop, test::cpu());
  Tensor x = test::random({8, 125}, 3);
  test::CpuPass eval(test::cpu(), {false});
  CHECK(drop.forward(eval, x).same_as(x));
  auto pass = [&](std::uint64_t step, std::int64_t first_sample, const Tensor& in) {
    test::CpuPass ctx(test::cpu(), {true, 1, step, 0, first_sample});
    return test::values(drop.forward(ctx, in));
  };
  auto whole = pass(0, 0, x);
  CHECK(whole == pass(0, 0, x));   // reproducible (a recompute draws the same mask)
  CHECK(whole != pass(1, 0, x));   // a new mask each step
  // the batch in two halves, as two data-parallel ranks or two micro-batches hold it, draws the
  // whole batch's mask: equivalence with one device holds with dropout on
  auto first = pass(0, 0, x.slice(0, 4)), second = pass(0, 4, x.slice(4, 8));
  first.insert(first.end(), second.begin(), second.end());
  CHECK(first == whole);
  nn::Dropout unnumbered(0.5);
  test::CpuPass ctx(test::cpu());
  CHECK_THROWS_WITH_AS(unnumbered.forward(ctx, x), doctest::Contains("a random stream that was never numbered"), Error);
}
}
}  // namespace test_nn_composition
