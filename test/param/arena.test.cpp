// The flat arena: backward-order layout, alignment, views, accounting, and initialisation by
// global ordinal (a shard draws its slice of the whole; an unowned parameter keeps its number).
#include "../helpers.hpp"

using namespace epl;

namespace {
struct One {
  nn::Parameter w{Shape{4, 6}, nn::Init::normal(1.0)};
  template <class V> void visit(V&& v) { v("w", w); }
};
struct Big {
  nn::Parameter w{Shape{300, 1000}, nn::Init::normal(0.02)};
  template <class V> void visit(V&& v) { v("w", w); }
};
struct Three {
  nn::Linear a{4, 3};
  nn::Dropout drop{0.5};
  nn::Linear b{3, 5};
};
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("arena: the last parameter first, each aligned, values and gradients views of two flat buffers") {
  device::Cpu d(80);
  Three m;
  auto arena = param::materialize(m, d, {.seed = 3});
  const auto& order = arena.parameters();
  REQUIRE(order.size() == 4);
  CHECK(order[0] == &m.b.bias);  // backward order: b.bias, b.weight, a.bias, a.weight
  CHECK(order[3] == &m.a.weight);
  CHECK(m.b.bias.offset == 0);
  CHECK(m.b.weight.offset == 16);  // 5 elements padded to 16
  CHECK(m.a.weight.offset % 16 == 0);
  CHECK(arena.size() == 16 + 16 + 16 + 16);
  CHECK(m.a.weight.value.raw() == static_cast<char*>(arena.values().raw()) + 4 * m.a.weight.offset);
  CHECK(m.a.weight.grad.raw() == static_cast<char*>(arena.grads().raw()) + 4 * m.a.weight.offset);
  CHECK(m.a.weight.value.shape() == Shape{3, 4});
  CHECK(memory_stats(d.id()).current_of(MemoryCategory::kParameters) == arena.size() * 4);
  CHECK(memory_stats(d.id()).current_of(MemoryCategory::kGradients) == arena.size() * 4);
  for (float g : arena.grads().span<float>()) REQUIRE(g == 0.0f);
  CHECK(m.a.weight.ordinal == 0);
  CHECK(m.b.bias.ordinal == 3);
  CHECK(m.drop.stream.ordinal == 0);
}

TEST_CASE("materialize: staging is the rank's own and small; a large parameter draws the same values in chunks") {
  // Thread ranks materialize at once: their host staging once all went to cpu:0's account,
  // whole parameters at a time in f64 (a 100,000-class classifier: 3x its size on rank 0).
  device::Cpu zero(0), mine(81);
  memory_account(zero.id()).reset_peaks();
  memory_account(mine.id()).reset_peaks();
  const auto zero_before = memory_stats(zero.id()).peak_of(MemoryCategory::kWorkspace);
  Big m;
  auto arena = param::materialize(m, mine, {.seed = 5});
  CHECK(memory_stats(zero.id()).peak_of(MemoryCategory::kWorkspace) == zero_before);
  const auto staging = memory_stats(mine.id()).peak_of(MemoryCategory::kWorkspace);
  CHECK(staging > 0);
  CHECK(staging <= (8 + 4) * (std::int64_t{1} << 16));  // one f64 chunk and its f32 copy
  // Element i is still init(seed, ordinal, i), across the chunk boundaries.
  device::CpuF64 host(81);
  Big ref;
  auto ref_arena = param::materialize(ref, host, {.dtype = DType::kF64, .seed = 5});
  const auto got = m.w.value.span<float>();
  const auto want = ref.w.value.span<double>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i : {std::size_t{0}, std::size_t{65535}, std::size_t{65536}, std::size_t{299999}})
    CHECK(got[i] == static_cast<float>(want[i]));
  CHECK(got[65536] != got[65535]);
}
namespace {
struct ListsTwice {  // its visit names one member under two names (a stranger's layer)
  nn::Parameter weight{Shape{3, 2}, nn::Init::zeros()}, bias{Shape{3}, nn::Init::zeros()};
  template <class V> void visit(V&& v) {
    v("weight", weight);
    v("bias", bias);
    v("weight2", weight);
  }
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct WithTwice {
  nn::Linear in{2, 2};
  ListsTwice mine;
};
struct Shift {  // a parameter of no elements beside one of four (a stranger's layer)
  nn::Parameter empty{Shape{0}, nn::Init::zeros()}, s{Shape{4}, nn::Init::zeros()};
  template <class V> void visit(V&& v) {
    v("empty", empty);
    v("s", s);
  }
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx&, const Tensor& dy) { return dy; }
};
struct WithEmpty {
  nn::Linear a{4, 4};
  Shift shift;
};
}  // namespace

