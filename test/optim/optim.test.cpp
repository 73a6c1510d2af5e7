// Optimizers over several steps against the update rules written out here, and clipping.
#include <cmath>
#include <limits>

#include "../helpers.hpp"

using namespace epl;
namespace nn = epl::nn;

namespace {
// A one-parameter "model" whose gradient the test sets by hand.
struct Param1 {
  nn::Parameter w{Shape{3}, nn::Init::zeros()};
  template <class V> void visit(V&& v) { v("w", w); }
};
template <class O>
std::vector<double> run(O opt, const std::vector<std::vector<double>>& grads, std::int64_t groups = 1, double grad_scale = 1,
                        std::vector<double>* grad_after = nullptr) {
  Param1 m;
  auto arena = param::materialize(m, test::cpu64(), {.dtype = DType::kF64});
  double init[] = {1.0, -0.5, 2.0};
  test::cpu64().upload(init, m.w.value);
  optim::Updater<O> u(opt);
  for (const auto& g : grads) {
    test::cpu64().upload(g.data(), m.w.grad);
    u.step(test::cpu64(), arena.values(), arena.grads(), groups, grad_scale);
  }
  if (grad_after) *grad_after = test::values<double>(m.w.grad);
  return test::values<double>(m.w.value);
}
const std::vector<std::vector<double>> kGrads = {{0.1, -0.2, 0.3}, {0.05, 0.1, -0.4}, {-0.3, 0.2, 0.1}};
std::vector<std::vector<double>> scaled(double f) {
  auto g = kGrads;
  for (auto& row : g)
    for (auto& x : row) x *= f;
  return g;
}
// A program's own optimizer that knows no gradient factor: plain SGD without decay.
struct PlainSgd {
  struct Options {
    double lr = 0.1;
  };
  static constexpr int kStateSlots = 0;
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor>, std::int64_t) const {
    d.sgd_update(value, grad, opt.lr, 0.0, 1.0);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt; }
  Options opt;
};
// The same rule reading the factor, its sixth argument without a default (an optimizer may offer
// only that form).
struct FactorSgd {
  struct Options {
    double lr = 0.1;
  };
  static constexpr int kStateSlots = 0;
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor>, std::int64_t, double grad_scale) const {
    d.sgd_update(value, grad, opt.lr, 0.0, grad_scale);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt; }
  Options opt;
};
static_assert(optim::optimizer<FactorSgd> && optim::reads_grad_scale<FactorSgd>);
static_assert(optim::optimizer<PlainSgd> && !optim::reads_grad_scale<PlainSgd>);
// a slot count below 0 is not an optimizer (a stranger's kStateSlots = -1 compiled, and ran with no state)
template <int Slots>
struct SlotsSgd : PlainSgd {
  static constexpr int kStateSlots = Slots;
};
static_assert(optim::optimizer<SlotsSgd<0>> && optim::optimizer<SlotsSgd<2>> && !optim::optimizer<SlotsSgd<-1>> &&
              !optim::optimizer<SlotsSgd<33>>);
