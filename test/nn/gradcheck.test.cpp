// Every layer's backward against central finite differences in double precision.
#include "../helpers.hpp"
#include "epl/testing/gradcheck.hpp"

using namespace epl;
namespace nn = epl::nn;

namespace test_nn_gradcheck {

namespace {
template <class L>
void expect_gradients(L layer, const Tensor& x, double tolerance = 1e-6) {
  (void)param::materialize(layer, test::cpu64(), {.dtype = DType::kF64, .seed = 3});
  auto r = testing::gradcheck(layer, x);
  CAPTURE(r.worst);
  CHECK(r.checked > 0);
  CHECK(r.max_error <= tolerance);
}
struct Block {  // a user struct: an aggregate of layers is a layer
  nn::Residual<nn::LayerNorm, nn::CausalSelfAttention> attn;
  nn::Residual<nn::LayerNorm, nn::Mlp> mlp;
};
Block block(std::int64_t dim, std::int64_t heads) {
  return {nn::Residual<nn::LayerNorm, nn::CausalSelfAttention>(nn::LayerNorm(dim), nn::CausalSelfAttention(dim, heads)),
          nn::Residual<nn::LayerNorm, nn::Mlp>(nn::LayerNorm(dim), nn::Mlp(dim))};
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("gradcheck: Linear, with and without bias") {
  expect_gradients(nn::Linear(5, 3), test::random<double>({2, 4, 5}, 1));
  expect_gradients(nn::Linear(4, 6, false), test::random<double>({3, 4}, 2));
}
TEST_CASE("gradcheck: Embedding and PositionEmbedding") {
  expect_gradients(nn::Embedding(7, 4), test::ids({2, 5}, 7, 3));
  expect_gradients(nn::PositionEmbedding(8, 4), test::random<double>({2, 5, 4}, 4));
}
TEST_CASE("gradcheck: an f32 input is refused by name, not by the GEMM's dtypes (a stranger's finding)") {
  nn::Linear l(3, 2);
  (void)param::materialize(l, test::cpu64(), {.dtype = DType::kF64, .seed = 3});
  CHECK_THROWS_WITH_AS(testing::gradcheck(l, test::random<float>({2, 3}, 1)), doctest::Contains("gradcheck needs an f64 input"), Error);
  CHECK_THROWS_WITH_AS(testing::gradcheck(l, Tensor{}), doctest::Contains("got an undefined tensor"), Error);
}
TEST_CASE("gradcheck: LayerNorm") { expect_gradients(nn::LayerNorm(6), test::random<double>({3, 6}, 5)); }
TEST_CASE("gradcheck: GELU, ReLU") {
  expect_gradients(nn::GELU{}, test::random<double>({4, 5}, 6));
  expect_gradients(nn::ReLU{}, test::random<double>({4, 5}, 7));
}
TEST_CASE("gradcheck: Dropout (the mask repeats for the same pass)") {
  expect_gradients(nn::Dropout(0.3), test::random<double>({4, 5}, 8));
}
TEST_CASE("gradcheck: CausalSelfAttention") {
  expect_gradients(nn::CausalSelfAttention(8, 2), test::random<double>({2, 5, 8}, 9));
  // a sequence past one row block of the CPU's causal GEMMs (device::Triangle: 64 rows a block),
  // whose products skip the upper triangle block by block
  expect_gradients(nn::CausalSelfAttention(8, 2), test::random<double>({1, 70, 8}, 9));
}
TEST_CASE("gradcheck: Mlp, Seq, Residual") {
  expect_gradients(nn::Mlp(4, 6), test::random<double>({2, 3, 4}, 10));
  expect_gradients(nn::Seq<nn::Linear, nn::ReLU, nn::Linear>(nn::Linear(3, 5), nn::ReLU{}, nn::Linear(5, 2)),
                   test::random<double>({4, 3}, 11));
  expect_gradients(nn::Residual<nn::LayerNorm, nn::Linear>(nn::LayerNorm(4), nn::Linear(4, 4)), test::random<double>({3, 4}, 12));
}
TEST_CASE("gradcheck: Recompute (backward recomputes the forward, dropout masks included)") {
  expect_gradients(epl::Recompute<nn::Linear, nn::GELU, nn::Dropout, nn::Linear>(nn::Linear(3, 5), nn::GELU{}, nn::Dropout(0.3),
                                                                                   nn::Linear(5, 2)),
                   test::random<double>({4, 3}, 13));
  expect_gradients(epl::Recompute<Block>(block(4, 2)), test::random<double>({2, 3, 4}, 14));
}
TEST_CASE("gradcheck: MoE, top-1 and top-2, with dropped tokens and the load-balancing loss") {
  // 12 tokens over 4 experts: capacity ceil(0.5 x 12 k / 4) leaves some choices dropped
  for (std::int64_t k : {1, 2}) {
    CAPTURE(k);
    nn::MoE moe({.dim = 6, .hidden = 5, .experts = 4, .top_k = k, .capacity_factor = 0.5, .aux_weight = 0.3});
    (void)param::materialize(moe, test::cpu64(), {.dtype = DType::kF64, .seed = 3});
    auto r = testing::gradcheck(moe, test::random<double>({3, 4, 6}, 40 + k));
    CAPTURE(r.worst);
    CHECK(r.checked > 0);
    CHECK(r.max_error <= 1e-6);
    CHECK(moe.last_routing().dropped > 0);  // capacity ceil(0.5 x 12 k / 4): some choices do not fit
    CHECK(moe.last_routing().aux > 0.9);    // E sum f P >= 1 at balance
  }
}
TEST_CASE("gradcheck: a user's transformer block struct") { expect_gradients(block(8, 2), test::random<double>({2, 4, 8}, 13)); }

TEST_CASE("gradcheck: SoftmaxCrossEntropy") {
  auto& d = test::cpu64();
  Tensor logits = test::random<double>({6, 5}, 14);
  Tensor targets = test::ids({6}, 5, 15);
  nn::SoftmaxCrossEntropy loss;
  testing::CheckPass ctx(d);
  (void)loss.forward(ctx, logits, targets);
  Tensor g = loss.backward(ctx, 2.0);
  auto f = [&] {
    testing::CheckPass c(d);
    double v = loss.forward(c, logits, targets);
    (void)c.restore(&loss);
    return 2.0 * v;
  };
  auto lv = logits.span<double>();
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    double keep = lv[i];
    lv[i] = keep + 1e-6;
    double up = f();
    lv[i] = keep - 1e-6;
    double down = f();
    lv[i] = keep;
    CHECK(g.span<double>()[i] == doctest::Approx((up - down) / 2e-6).epsilon(1e-6));
  }
}

TEST_CASE("gradcheck detects a wrong backward") {
  struct WrongScale {  // forward doubles, backward claims it triples
    Tensor forward(testing::CheckPass& ctx, const Tensor& x) {
      Tensor y = ctx.empty_like(x);
      ctx.device().copy(x, y);
      ctx.device().scale(y, 2.0);
      return y;
    }
    Tensor backward(testing::CheckPass& ctx, const Tensor& dy) {
      Tensor dx = ctx.empty_like(dy);
      ctx.device().copy(dy, dx);
      ctx.device().scale(dx, 3.0);
      return dx;
    }
  } wrong;
  auto r = testing::gradcheck(wrong, test::random<double>({3}, 1));
  CHECK(r.max_error > 0.1);
  CHECK(r.worst.find("input") == 0);
}

// A layer's backward must *add* into its parameters' gradients: micro-batches accumulate there.
// One that overwrites its gradient is right for a single pass and wrong for two; gradcheck
// starts every gradient from a non-zero value, so it fails such a layer and says why.
namespace {
template <bool kAccumulate>
struct Scale {  // y = w * x element-wise, w [n]
  nn::Parameter w{Shape{4}, nn::Init::uniform(1.0)};
  template <class V> void visit(V&& v) { v("w", w); }
  Tensor forward(testing::CheckPass& ctx, const Tensor& x) {
    Tensor y = ctx.empty_like(x);
    ctx.device().mul(x, w.value, y);
    ctx.save(this, {x});
    return y;
  }
  Tensor backward(testing::CheckPass& ctx, const Tensor& dy) {
    nn::Saved s = ctx.restore(this);
    if constexpr (kAccumulate) {
      Tensor dw = ctx.empty_like(dy);
      ctx.device().mul(dy, s[0], dw);
      ctx.device().add(w.grad, dw, w.grad);  // grad += dy * x
    } else {
      ctx.device().mul(dy, s[0], w.grad);    // grad = dy * x: the bug
    }
    Tensor dx = ctx.empty_like(dy);
    ctx.device().mul(dy, w.value, dx);
    return dx;
  }
};
}  // namespace

TEST_CASE("gradcheck fails a layer that overwrites its gradient instead of accumulating") {
  Scale<true> good;
  (void)param::materialize(good, test::cpu64(), {.dtype = DType::kF64, .seed = 1});
  auto ok = testing::gradcheck(good, test::random<double>({4}, 2));
  CHECK(ok.ok(1e-6));
  Scale<false> bad;
  (void)param::materialize(bad, test::cpu64(), {.dtype = DType::kF64, .seed = 1});
  auto r = testing::gradcheck(bad, test::random<double>({4}, 2));
  CHECK_FALSE(r.ok(1e-6));
  CAPTURE(r.worst);
  CHECK(r.worst.find("w[") == 0);
  CHECK(r.worst.find("overwritten") != std::string::npos);
}

// A NaN compares false with every tolerance: a backward that gave one, or a forward that is not
// finite where it is checked, passed with a small error; options that check nothing passed too
// (a stranger's findings).
namespace {
enum class Broken { kNanInputGrad, kNanParamGrad, kNanForward, kReadsPastFrame };
template <Broken kHow>
struct Faulty {  // y = w * x element-wise, broken one way
  nn::Parameter w{Shape{4}, nn::Init::uniform(1.0)};
  template <class V> void visit(V&& v) { v("w", w); }
  Tensor forward(testing::CheckPass& ctx, const Tensor& x) {
    Tensor y = ctx.empty_like(x);
    ctx.device().mul(x, w.value, y);
    if constexpr (kHow == Broken::kNanForward) ctx.device().scale(y, std::nan(""));
    ctx.save(this, {x});
    return y;
  }
  Tensor backward(testing::CheckPass& ctx, const Tensor& dy) {
    nn::Saved s = ctx.restore(this);
    Tensor dw = ctx.empty_like(dy);
    ctx.device().mul(dy, s[kHow == Broken::kReadsPastFrame ? 1 : 0], dw);
    if constexpr (kHow == Broken::kNanParamGrad) ctx.device().fill(dw, std::nan(""));
    ctx.device().add(w.grad, dw, w.grad);
    Tensor dx = ctx.empty_like(dy);
    ctx.device().mul(dy, w.value, dx);
    if constexpr (kHow == Broken::kNanInputGrad) ctx.device().fill(dx, std::nan(""));
    return dx;
  }
};
template <Broken kHow>
testing::GradcheckResult check_faulty() {
  Faulty<kHow> layer;
  (void)param::materialize(layer, test::cpu64(), {.dtype = DType::kF64, .seed = 1});
  return testing::gradcheck(layer, test::random<double>({4}, 2));
}
}  // namespace

TEST_CASE("gradcheck fails a gradient or a loss that is not finite, and refuses options that check nothing") {
  const auto input = check_faulty<Broken::kNanInputGrad>();
  CHECK_FALSE(input.ok(1e-6));
  CHECK(input.worst.find("input[0]") == 0);
  CHECK(input.worst.find("the gradient backward gave is not finite") != std::string::npos);
  const auto param = check_faulty<Broken::kNanParamGrad>();
  CHECK_FALSE(param.ok(1e-6));
  CHECK(param.worst.find("w[0]") == 0);
  const auto forward = check_faulty<Broken::kNanForward>();
  CHECK_FALSE(forward.ok(1e-6));
  CHECK(forward.worst.find("the loss is not finite around this point") != std::string::npos);
  CHECK_THROWS_WITH_AS(check_faulty<Broken::kReadsPastFrame>(), doctest::Contains("backward: reads saved tensor 1 of a frame that holds 1"),
                       Error);

  nn::Linear l(3, 2);
  CHECK_THROWS_WITH_AS(testing::gradcheck(l, test::random<double>({2, 3}, 1)),
                       doctest::Contains("gradcheck: parameter weight has no values: materialize the layer in f64 first"), Error);
  (void)param::materialize(l, test::cpu(), {.seed = 3});
  CHECK_THROWS_WITH_AS(testing::gradcheck(l, test::random<double>({2, 3}, 1)), doctest::Contains("gradcheck: parameter weight is f32"),
                       Error);
  nn::Linear m(3, 2);
  (void)param::materialize(m, test::cpu64(), {.dtype = DType::kF64, .seed = 3});
  const Tensor x = test::random<double>({2, 3}, 1);
  for (double step : {0.0, -1e-6, std::nan("")})
    CHECK_THROWS_WITH_AS(testing::gradcheck(m, x, {.step = step}), doctest::Contains("is not a step"), Error);
  CHECK_THROWS_WITH_AS(testing::gradcheck(m, x, {.tolerance = -1}), doctest::Contains("is not a tolerance"), Error);
  for (int n : {0, -3})
    CHECK_THROWS_WITH_AS(testing::gradcheck(m, x, {.max_per_tensor = n}), doctest::Contains("checks nothing"), Error);
  const auto one = testing::gradcheck(m, x, {.max_per_tensor = 1});
  CHECK(one.checked == 3);  // one element of the input, the weight and the bias
  CHECK(one.ok(1e-6));
  CHECK_THROWS_WITH_AS(testing::gradcheck(m, test::random<double>({0, 3}, 1)), doctest::Contains("the input [0, 3] has no elements"), Error);
}
}
}  // namespace test_nn_gradcheck
