// Mixed precision (amp.level = "O1", epl::Amp<...>): each GEMM rounds its operands to bf16 or
// f16 and accumulates in f32; master weights, gradients and optimizer state stay f32; the loss
// scale follows policy::LossScaler's rule and an overflowing step is skipped on every rank.
#include <cstdio>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace test_policy_amp {

namespace {
gpt::Shape tiny() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16}; }

template <class Low>
float rounded(float x) {
  return static_cast<float>(static_cast<Low>(x));
}

// op(a) op(b) computed by the f32 GEMM on copies rounded by hand.
Tensor by_hand(const Tensor& a, const Tensor& b, Shape out, bool bf16) {
  Tensor ra = test::cpu().empty(a.shape(), DType::kF32), rb = test::cpu().empty(b.shape(), DType::kF32);
  for (std::int64_t i = 0; i < a.numel(); ++i) ra.span<float>()[i] = bf16 ? rounded<bfloat16>(a.span<float>()[i]) : rounded<half>(a.span<float>()[i]);
  for (std::int64_t i = 0; i < b.numel(); ++i) rb.span<float>()[i] = bf16 ? rounded<bfloat16>(b.span<float>()[i]) : rounded<half>(b.span<float>()[i]);
  Tensor c = test::cpu().empty(out, DType::kF32);
  test::cpu().gemm(ra, false, rb, true, c);
  return c;
}

struct Run {
  std::vector<double> losses, params, scales;
  std::vector<std::int64_t> skipped;
  MemoryStats memory;
};

Config config(const char* amp, std::int64_t micro = 1, const char* zero = nullptr) {
  Config c;
  if (amp) c.set("amp.level", amp);
  if (zero) c.set("zero.level", zero);
  c.set("pipeline.num_micro_batch", micro);
  return c;
}

template <class Policy, class O = optim::AdamW>
std::vector<Run> train(int n, const Config& cfg, int first_index, int steps, TrainerOptions opt = {.seed = 5, .clip_norm = 0.5},
                       O optimizer = optim::AdamW({.lr = 0.01, .eps = 1e-3})) {
  std::vector<Run> runs(static_cast<std::size_t>(n));
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, first_index + c.rank());
    Trainer<gpt::Gpt, O, Policy> t(ctx, cfg, gpt::make_gpt(tiny()), optimizer, opt);
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    Run& r = runs[static_cast<std::size_t>(c.rank())];
    for (int s = 0; s < steps; ++s) {
      r.losses.push_back(t.step(loader.next(ctx.cpu())));
      r.scales.push_back(t.loss_scale());
      r.skipped.push_back(t.skipped_steps());
    }
    r.memory = memory_stats(ctx.cpu().id());
    t.gather_parameters();
    r.params = test::flat_params(t.model());
  });
  return runs;
}