TEST_CASE("materialize: a parameter of no elements is named, not laid out at its neighbour's offset") {
  WithEmpty m;
  CHECK_THROWS_WITH_AS((void)param::materialize(m, test::cpu()),
                       doctest::Contains("parameter shift.empty has shape [0], no elements: every parameter holds at least one value "
                                         "(a scalar is Shape{}); leave an unused one out of the layer's visit(v), or give it a size"),
                       Error);
  WithEmpty rows;
  rows.shift.empty = nn::Parameter(Shape{0, 4}, nn::Init::zeros());
  CHECK_THROWS_WITH_AS((void)param::materialize(rows, test::cpu()),
                       doctest::Contains("parameter shift.empty has shape [0, 4], no elements"), Error);
}

TEST_CASE("materialize: a parameter listed twice is named with both names, not laid out twice") {
  WithTwice m;
  CHECK_THROWS_WITH_AS((void)param::materialize(m, test::cpu()),
                       doctest::Contains("the model lists one parameter twice, as mine.weight and mine.weight2 ([3, 2]): a layer's "
                                         "visit(v) names a member twice"),
                       Error);
}

TEST_CASE("materialize: parameters too large for the machine name their largest, not only the arena's size") {
  // one stray token id of 2^31 - 1 made a vocabulary of 2^31: "reduce the batch or the model"
  // named neither the embedding nor its size (a stranger's finding)
  struct Huge {
    nn::Linear in{4, 8};
    nn::Embedding tok{std::int64_t{1} << 31, 64};
  };
  Huge m;
  CHECK_THROWS_WITH_AS((void)param::materialize(m, test::cpu()),
                       doctest::Contains("host allocation of 524288 MiB"), Error);
  CHECK_THROWS_WITH_AS((void)param::materialize(m, test::cpu()),
                       doctest::Contains("; the largest of the 3 parameters is tok.weight [2147483648, 64]"), Error);
}

TEST_CASE("materialize: the same seed draws the same values; another seed other values") {
  Three x, y, z;
  (void)param::materialize(x, test::cpu(), {.seed = 7});
  (void)param::materialize(y, test::cpu(), {.seed = 7});
  (void)param::materialize(z, test::cpu(), {.seed = 8});
  CHECK(test::flat_params(x) == test::flat_params(y));
  CHECK(test::flat_params(x) != test::flat_params(z));
}

// A shard draws exactly its part of the single-device initialisation, along either axis.
TEST_CASE("materialize: a sharded parameter draws its slice of the whole one") {
  One whole;
  (void)param::materialize(whole, test::cpu(), {.seed = 5});
  auto full = test::values(whole.w.value);
  for (int axis : {0, 1})
    for (std::int64_t part = 0; part < 2; ++part) {
      One shard;
      shard.w.shape = axis == 0 ? Shape{2, 6} : Shape{4, 3};
      shard.w.shard = {axis, part, 2};
      CHECK(shard.w.global_shape() == Shape{4, 6});
      (void)param::materialize(shard, test::cpu(), {.seed = 5});
      auto got = test::values(shard.w.value);
      for (std::int64_t i = 0; i < shard.w.numel(); ++i) {
        const std::int64_t r = axis == 0 ? part * 2 + i / 6 : i / 3, c = axis == 0 ? i % 6 : part * 3 + i % 3;
        CAPTURE(axis);
        CAPTURE(part);
        CHECK(got[static_cast<std::size_t>(i)] == full[static_cast<std::size_t>(r * 6 + c)]);
      }
    }
}

TEST_CASE("materialize: parameters another rank owns keep their ordinals and are not allocated") {
  Three whole, part;
  (void)param::materialize(whole, test::cpu(), {.seed = 9});
  auto arena = param::materialize(part, test::cpu(), {.seed = 9, .owned = [&](const nn::Parameter& p) { return p.ordinal >= 2; }});
  CHECK_FALSE(part.a.weight.materialized());
  CHECK(part.a.weight.ordinal == 0);
  CHECK(arena.parameters().size() == 2);
  CHECK(test::values(part.b.weight.value) == test::values(whole.b.weight.value));
}
}
