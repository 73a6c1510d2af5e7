// Training on one device: gradient accumulation equals one big batch, the loss falls, data
// windows are served once per epoch, and bad input is a clear error.
#include <filesystem>
#include <limits>
#include <fstream>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"

using namespace epl;

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }
struct Run {
  std::vector<double> losses;
  std::vector<double> params;
};
template <class Optimizer = optim::Momentum>
Run train(std::int64_t micro_batches, int steps, double clip = 0, Optimizer opt = optim::Momentum({.lr = 0.05})) {
  Config cfg;
  cfg.set("pipeline.num_micro_batch", micro_batches);
  Trainer<gpt::Gpt, Optimizer> t(test::cpu(), cfg, gpt::make_gpt(tiny()), opt, {.seed = 5, .clip_norm = clip});
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 8, 11);
  Run r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(t.step(loader.next(test::cpu())));
  r.params = test::flat_params(t.model());
  return r;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("gradient accumulation over micro-batches equals one step on the whole batch") {
  Run one = train(1, 6);
  for (std::int64_t m : {2, 4}) {
    CAPTURE(m);
    Run acc = train(m, 6);
    CHECK(test::max_rel_diff(acc.losses, one.losses) < 1e-5);
    CHECK(test::max_rel_diff(acc.params, one.params) < 1e-5);
  }
  Run clipped = train(1, 6, 0.5), clipped_acc = train(4, 6, 0.5);
  CHECK(test::max_rel_diff(clipped_acc.losses, clipped.losses) < 1e-5);
  CHECK(test::max_rel_diff(clipped_acc.params, clipped.params) < 1e-5);
  CHECK(test::max_rel_diff(clipped.params, one.params) > 1e-4);  // clipping changed the run
}

// AdamW divides by sqrt(v): where the true gradient is exactly zero (the key bias of
// attention: softmax ignores a constant added to a whole row of scores) the gradient is pure
// rounding noise, and AdamW turns noise of either sign into a full step of +-lr. Those
// parameters cannot agree bitwise between summation orders, but they cannot change the
// output either, so under AdamW the invariant is asserted on the loss at every step.
TEST_CASE("gradient accumulation under AdamW: the same loss at every step") {
  auto adamw = optim::AdamW({.lr = 3e-3});
  Run one = train(1, 8, 0, adamw), acc = train(4, 8, 0, adamw);
  CHECK(test::max_rel_diff(acc.losses, one.losses) < 1e-5);
}

TEST_CASE("the loss falls on learnable data") {
  Run r = train(1, 40, 0, optim::AdamW({.lr = 3e-3}));
  CHECK(r.losses.front() > 3.0);
  CHECK(r.losses.back() < 0.6 * r.losses.front());
}

TEST_CASE("a batch that does not divide into micro-batches names both numbers") {
  Config cfg;
  cfg.set("pipeline.num_micro_batch", 3);
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), cfg, gpt::make_gpt(tiny()), optim::SGD({}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 8, 1);
  CHECK_THROWS_WITH_AS(t.step(loader.next(test::cpu())),
                       doctest::Contains("batch of 8 samples does not divide into pipeline.num_micro_batch = 3"), Error);
  Batch empty{test::ids({0, 8}, 256, 1), test::ids({0, 8}, 256, 2)};  // zero rows: once "a multiple of 3"
  CHECK_THROWS_WITH_AS(t.step(empty), doctest::Contains("the batch has no rows; give every step at least one row"), Error);
}

TEST_CASE("evaluation leaves parameters unchanged and matches the training loss without dropout") {
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 4, 2);
  Batch b = loader.next(test::cpu());
  auto before = test::flat_params(t.model());
  double e = t.evaluate(b);
  CHECK(test::flat_params(t.model()) == before);
  CHECK(t.step(b) == doctest::Approx(e).epsilon(1e-6));
}