std::string message_of(auto build) {
  try {
    build();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("amp: a GEMM under bf16 or f16 multiplies its operands rounded to that type and accumulates in f32") {
  const Tensor a = test::random({37, 70}, 1), b = test::random({45, 70}, 2);
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    const auto before = memory_stats(test::cpu().id()).current_of(MemoryCategory::kWorkspace);
    Tensor c = test::cpu().empty({37, 45}, DType::kF32), plain = test::cpu().empty({37, 45}, DType::kF32);
    test::cpu().gemm(a, false, b, true, c, 1, 0, bf16 ? DType::kBF16 : DType::kF16);
    test::cpu().gemm(a, false, b, true, plain);
    // the rounded values' product: bit for bit where the f32 kernel multiplies rounded copies,
    // to f32's rounding where AVX512-BF16's kernel sums them in its own order
    if (bf16 && device::Cpu::bf16_kernel() != device::CpuBf16Kernel::kRoundedF32) CHECK(test::max_rel_diff(test::values(c), test::values(by_hand(a, b, {37, 45}, bf16))) < 1e-6);
    else CHECK(test::values(c) == test::values(by_hand(a, b, {37, 45}, bf16)));
    CHECK(test::max_rel_diff(test::values(c), test::values(plain)) > (bf16 ? 1e-4 : 1e-6));  // and not the f32 product
    CHECK(test::max_rel_diff(test::values(c), test::values(plain)) < (bf16 ? 3e-2 : 3e-3));
    // the rounded copies lived for the call only
    CHECK(memory_stats(test::cpu().id()).current_of(MemoryCategory::kWorkspace) == before);
  }
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
  CHECK(rounded<bfloat16>(1.0f + 0x1p-8f) == 1.0f);
  CHECK(rounded<bfloat16>(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  // f16 overflows past 65504: the product is infinite, which the loss scaler sees
  Tensor big = test::tensor({1, 1}, {70000.0}), one = test::tensor({1, 1}, {1.0}), c = test::cpu().empty({1, 1}, DType::kF32);
  test::cpu().gemm(big, false, one, true, c, 1, 0, DType::kF16);
  CHECK(std::isinf(c.span<float>()[0]));
  test::cpu().gemm(big, false, one, true, c, 1, 0, DType::kBF16);
  CHECK(c.span<float>()[0] == 70144.0f);  // bf16 keeps f32's range: 70000 rounds to 70144
  // the batched GEMM (attention) rounds alike
  const Tensor q = test::random({3, 5, 8}, 3), k = test::random({3, 6, 8}, 4);
  Tensor s = test::cpu().empty({3, 5, 6}, DType::kF32);
  test::cpu().gemm_batched(q, false, k, true, s, 1, 0, DType::kBF16);
  for (std::int64_t i = 0; i < 3; ++i)
    CHECK(test::max_rel_diff(test::values(s.slice(i, i + 1).view({5, 6})),
                             test::values(by_hand(q.slice(i, i + 1).view({5, 8}), k.slice(i, i + 1).view({6, 8}), {5, 6}, true))) < 1e-6);
}

TEST_CASE("amp: the loss scale halves and skips the step on overflow, doubles after growth_interval good steps") {
  policy::LossScaler dynamic({.dynamic = true, .init = 8, .growth_interval = 3, .max_skips = 3});
  auto c = dynamic.update(true);
  CHECK((!c.skipped && c.before == 8 && c.after == 8));
  dynamic.update(true);
  c = dynamic.update(true);  // the third good step in a row
  CHECK((!c.skipped && c.before == 8 && c.after == 16));
  dynamic.update(true);
  c = dynamic.update(false);  // an overflow: skip, halve, and the good steps start again from 0
  CHECK((c.skipped && c.before == 16 && c.after == 8));
  dynamic.update(true);
  dynamic.update(true);
  CHECK(dynamic.scale() == 8);
  CHECK(dynamic.update(true).after == 16);
  CHECK(dynamic.skipped() == 1);
  // max_skips overflows in a row end the run once they take the scale below 1, naming what to do:
  // from 16, the 3rd, 4th and 5th bring it to 2, 1, 0.5
  for (int i = 0; i < 4; ++i) CHECK_NOTHROW(dynamic.update(false));
  CHECK_THROWS_WITH_AS(dynamic.update(false), doctest::Contains("the gradients overflowed at 5 steps in a row, the last with loss scale 1"),
                       Error);
  policy::LossScaler fixed({.dynamic = false, .init = 1024, .growth_interval = 1, .max_skips = 2});
  CHECK(fixed.update(true).after == 1024);  // a fixed scale never moves
  c = fixed.update(false);
  CHECK((c.skipped && c.after == 1024));
  CHECK(fixed.update(true).after == 1024);  // a good step ends the run of overflows
  fixed.update(false);
  CHECK_THROWS_WITH_AS(fixed.update(false), doctest::Contains("lower amp.loss_scale or set it to \"dynamic\""), Error);
  CHECK_THROWS_WITH_AS(policy::LossScaler({.init = 0.5}), doctest::Contains("the loss scale must be a number from 1 to 2^64, got 0.5"), Error);
  // a resume: a dynamic rule goes on from the saved scale; a fixed one keeps the scale it was given
  // (a stranger resumed a dynamic run at 3.1e7 with amp.loss_scale=1024: every step overflowed)
  const policy::LossScaler::State saved{.scale = 3.125e7, .good = 5, .skipped = 6, .in_a_row = 0};
  policy::LossScaler resumed_dynamic({.dynamic = true, .init = 8}), resumed_fixed({.dynamic = false, .init = 1024});
  resumed_dynamic.restore(saved);
  resumed_fixed.restore(saved);
  CHECK(resumed_dynamic.scale() == 3.125e7);
  CHECK(resumed_fixed.scale() == 1024);
  CHECK(resumed_fixed.skipped() == 6);  // the count of the run so far goes on
}

TEST_CASE("amp: bf16 and f16 O1 train within 2% of f32 over 40 steps with f32 master weights, and no more memory") {
  const auto f32 = train<Policies<Amp<amp::BF16>>>(1, config(""), 600, 40);
  const auto bf16 = train<Policies<Amp<amp::BF16>>>(1, config("O1"), 601, 40);
  const auto f16 = train<Policies<Amp<amp::FP16>>>(1, config(nullptr), 602, 40);  // unset: the compiled policy
  const auto first = f32[0].losses.front(), last = f32[0].losses.back();
  CHECK(last < 0.7 * first);  // it learns
  for (const auto* r : {&bf16[0], &f16[0]}) {
    CHECK(test::max_rel_diff(r->losses, f32[0].losses) < 2e-2);
    CHECK(test::max_rel_diff(r->losses, f32[0].losses) > 1e-6);  // the GEMMs did round
    CHECK(r->skipped.back() == 0);
    CHECK(r->scales.back() == 65536);
    // parameters, gradients and optimizer state stay f32: the same bytes as the f32 run
    for (auto cat : {MemoryCategory::kParameters, MemoryCategory::kGradients, MemoryCategory::kOptimizerState})
      CHECK(r->memory.current_of(cat) == f32[0].memory.current_of(cat));
    CHECK(r->memory.current_of(MemoryCategory::kWorkspace) == f32[0].memory.current_of(MemoryCategory::kWorkspace));
  }
  CHECK(f32[0].scales.back() == 1);  // off: no loss scale
}

// SGD's step is proportional to the gradient it reads: a loss scale left on it, or a clip
// coefficient of a norm that still carries the scale, moves the parameters far from f32's.
TEST_CASE("amp: under SGD, with clipping that bites and without, the update reads the gradients at the loss's own scale") {
  std::vector<std::vector<double>> f32_params;
  for (const double clip : {0.0, 0.05}) {
    CAPTURE(clip);
    const TrainerOptions opt{.seed = 5, .clip_norm = clip};
    const optim::SGD sgd({.lr = 0.5});
    const auto f32 = train<Policies<Amp<amp::BF16>>>(1, config(""), 610, 6, opt, sgd);
    const auto bf16 = train<Policies<Amp<amp::BF16>>>(1, config("O1"), 611, 6, opt, sgd);
    CHECK(bf16[0].scales.back() == 65536);
    CHECK(test::max_rel_diff(bf16[0].losses, f32[0].losses) < 1e-2);
    CHECK(test::max_rel_diff(bf16[0].params, f32[0].params) < 2e-2);
    CHECK(f32[0].losses.back() < f32[0].losses.front());  // it learns
    f32_params.push_back(f32[0].params);
  }
  CHECK(test::max_rel_diff(f32_params[0], f32_params[1]) > 1e-2);  // the clip bit
}

// With clipping (train's clip_norm 0.5), so a norm that reads gradients the loss scale was not
// taken off (ZeRO stage 1 once did: unscale touched the owned slices, the norm the whole) shows.
TEST_CASE("amp: 2 and 4 thread ranks, with accumulation and ZeRO 1, 2 and 3, train like one device under AMP") {
  for (std::int64_t micro : {1, 2})
    for (int n : {2, 4}) {
      CAPTURE(micro);
      CAPTURE(n);
      using P = Policies<Zero<3>, Amp<amp::BF16>>;
      const auto one = train<P>(1, config("O1", 1, ""), 620, 5);
      std::vector<std::vector<Run>> runs{train<P>(n, config("O1", micro, ""), 630, 5)};
      for (const char* level : {"v0", "v1", "v2"}) runs.push_back(train<P>(n, config("O1", micro, level), 640, 5));
      for (std::size_t z = 0; z < runs.size(); ++z)
        for (const auto& r : runs[z]) {
          CAPTURE(z);
          CHECK(test::max_rel_diff(r.losses, one[0].losses) <= 1e-5);
          CHECK(test::max_rel_diff(r.params, one[0].params) <= 1e-5);
        }
    }
}

// Gradients on the fp16 wire (communication.fp16) already carry the loss scale, which is then the
// wire's scale: communication.fp16_scale would multiply them again past f16's range.
TEST_CASE("amp: with communication.fp16 the loss scale is the wire's scale, so bf16 steps do not overflow") {
  Config plain = config("O1"), wire = config("O1");
  wire.set("communication.fp16", true);
  const auto f32_wire = train<Policies<Amp<amp::BF16>>>(2, plain, 690, 8);
  const auto f16_wire = train<Policies<Amp<amp::BF16>>>(2, wire, 691, 8);
  for (const auto& r : f16_wire) {
    CHECK(r.skipped.back() == 0);
    CHECK(r.scales.back() == 65536);
    CHECK(test::max_rel_diff(r.losses, f32_wire[0].losses) < 1e-2);
    CHECK(test::max_rel_diff(r.losses, f32_wire[0].losses) > 0);  // the wire did round
  }
}

TEST_CASE("amp: f16 with a loss scale too large skips those steps on every rank, untouched, then backs off and grows") {
  TrainerOptions opt{.seed = 5, .clip_norm = 0.5, .amp_init_scale = 0x1p28, .amp_growth_interval = 2};
  const auto one = train<Policies<Zero<2>, Amp<amp::FP16>>>(1, config("O1"), 660, 24, opt);
  const auto two = train<Policies<Zero<2>, Amp<amp::FP16>>>(2, config("O1", 2, "v1"), 661, 24, opt);  // ZeRO stage 2: each rank holds a shard
  for (const auto* runs : {&one, &two}) {
    const auto& r = (*runs)[0];
    // the scale too large at first: the first steps overflow, one after another, until it is small enough
    std::size_t first_good = 0;
    while (first_good < r.skipped.size() && r.skipped[first_good] == static_cast<std::int64_t>(first_good) + 1) ++first_good;
    CAPTURE(first_good);
    CHECK(first_good >= 4);
    CHECK(first_good < r.skipped.size());
    // the trainer moved the scale by the rule: replayed on the steps' verdicts, the scaler gives the same scales
    policy::LossScaler replay({.dynamic = true, .init = 0x1p28, .growth_interval = 2});
    bool grew = false;
    for (std::size_t s = 0; s < r.scales.size(); ++s) {
      CAPTURE(s);
      const bool overflow = r.skipped[s] > (s == 0 ? 0 : r.skipped[s - 1]);
      const auto c = replay.update(!overflow);
      grew = grew || c.after > c.before;
      CHECK(r.scales[s] == c.after);
    }
    CHECK(grew);  // two good steps in a row doubled it
    // every rank saw the same overflows (the global norm decides) and holds the same parameters
    for (const auto& rank : *runs) {
      CHECK(rank.skipped == r.skipped);
      CHECK(rank.scales == r.scales);
      CHECK(rank.params == r.params);
    }
  }
  // each rank scales its loss by S / 2 (its rows are half the batch), so its GEMMs see one device's
  // magnitudes and it overflows at the same steps
  CHECK(two[0].skipped == one[0].skipped);
  CHECK(two[0].scales == one[0].scales);
  REQUIRE(one[0].skipped[3] == 4);  // the one-rank run's first 4 steps overflowed
  // a skipped step leaves the parameters bit for bit as they were
  const auto untouched = train<Policies<Amp<amp::FP16>>>(1, config("O1"), 670, 4, opt);
  const auto initial = train<Policies<Amp<amp::FP16>>>(1, config("O1"), 671, 0, opt);
  CHECK(untouched[0].params == initial[0].params);
}

TEST_CASE("amp: a program built without it, a key without amp.level, and per-replica clipping are named") {
  device::Cpu d(680);
  const auto without = message_of([&] {
    Trainer<gpt::Gpt, optim::SGD> t(d, config("O1"), gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(without.find("amp.level = \"O1\" but this program was built without mixed precision; build the Trainer with "
                     "epl::Policies<epl::Amp<epl::amp::BF16>>") != std::string::npos);
  const auto log_only = message_of([&] {
    Config c = config(nullptr);
    c.set("amp.debug_log", true);
    Trainer<gpt::Gpt, optim::SGD> t(d, c, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(log_only.find("amp.debug_log = true but mixed precision is off (amp.level = \"\", and the program has no epl::Amp<...>)") !=
        std::string::npos);
  const auto scale_off = message_of([&] {
    Config c = config("");
    c.set("amp.loss_scale", "128");
    Trainer<gpt::Gpt, optim::SGD, Policies<Amp<amp::BF16>>> t(d, c, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(scale_off.find("amp.loss_scale is set but mixed precision is off (amp.level = \"\")") != std::string::npos);
  const auto replica_clip = message_of([&] {
    Config c = config("O1");
    c.set("communication.clip_after_allreduce", false);
    Trainer<gpt::Gpt, optim::SGD, Policies<Amp<amp::BF16>>> t(d, c, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}), {.clip_norm = 1});
  });
  CHECK(replica_clip.find("amp.level = \"O1\" with communication.clip_after_allreduce=false is not supported") != std::string::npos);
  const auto wire_scale = message_of([&] {
    Config c = config("O1");
    c.set("communication.fp16", true);
    c.set("communication.fp16_scale", 128);
    Trainer<gpt::Gpt, optim::SGD, Policies<Amp<amp::BF16>>> t(d, c, gpt::make_gpt(tiny()), optim::SGD({.lr = 0.1}));
  });
  CHECK(wire_scale.find("communication.fp16_scale = 128 with amp.level = \"O1\": the gradients already carry the loss scale") !=
        std::string::npos);
  // a fixed scale that overflows every step ends the run at the 30th, naming the key
  const auto fixed = message_of([&] {
    Config c = config("O1");
    c.set("amp.loss_scale", "1e15");
    (void)train<Policies<Amp<amp::FP16>>>(1, c, 681, 31);
  });
  CHECK(fixed.find("the gradients overflowed at 30 steps in a row, the last with loss scale 1e+15") != std::string::npos);
  CHECK(fixed.find("lower amp.loss_scale or set it to \"dynamic\"") != std::string::npos);
}
}
}  // namespace test_policy_amp