static_assert(optim::nonnegative_slots<optim::AdamW>() == 0b10u && optim::nonnegative_slots<PlainSgd>() == 0);
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("SGD with weight decay") {
  auto got = run(optim::SGD({.lr = 0.1, .weight_decay = 0.01}), kGrads);
  std::vector<double> p = {1.0, -0.5, 2.0};
  for (const auto& g : kGrads)
    for (int i = 0; i < 3; ++i) p[i] -= 0.1 * (g[i] + 0.01 * p[i]);
  CHECK(test::max_rel_diff(got, p) < 1e-15);
}
TEST_CASE("Momentum, plain and Nesterov") {
  for (bool nesterov : {false, true}) {
    auto got = run(optim::Momentum({.lr = 0.1, .momentum = 0.9, .nesterov = nesterov}), kGrads);
    std::vector<double> p = {1.0, -0.5, 2.0}, v(3, 0.0);
    for (const auto& g : kGrads)
      for (int i = 0; i < 3; ++i) {
        v[i] = 0.9 * v[i] + g[i];
        p[i] -= 0.1 * (nesterov ? g[i] + 0.9 * v[i] : v[i]);
      }
    CAPTURE(nesterov);
    CHECK(test::max_rel_diff(got, p) < 1e-15);
  }
}
TEST_CASE("AdamW with bias correction and decoupled decay, in one range and in apply groups") {
  auto got = run(optim::AdamW({.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}), kGrads);
  auto grouped = run(optim::AdamW({.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}), kGrads, 3);
  CHECK(grouped == got);
  std::vector<double> p = {1.0, -0.5, 2.0}, m(3, 0.0), v(3, 0.0);
  int t = 0;
  for (const auto& g : kGrads) {
    ++t;
    for (int i = 0; i < 3; ++i) {
      p[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      p[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  CHECK(test::max_rel_diff(got, p) < 1e-13);
}
TEST_CASE("the gradient factor: each optimizer reads grad_scale g and leaves the gradients as they are; a program's own optimizer gets them scaled") {
  const double f = 0.125 / 3;  // AMP's unscale (row shares / loss scale) times a clip coefficient
  std::vector<double> left;
  CHECK(test::max_rel_diff(run(optim::SGD({.lr = 0.1, .weight_decay = 0.01}), kGrads, 1, f, &left),
                           run(optim::SGD({.lr = 0.1, .weight_decay = 0.01}), scaled(f))) < 1e-15);
  CHECK(left == kGrads.back());  // read with the factor, not rewritten
  CHECK(test::max_rel_diff(run(optim::Momentum({.lr = 0.1, .momentum = 0.9, .nesterov = true}), kGrads, 1, f),
                           run(optim::Momentum({.lr = 0.1, .momentum = 0.9, .nesterov = true}), scaled(f))) < 1e-15);
  // eps near the scaled gradients' size, so the factor changes AdamW's step (it would not for eps << |g|)
  const optim::AdamW adamw({.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-2, .weight_decay = 0.1});
  const auto fused = run(adamw, kGrads, 2, f, &left);
  CHECK(test::max_rel_diff(fused, run(adamw, scaled(f))) < 1e-13);
  CHECK(test::max_rel_diff(fused, run(adamw, kGrads)) > 1e-3);
  CHECK(left == kGrads.back());
  // an optimizer with the sixth argument only reads it too
  CHECK(test::max_rel_diff(run(FactorSgd{}, kGrads, 1, f, &left), run(PlainSgd{}, scaled(f))) < 1e-15);
  CHECK(left == kGrads.back());
  // an optimizer without the sixth argument: the Updater scales the gradients in place first
  CHECK(test::max_rel_diff(run(PlainSgd{}, kGrads, 1, f, &left), run(PlainSgd{}, scaled(f))) < 1e-15);
  CHECK(test::max_rel_diff(left, scaled(f).back()) < 1e-15);
  // a factor that is not a finite, non-negative number is refused before anything changes
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(run(optim::SGD({.lr = 0.1}), kGrads, 1, bad), doctest::Contains("must be finite and not negative"), Error);
  }
  {  // and the refused step did not count
    Param1 m;
    auto arena = param::materialize(m, test::cpu64(), {.dtype = DType::kF64});
    optim::Updater<optim::SGD> u(optim::SGD({.lr = 0.1}));
    CHECK_THROWS_AS(u.step(test::cpu64(), arena.values(), arena.grads(), 1, -1.0), Error);
    CHECK(u.steps() == 0);
  }
  // a schedule on an optimizer whose options() is const says what it needs
  optim::Updater<PlainSgd> u(PlainSgd{});
  CHECK_THROWS_WITH_AS(u.set_schedule(optim::LrSchedule{.decay = optim::LrSchedule::Decay::kLinear, .decay_steps = 10}),
                       doctest::Contains("non-const `Options& options()`"), Error);
  // the fix names both ways a schedule is asked for (it named the lr.* keys alone: a stranger's)
  CHECK_THROWS_WITH_AS(u.set_schedule(optim::LrSchedule{.decay = optim::LrSchedule::Decay::kLinear, .decay_steps = 10}),
                       doctest::Contains("add one, or train without a schedule (no lr.* keys, no TrainerOptions::lr_schedule)"), Error);
}
TEST_CASE("optimizer state is accounted as optimizer state, one buffer per slot over the range") {
  device::Cpu dev(30);
  Param1 m;
  auto arena = param::materialize(m, dev);
  optim::Updater<optim::AdamW> u(optim::AdamW({}));
  u.step(dev, arena.values(), arena.grads());
  CHECK(memory_stats(dev.id()).current_of(MemoryCategory::kOptimizerState) == 2 * arena.size() * 4);
  CHECK(u.steps() == 1);
  CHECK_THROWS_WITH_AS(u.step(dev, arena.values().slice(0, 2), arena.grads().slice(0, 2)),
                       doctest::Contains("its state holds"), Error);
}
// An optimizer that is not fused: its update makes a temporary as long as the range it is given
// (here lr * grad), as an unfused or user-written rule does. epl's SGD and AdamW are fused and
// make none.
struct UnfusedSgd {
  static constexpr int kStateSlots = 0;
  struct Options {
    double lr = 0.1;
  };
  template <class D>
  void update(const D& d, const Tensor& value, const Tensor& grad, std::span<const Tensor>, std::int64_t) const {
    Tensor step = d.empty(grad.shape(), grad.dtype(), MemoryCategory::kWorkspace);
    d.copy(grad, step);
    d.scale(step, opt_.lr);
    d.axpy(-1.0, step, value);
  }
  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  Options opt_;
};
struct Wide {
  nn::Parameter w{Shape{1000, 7}, nn::Init::normal(0.5)}, b{Shape{13}, nn::Init::normal(0.5)};
  template <class V> void visit(V&& v) {
    v("w", w);
    v("b", b);
  }
};
TEST_CASE("apply groups: an update's temporaries peak at the largest group's bytes, about 1 / G, with the same result") {
  device::Cpu dev(31);
  std::vector<double> first;
  for (std::int64_t groups : {1, 4, 7}) {
    CAPTURE(groups);
    Wide m;
    auto arena = param::materialize(m, dev, {.seed = 3});
    dev.fill(arena.grads(), 0.25);
    optim::Updater<UnfusedSgd> u(UnfusedSgd{});
    memory_account(dev.id()).reset_peaks();
    const auto before = memory_stats(dev.id()).current_of(MemoryCategory::kWorkspace);
    u.step(dev, arena.values(), arena.grads(), groups);
    const auto n = arena.size();  // 7013 elements: the largest group holds ceil(n / G)
    CHECK(memory_stats(dev.id()).peak_of(MemoryCategory::kWorkspace) - before == (n + groups - 1) / groups * 4);
    const auto values = test::values(arena.values());
    if (groups == 1) first = values;
    else CHECK(values == first);
  }
}
TEST_CASE("clip_grad_norm scales to the max norm and reports the norm before") {
  Param1 m;
  auto arena = param::materialize(m, test::cpu64(), {.dtype = DType::kF64});
  double g[] = {3, 0, 4};
  test::cpu64().upload(g, m.w.grad);
  CHECK(optim::clip_grad_norm(test::cpu64(), arena.grads(), 1.0) == doctest::Approx(5.0));
  CHECK(test::values<double>(m.w.grad)[2] == doctest::Approx(0.8).epsilon(1e-6));
  CHECK(optim::clip_grad_norm(test::cpu64(), arena.grads(), 10.0) == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(test::values<double>(m.w.grad)[2] == doctest::Approx(0.8).epsilon(1e-6));  // unchanged
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm(test::cpu64(), arena.grads(), 0.0), doctest::Contains("must be positive"), Error);
}
TEST_CASE("bad hyper-parameters are rejected with the value") {
  CHECK_THROWS_WITH_AS(optim::AdamW({.lr = -1}), doctest::Contains("learning rate -1 must be positive"), Error);
  CHECK_THROWS_WITH_AS(optim::Momentum({.momentum = 1.5}), doctest::Contains("momentum 1.5"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({.lr = std::numeric_limits<double>::infinity()}), doctest::Contains("learning rate inf must be positive and finite"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({.lr = std::numeric_limits<double>::quiet_NaN()}), doctest::Contains("learning rate nan"), Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({.weight_decay = -0.1}), doctest::Contains("weight_decay -0.1 must be finite and not negative"), Error);
  static_assert(optim::optimizer<optim::AdamW>);
  static_assert(optim::optimizer<optim::SGD>);
  static_assert(!optim::optimizer<int>);
}
}

TEST_SUITE("cpu") {
TEST_CASE("learning-rate schedules: warm-up, cosine and linear decay to a floor, and an inactive one leaves lr alone") {
  optim::LrSchedule s{.decay = optim::LrSchedule::Decay::kLinear, .warmup = 2, .decay_steps = 6, .floor = 0.1, .base = 1.0};
  CHECK(s.at(1) == 0.5);
  CHECK(s.at(2) == 1.0);
  CHECK(s.at(4) == doctest::Approx(0.55));  // half way from 1 to 0.1
  CHECK(s.at(6) == doctest::Approx(0.1));
  CHECK(s.at(60) == doctest::Approx(0.1));
  s.decay = optim::LrSchedule::Decay::kCosine;
  CHECK(s.at(4) == doctest::Approx(0.55));  // cos(pi/2) = 0: the middle too
  CHECK(s.at(3) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(3.14159265358979 / 4))));
  CHECK(s.describe() == "cosine warmup=2 decay_steps=6 min=0.10000000000000001 base=1");
  // the Updater applies it step by step; without one, the optimizer's lr is the program's
  optim::Updater<optim::SGD> u(optim::SGD({.lr = 0.4}));
  u.set_schedule({.decay = optim::LrSchedule::Decay::kConstant, .warmup = 4});
  CHECK(u.schedule().base == 0.4);
  Tensor v = test::cpu().zeros({3}, DType::kF32), g = test::cpu().zeros({3}, DType::kF32);
  u.step(test::cpu(), v, g);
  CHECK(u.learning_rate() == doctest::Approx(0.1));
  optim::Updater<optim::SGD> plain(optim::SGD({.lr = 0.4}));
  plain.set_schedule({});
  plain.optimizer().options().lr = 0.3;  // set by hand, as before schedules
  plain.step(test::cpu(), v, g);
  CHECK(plain.learning_rate() == 0.3);
}
}