// Text is bytes: every one of the 256 byte values is an id in [0, 256), and a GPT with a
// vocabulary of 256 trains on them (bytes >= 128 once became negative ids through a signed char).
TEST_CASE("text of all 256 byte values: ids 0..255, and a byte-level GPT trains on it") {
  auto path = std::filesystem::temp_directory_path() / "epl_all_bytes.txt";
  {
    std::ofstream f(path, std::ios::binary);
    for (int rep = 0; rep < 8; ++rep)
      for (int b = 0; b < 256; ++b) f.put(static_cast<char>((b * 37 + rep) % 256));
  }
  auto text = data::TokenDataset::from_text({path});
  REQUIRE(text.size() == 8 * 256);
  std::vector<int> count(256);
  for (auto id : text.tokens()) {
    REQUIRE(id >= 0);
    REQUIRE(id < 256);
    ++count[static_cast<std::size_t>(id)];
  }
  CHECK(std::count(count.begin(), count.end(), 8) == 256);  // each byte value exactly 8 times
  CHECK(text.tokens()[1] == 37);
  CHECK(text.tokens()[7] == 259 % 256);
  gpt::Shape s{.vocab = 256, .context = 16, .layers = 1, .heads = 2, .dim = 16};
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(s), optim::SGD({.lr = 0.1}));
  data::WindowLoader loader(text, 16, 8, 3);
  for (int step = 0; step < 20; ++step) CHECK(std::isfinite(t.step(loader.next(test::cpu()))));  // 20 steps: > 1 epoch
  std::filesystem::remove(path);
}

