// Automatic stage partition: balanced cuts of unit costs (the largest stage as small as it can
// be), the cost model, a model's sequential units, and a cut computed at compile time from
// layer types that carry their cost.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/strategy/units.hpp"

using namespace epl;

namespace {
// Layers whose cost is in their type: a model of them partitions at compile time.
template <int Cost>
struct Costly {
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct Front { Costly<4> a; Costly<1> b; };
struct Model { Front front; nn::Seq<Costly<2>, Costly<2>> mid; Costly<3> last; };
}  // namespace

// (not `Cost`: clang finds strategy::Cost before a template parameter of that name here)
template <int C>
struct epl::strategy::static_cost<Costly<C>> {
  static constexpr double value = C;
};

// The cut is a compile-time constant. Model's units cost 4 1 2 2 3: in 2 stages no cut beats a
// largest stage of 7 (4 1 2 | 2 3), in 3 stages 5 (4 1 | 2 2 | 3).
static_assert(strategy::static_costs<Model>().size() == 5);
static_assert(strategy::static_partition<Model, 2>()[1] == 3);   // 4 1 2 | 2 3: largest 7
static_assert(strategy::static_partition<Model, 3>()[1] == 2 && strategy::static_partition<Model, 3>()[2] == 4);  // 4 1 | 2 2 | 3

TEST_SUITE("cpu") {
TEST_CASE("balanced cut: the largest stage is as small as any cut makes it, every stage non-empty") {
  CHECK(strategy::balanced_partition({1, 1, 1, 1}, 2) == std::vector<std::size_t>{0, 2, 4});
  CHECK(strategy::balanced_partition({5, 1, 1, 1, 1, 1}, 2) == std::vector<std::size_t>{0, 1, 6});
  CHECK(strategy::balanced_partition({1, 1, 1, 1, 1, 5}, 2) == std::vector<std::size_t>{0, 5, 6});
  CHECK(strategy::balanced_partition({1, 2, 3}, 3) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(strategy::balanced_partition({7}, 1) == std::vector<std::size_t>{0, 1});
  // against brute force: every cut of 7 random costs into 3 stages
  std::vector<double> c;
  for (int i = 0; i < 7; ++i) c.push_back(1 + 9 * uniform01(5, static_cast<std::uint64_t>(i)));
  double best = 1e300;
  for (std::size_t a = 1; a < c.size(); ++a)
    for (std::size_t b = a + 1; b < c.size(); ++b) {
      double s0 = 0, s1 = 0, s2 = 0;
      for (std::size_t i = 0; i < c.size(); ++i) (i < a ? s0 : i < b ? s1 : s2) += c[i];
      best = std::min(best, std::max({s0, s1, s2}));
    }
  auto cut = strategy::balanced_partition(c, 3);
  CHECK(strategy::imbalance(c, cut) * (c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6]) / 3 == doctest::Approx(best).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(strategy::balanced_partition({1, 1}, 3),
                       doctest::Contains("a model of 2 sequential units cannot be cut into 3 pipeline stages"), Error);
}

TEST_CASE("units: a model's sequential parts, recursively; the GPT's blocks each two units; costs from parameters") {
  using Ctx = nn::Pass<device::Cpu>;
  const gpt::Shape s{.vocab = 32, .context = 8, .layers = 3, .heads = 2, .dim = 16};
  auto model = gpt::make_gpt(s);
  std::vector<strategy::Unit<Ctx>> units;
  strategy::flatten<Ctx>(model, units);
  REQUIRE(units.size() == 2 + 2 * 3 + 2);  // tok, pos, (attn, mlp) x 3, ln, lm
  CHECK(units[0].name == "model.0.0");
  CHECK(units[2].name == "model.1.0.0");
  CHECK(units[0].cost == doctest::Approx(16));                  // one row of the table a token
  CHECK(units[3].cost == doctest::Approx(2 * 16 + 16 * 64 + 64 + 64 * 16 + 16));  // layer norm + Mlp
  auto chunks = strategy::cut_into_chunks<Ctx>(model, 3);
  std::size_t total = 0;
  for (const auto& c : chunks) {
    CHECK_FALSE(c.units().empty());
    total += c.units().size();
  }
  CHECK(total == units.size());
  // the pieces keep the model's order
  CHECK(chunks[0].units().front().layer == units.front().layer);
  CHECK(chunks[2].units().back().layer == units.back().layer);
  // a Pipeline type's stages are its chunks
  auto two = gpt::make_two_stage_gpt({.vocab = 32, .context = 8, .layers = 4, .heads = 2, .dim = 16});
  auto stages = strategy::cut_into_chunks<Ctx>(two, 2);
  CHECK(stages[0].units().size() == 2 + 2 * 2);
  CHECK(stages[1].units().size() == 2 * 2 + 2);
  CHECK_THROWS_WITH_AS(strategy::cut_into_chunks<Ctx>(two, 4), doctest::Contains("the model has 2 pipeline stages"), Error);
}

TEST_CASE("static partition: the compile-time cut equals the run-time one") {
  using Ctx = nn::Pass<device::Cpu>;
  Model m;
  auto chunks = strategy::cut_into_chunks<Ctx>(m, 3);
  REQUIRE(chunks.size() == 3);
  constexpr auto cut = strategy::static_partition<Model, 3>();
  for (std::size_t s = 0; s < 3; ++s) CHECK(chunks[s].units().size() == cut[s + 1] - cut[s]);
}
}