TEST_CASE("window loader: every window once per epoch, deterministic per seed") {
  std::vector<std::int32_t> t(101);
  for (int i = 0; i < 101; ++i) t[i] = i;
  auto ds = data::TokenDataset::from_tokens(t, 101);
  data::WindowLoader a(ds, 10, 2, 9), b(ds, 10, 2, 9), c(ds, 10, 2, 10);
  std::vector<int> seen;
  bool differs = false;
  for (int i = 0; i < 5; ++i) {
    Batch x = a.next(test::cpu()), y = b.next(test::cpu()), z = c.next(test::cpu());
    CHECK(test::values<std::int32_t>(x.inputs) == test::values<std::int32_t>(y.inputs));
    differs |= test::values<std::int32_t>(x.inputs) != test::values<std::int32_t>(z.inputs);
    for (int r = 0; r < 2; ++r) {
      auto row = x.inputs.span<std::int32_t>().subspan(r * 10, 10);
      seen.push_back(row[0] / 10);
      CHECK(x.targets.span<std::int32_t>()[r * 10 + 9] == row[9] + 1);  // targets shift by one
    }
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(differs);
  CHECK(a.epoch() == 0);
  (void)a.next(test::cpu());
  CHECK(a.epoch() == 1);
}

TEST_CASE("window loader shards: R ranks together read exactly the single-device batches") {
  std::vector<std::int32_t> t(401);
  for (int i = 0; i < 401; ++i) t[i] = i;
  auto ds = data::TokenDataset::from_tokens(t, 401);
  data::WindowLoader whole(ds, 10, 4, 5);
  std::vector<data::WindowLoader> parts;
  for (int r = 0; r < 4; ++r) parts.emplace_back(ds, 10, 4, 5, data::Shard{r, 4});
  for (int step = 0; step < 25; ++step) {  // 40 windows: two and a half epochs
    auto all = test::values<std::int32_t>(whole.next(test::cpu()).inputs);
    std::vector<double> joined;
    for (auto& p : parts) {
      auto v = test::values<std::int32_t>(p.next(test::cpu()).inputs);
      joined.insert(joined.end(), v.begin(), v.end());
    }
    CHECK(joined == all);
  }
  CHECK_THROWS_WITH_AS(data::WindowLoader(ds, 10, 6, 5, data::Shard{0, 4}),
                       doctest::Contains("global batch of 6 windows does not divide among 4 data-parallel ranks"), Error);
  CHECK_THROWS_WITH_AS(data::WindowLoader(ds, 10, 4, 5, data::Shard{4, 4}), doctest::Contains("rank 4 of 4 ranks is not valid"), Error);
}

TEST_CASE("data files: text bytes, binary ids, corrupt and missing files") {
  auto dir = std::filesystem::temp_directory_path() / "epl_data_test";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "a.txt") << "hello"; }
  auto text = data::TokenDataset::from_text({dir / "a.txt"});
  CHECK(text.size() == 5);
  CHECK(text.vocab_size() == 256);
  CHECK(text.tokens()[1] == 'e');
  { std::ofstream f(dir / "ids.bin", std::ios::binary); std::int32_t v[] = {3, 70000, 1}; f.write(reinterpret_cast<char*>(v), sizeof v); }
  auto bin = data::TokenDataset::from_binary(dir / "ids.bin");
  CHECK(bin.tokens() == std::vector<std::int32_t>{3, 70000, 1});
  CHECK(bin.vocab_size() == 70001);
  { std::ofstream(dir / "bad.bin", std::ios::binary) << "abcde"; }
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary(dir / "bad.bin"), doctest::Contains("is corrupt: 5 bytes"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir / "missing.txt"}), doctest::Contains("cannot open data file"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir}), doctest::Contains("is a directory; name the files inside it"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary(dir), doctest::Contains("is a directory"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({"/dev/null/x"}), doctest::Contains("data file"), Error);
  CHECK_THROWS_WITH_AS(data::WindowLoader(text, 4, 2, 0), doctest::Contains("fewer than one batch of 2"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("token bytes in memory: every int32 id, and the file readers' messages") {
  // id 2^31 - 1 once overflowed int32 computing the vocabulary (found by test/fuzz/tokens_fuzz.cpp)
  const char max_id[] = {5, 0, 0, 0, '\xff', '\xff', '\xff', '\x7f'};
  auto bin = data::TokenDataset::from_binary_bytes(max_id, "max.bin");
  CHECK(bin.tokens() == std::vector<std::int32_t>{5, 2147483647});
  CHECK(bin.vocab_size() == std::int64_t{1} << 31);
  const char odd[] = {1, 0, 0, 0, 1}, negative[] = {1, 0, 0, 0, '\xff', '\xff', '\xff', '\xff'};
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary_bytes(odd, "odd.bin"),
                       doctest::Contains("token file \"odd.bin\" is corrupt: 5 bytes is not a whole number of int32 ids"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary_bytes(negative, "neg.bin"),
                       doctest::Contains("token file \"neg.bin\" is corrupt: negative id -1 at position 1"), Error);
  auto text = data::TokenDataset::from_text_bytes(std::string_view("\xc3\xa9!"));
  CHECK(text.tokens() == std::vector<std::int32_t>{195, 169, 33});
  CHECK(text.vocab_size() == 256);
}

// A NaN or infinite loss or gradient stops the run with the step and the parameter named.
namespace {
struct InfGrad {  // identity whose backward puts an infinity into its parameter's gradient
  nn::Parameter w{Shape{2}, nn::Init::zeros()};
  template <class V> void visit(V&& v) { v("w", w); }
  template <class Ctx> Tensor forward(Ctx&, const Tensor& x) { return x; }
  template <class Ctx> Tensor backward(Ctx& ctx, const Tensor& dy) {
    ctx.device().fill(w.grad, std::numeric_limits<double>::infinity());
    return dy;
  }
};
struct Classifier {
  nn::Linear fc;
  InfGrad bad;
};
}  // namespace

TEST_CASE("a NaN loss or an infinite gradient is an error naming the step and the parameter") {
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  auto ds = test::token_corpus(3000);
  data::WindowLoader loader(ds, 8, 4, 2);
  (void)t.step(loader.next(test::cpu()));
  test::cpu().fill(t.model().head.lm.weight.value, std::nan(""));
  CHECK_THROWS_WITH_AS(t.step(loader.next(test::cpu())), doctest::Contains("the loss is nan at step 2"), Error);

  Trainer<Classifier, optim::SGD> c(test::cpu(), Config{}, Classifier{nn::Linear(3, 2), {}}, optim::SGD({}));
  Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
  CHECK_THROWS_WITH_AS(c.step(b), doctest::Contains("the gradient norm is inf at step 1; the first parameter with a NaN or infinite gradient is 1.w"),
                       Error);
  Trainer<Classifier, optim::SGD> lenient(test::cpu(), Config{}, Classifier{nn::Linear(3, 2), {}}, optim::SGD({}), {.check_finite = false});
  CHECK_NOTHROW(lenient.step(b));
}
}
