// The CPU backend against plain loops written independently here.
#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <string_view>
#include "../helpers.hpp"
#include "gemm_reference.hpp"

using namespace epl;
using test::check_gemm;

TEST_SUITE("cpu") {
// AMP's operand rounding on CPUs without native bf16 runs as a branch-free loop the compiler
// vectorizes: it must give bfloat16's bits exactly (ties to even, NaN quiet with its sign,
// overflow to infinity, subnormals), in the vector body and its scalar tail.
TEST_CASE("amp: rounding f32 through bf16 gives bfloat16's bits for ties, NaN, infinities and subnormals") {
  std::vector<float> x = {1.0f, 1.00390625f, 1.01171875f, -1.00390625f, 3.4028235e38f, -3.4028235e38f, 1e-40f, -1e-40f, -0.0f, 0.0f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff812345u), 3.3895314e38f, 65504.0f};
  for (int i = 0; i < 1000; ++i) x.push_back(static_cast<float>((uniform01(11, static_cast<std::uint64_t>(i)) - 0.5) * std::pow(2.0, i % 60 - 30)));
  std::vector<float> y(x.size());
  epl::detail::cpu::round_through<bfloat16>(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    CAPTURE(x[i]);
    CHECK(std::bit_cast<std::uint32_t>(y[i]) == std::bit_cast<std::uint32_t>(static_cast<float>(bfloat16(x[i]))));
  }
  CHECK(y[1] == 1.0f);         // a tie rounds to the even neighbour
  CHECK(y[2] == 1.015625f);    // and up when that is the even one
  CHECK(std::isinf(y[4]));     // past bf16's largest finite value
  CHECK(std::isnan(y[14]));    // a signalling NaN comes back quiet
}

TEST_CASE("gemm: an empty tensor (a Parameter never materialized) is named, not reported as a [1, 1] shape") {
  const auto& d = test::cpu();
  const Tensor a = d.zeros({4, 5}, DType::kF32), c = d.zeros({4, 3}, DType::kF32), none;
  CHECK_THROWS_WITH_AS(d.gemm(a, false, none, false, c), doctest::Contains("gemm: b is an empty tensor (no storage); a Parameter whose "
                                                                           "layer's visit() does not list it is never materialized"), Error);
  CHECK_THROWS_WITH_AS(d.gemm_batched(none, false, a, false, c), doctest::Contains("gemm_batched: a is an empty tensor"), Error);
}

TEST_CASE("gemm: every transpose combination, f32 and f64, alpha and beta") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      check_gemm<float>(ta, tb);
      check_gemm<double>(ta, tb);
    }
}

// epl's AVX-512 kernel packs 14-row and 32-column panels from 16 x 16 transposed blocks, in
// blocks of 504 rows and 384 along k: these shapes end mid-panel, mid-block and mid-transpose.
TEST_CASE("gemm: f32 shapes that end inside every block of the packed kernel, beta 0 and 2") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 2.0}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        check_gemm<float>(ta, tb, 521, 70, 400, beta);
        check_gemm<float>(ta, tb, 17, 4129, 29, beta);  // past two blocks of columns (AVX-512's 2048, AVX2's 4080)
        check_gemm<float>(ta, tb, 15, 33, 17, beta);
        check_gemm<float>(ta, tb, 1, 1, 1, beta);
      }
}

// `inputs` is the type the operands are rounded to: an id type is refused, not taken for f32.
TEST_CASE("gemm: inputs of an id type is named, with what to give") {
  const auto& cpu = test::cpu();
  const Tensor a = cpu.zeros({4, 3}, DType::kF32), b = cpu.zeros({3, 5}, DType::kF32), c = cpu.zeros({4, 5}, DType::kF32);
  for (const DType t : {DType::kI32, DType::kI64}) {
    CHECK_THROWS_WITH_AS(cpu.gemm(a, false, b, false, c, 1, 0, t), doctest::Contains("is not a type to round the operands to; give bf16 or f16"),
                         Error);
    CHECK_THROWS_WITH_AS(cpu.gemm_batched(a.view({1, 4, 3}), false, b.view({1, 3, 5}), false, c.view({1, 4, 5}), 1, 0, t),
                         doctest::Contains("gemm_batched: inputs = "), Error);
  }
  for (const DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) CHECK_NOTHROW(cpu.gemm(a, false, b, false, c, 1, 0, t));
}

// An empty inner dimension (op(a) [m, 0]) is BLAS's: c = beta c (a stranger's [3, 0] by [0, 5] was
// refused, its a reported as [0, 0]).
TEST_CASE("gemm: op(a) of no columns gives beta c, for each transpose and dtype") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      check_gemm<float>(ta, tb, 3, 5, 0, 2.0);
      check_gemm<float>(ta, tb, 3, 5, 0, 0.0);
      check_gemm<double>(ta, tb, 40, 70, 0, 2.0);
    }
}

// A product of one k block whose C is at least sgemm::kStreamBytes writes C with non-temporal
// stores where the kernel has them (AVX-512), and plain stores on rows not 64-byte aligned.
TEST_CASE("gemm: a large C of one k block, streamed past the caches, aligned rows and not, beta 0 and 2") {
  detail::cpu::set_threads(1);
  for (const std::int64_t n : {1040, 1041})  // rows 64-byte aligned; then not
    for (double beta : {0.0, 2.0}) {
      CAPTURE(n);
      CAPTURE(beta);
      REQUIRE(1031 * n * 4 >= detail::cpu::sgemm::kStreamBytes);
      check_gemm<float>(false, true, 1031, n, 64, beta);
      check_gemm<float>(true, false, 1031, n, 64, beta);
    }
}

// A build (epl::precompiled's, with EPL_NATIVE's -march=native) run on a CPU without its
// instruction sets says which it lacks before main, instead of stopping on an illegal instruction.
TEST_CASE("isa: what a build needs that the CPU lacks is named; this build runs here; the f32 kernel is named") {
  using detail::cpu::Isa;
  Isa built, zen3;
  built.avx2 = built.avx512 = built.avx512_bf16 = true;
  zen3.avx2 = true;
  CHECK(detail::cpu::missing_isa(built, zen3) == "AVX-512 (F and BW), AVX512-BF16");
  CHECK(detail::cpu::missing_isa(zen3, built) == "");
  CHECK(detail::cpu::missing_isa(built, Isa{}) == "AVX2 with FMA and F16C, AVX-512 (F and BW), AVX512-BF16");
  CHECK(detail::cpu::missing_isa(detail::cpu::compiled_isa(), detail::cpu::isa()) == "");
  const std::string kernel = device::Cpu::f32_kernel();
  CHECK(kernel == (detail::cpu::compiled_isa().avx512 ? "avx512" : detail::cpu::compiled_isa().avx2 ? "avx2" : "eigen"));
}

// A GEMM's mismatch names the sizes that differ, and an integer tensor reaching it what ids are for.
TEST_CASE("gemm: a width that differs from the weight's is named; an i32 tensor is named as ids") {
  const auto& d = test::cpu();
  const Tensor x = d.zeros({64, 51}, DType::kF32), w = d.zeros({48, 96}, DType::kF32), y = d.zeros({64, 96}, DType::kF32);
  CHECK_THROWS_WITH_AS(d.gemm(x, false, w, false, y), doctest::Contains("op(a)'s 51 columns must equal op(b)'s 48 rows"), Error);
  const Tensor ids = d.zeros({64, 48}, DType::kI32);
  CHECK_THROWS_WITH_AS(d.gemm(ids, false, w, false, y), doctest::Contains("integer tensors are ids"), Error);
}

// The AVX2 kernel (sgemm_avx2.hpp), whichever kernel this build's GEMM uses: 6 x 16 register
// tiles, 8 x 8 transposed packing, blocks of 168 rows, 256 k and 4080 columns. These shapes end
// mid-tile, mid-transpose and mid-block, with AMP's operands rounded to bf16 and f16 as packed.
TEST_CASE("gemm: the AVX2 kernel, every transpose, f32 and rounded bf16 and f16, shapes that end inside every block") {
#if defined(EPL_SGEMM_AVX2)
  namespace avx2 = detail::cpu::sgemm::avx2;
  const test::Multiply avx2_gemm = [](const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha, double beta,
                                      DType inputs) {
    const auto run = [&]<class Round>() {
      detail::cpu::sgemm::gemm<avx2::F32<Round>>(ta, tb, c.dim(0), c.dim(1), ta ? a.dim(0) : a.dim(1), static_cast<float>(alpha),
                                                 a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), static_cast<float>(beta),
                                                 c.data<float>(), c.dim(1));
    };
    if (inputs == DType::kBF16) return run.operator()<avx2::RoundBF16>();
    if (inputs == DType::kF16) return run.operator()<avx2::RoundF16>();
    run.operator()<avx2::Keep>();
  };
  for (DType inputs : {DType::kF32, DType::kBF16, DType::kF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(inputs);
        CAPTURE(ta);
        CAPTURE(tb);
        check_gemm<float>(ta, tb, 175, 70, 300, 0.0, inputs, avx2_gemm);
        check_gemm<float>(ta, tb, 15, 33, 17, 2.0, inputs, avx2_gemm);
        check_gemm<float>(ta, tb, 6, 16, 256, 1.0, inputs, avx2_gemm, 1.0);  // whole blocks, alpha 1
        check_gemm<float>(ta, tb, 3, 4100, 9, 0.0, inputs, avx2_gemm);      // past a block of columns
        check_gemm<float>(ta, tb, 1, 1, 1, 2.0, inputs, avx2_gemm);
      }
  check_gemm<float>(false, true, 40, 50, 1601, 0.0, DType::kBF16, avx2_gemm);  // k past six blocks
#else
  MESSAGE("this build has no AVX2 with FMA and F16C: the AVX2 kernel is not compiled");
#endif
}

// AMP's GEMM: op(a) and op(b) rounded to bf16 or f16, products summed in f32. With AVX512-BF16
// the packed kernel rounds bf16 pairs of k as it packs (odd k pads a zero), in blocks of 768
// along k; otherwise, and for f16, rounded copies go through the f32 GEMM.
TEST_CASE("gemm: bf16 and f16 operands, every transpose, shapes that end inside every block, 1 and 2 threads") {
  const int before = detail::cpu::threads();
  for (int threads : {1, 2}) {
    detail::cpu::set_threads(threads);
    for (DType inputs : {DType::kBF16, DType::kF16})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          CAPTURE(threads);
          CAPTURE(inputs);
          CAPTURE(ta);
          CAPTURE(tb);
          check_gemm<float>(ta, tb, 521, 70, 1601, 0.0, inputs);
          check_gemm<float>(ta, tb, 15, 33, 17, 2.0, inputs);
          check_gemm<float>(ta, tb, 1, 1, 1, 2.0, inputs);
          check_gemm<float>(ta, tb, 301, 150, 90, 0.0, inputs);
        }
  }
  detail::cpu::set_threads(before);
}

TEST_CASE("gemm: large enough to be split across threads, by rows and by columns") {
  detail::cpu::set_threads(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      check_gemm<float>(ta, tb, 301, 150, 90);  // m > n: row blocks
      check_gemm<double>(ta, tb, 150, 301, 90);  // n > m: column blocks
    }
}

TEST_CASE("gemm: shape mismatch names both operands") {
  Tensor a = test::random({2, 3}, 1), b = test::random({4, 5}, 2), c = test::random({2, 5}, 3);
  CHECK_THROWS_WITH_AS(test::cpu64().gemm(a, false, b, false, c), doctest::Contains("op(a) is [2, 3], op(b) is [4, 5]"), Error);
}

TEST_CASE("gemm_batched equals one gemm per block") {
  auto& d = test::cpu64();
  Tensor a = test::random<double>({4, 3, 5}, 1), b = test::random<double>({4, 6, 5}, 2);
  Tensor c = d.empty({4, 3, 6}, DType::kF64);
  d.gemm_batched(a, false, b, true, c);
  for (std::int64_t i = 0; i < 4; ++i) {
    Tensor ci = d.empty({3, 6}, DType::kF64);
    d.gemm(a.slice(i, i + 1).view({3, 5}), false, b.slice(i, i + 1).view({6, 5}), true, ci);
    CHECK(test::values<double>(c.slice(i, i + 1).view({3, 6})) == test::values<double>(ci));
  }
}

// Causal attention's GEMMs skip a triangle (device::Triangle): the entries kept are the dense
// product's bit for bit on epl's packed kernels, f32 and every bf16 kernel this CPU runs, for sizes
// that end inside a row block and that span several (within one k block of the kernel: kUpperA's
// blocks start at its row block); on Eigen's product (a build without AVX2 or AVX-512) within
// rounding. kLowerC leaves the upper triangle to the caller.
TEST_CASE("gemm_batched over a triangle keeps the dense product's entries bit for bit") {
  using device::Triangle;
  auto& d = test::cpu();
  std::vector<std::optional<device::CpuBf16Kernel>> kernels = {std::nullopt};
  for (auto k : {device::CpuBf16Kernel::kRoundedF32, device::CpuBf16Kernel::kAvx512Bf16, device::CpuBf16Kernel::kAmx})
    if (epl::detail::cpu::bf16_kernel_runs(k)) kernels.push_back(k);
  for (const std::int64_t t : {40, 130, 256}) {
    for (const DType inputs : {DType::kF32, DType::kBF16}) {
      for (const auto& kernel : inputs == DType::kF32 ? std::vector<std::optional<device::CpuBf16Kernel>>{std::nullopt} : kernels) {
        if (kernel) device::Cpu::use_bf16_kernel(*kernel);
        CAPTURE(t);
        CAPTURE(name_of(inputs));
        CAPTURE(kernel ? device::name(*kernel) : "chosen");
        const std::int64_t batch = 3, hd = 24;
        Tensor q = test::random({batch, t, hd}, 1), k = test::random({batch, t, hd}, 2), p = test::random({batch, t, t}, 3);
        for (std::int64_t b = 0; b < batch; ++b)  // probabilities: zero above the diagonal
          for (std::int64_t i = 0; i < t; ++i)
            for (std::int64_t j = i + 1; j < t; ++j) p.span<float>()[(b * t + i) * t + j] = 0;
        const bool packed = std::string_view(epl::detail::cpu::f32_kernel()) != "eigen";
        auto same = [&](const std::vector<double>& x, const std::vector<double>& y) {
          return packed ? x == y : test::max_rel_diff(x, y) < 1e-5;
        };
        auto both = [&](const Tensor& a, bool ta, const Tensor& b, bool tb, Shape out, Triangle tri) {
          Tensor dense = d.zeros(out, DType::kF32), skipped = d.zeros(out, DType::kF32);
          d.gemm_batched(a, ta, b, tb, dense, 1, 0, inputs);
          d.gemm_batched(a, ta, b, tb, skipped, 1, 0, inputs, tri);
          return std::pair{test::values(dense), test::values(skipped)};
        };
        {  // scores q k^T: the lower triangle
          auto [dense, skipped] = both(q, false, k, true, {batch, t, t}, Triangle::kLowerC);
          std::int64_t differ = 0;
          for (std::int64_t b = 0; b < batch; ++b)
            for (std::int64_t i = 0; i < t; ++i)
              for (std::int64_t j = 0; j <= i; ++j) {
                const double x = dense[(b * t + i) * t + j], y = skipped[(b * t + i) * t + j];
                differ += packed ? x != y : std::abs(x - y) > 1e-5 * std::max(1.0, std::abs(x));
              }
          CHECK(differ == 0);
        }
        {  // p v and p^T v: whole results
          auto [dense, skipped] = both(p, false, q, false, {batch, t, hd}, Triangle::kLowerA);
          CHECK(same(dense, skipped));
          auto [dense_t, skipped_t] = both(p, true, q, false, {batch, t, hd}, Triangle::kUpperA);
          CHECK(same(dense_t, skipped_t));
          CHECK(test::max_rel_diff(skipped, dense_t) > 0.01);  // the two are different products
        }
        device::Cpu::use_bf16_kernel(std::nullopt);
      }
    }
  }
  // and the work is left out: NaN planted where only skipped products read it stays out of the
  // results (the dense product is all NaN there), and c's far upper triangle is not written
  const std::int64_t t = 130, rows = epl::detail::cpu::kTriangleRows, hd = 8;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto block_end = [&](std::int64_t i) { return std::min(t, (i / rows + 1) * rows); };
  // two probability-like matrices (zero above the diagonal): p multiplied as it is, pt transposed
  Tensor v = test::random({1, t, hd}, 4), p = test::random({1, t, t}, 5), pt = test::random({1, t, t}, 6);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = i + 1; j < t; ++j) {
      p.span<float>()[i * t + j] = j >= block_end(i) ? nan : 0.0f;                 // past row i's block's last column
      pt.span<float>()[i * t + j] = i < j / rows * rows ? nan : 0.0f;              // before column j's block's first row
    }
  Tensor out = d.zeros({1, t, hd}, DType::kF32), scores = d.zeros({1, t, t}, DType::kF32);
  d.gemm_batched(p, false, v, false, out, 1, 0, DType::kF32, Triangle::kLowerA);
  CHECK(std::ranges::none_of(test::values(out), [](double x) { return std::isnan(x); }));
  d.gemm_batched(pt, true, v, false, out, 1, 0, DType::kF32, Triangle::kUpperA);
  CHECK(std::ranges::none_of(test::values(out), [](double x) { return std::isnan(x); }));
  d.fill(scores, 7.0);
  d.gemm_batched(v, false, v, true, scores, 1, 0, DType::kF32, Triangle::kLowerC);
  CHECK(scores.span<float>()[t - 1] == 7.0f);  // row 0's last column: past its row block's 64 + 16
  d.gemm_batched(p, false, v, false, out, 1, 0, DType::kF32);
  CHECK(std::isnan(test::values(out)[0]));  // the dense product does read them
  d.gemm_batched(pt, true, v, false, out, 1, 0, DType::kF32);
  CHECK(std::isnan(test::values(out)[(t - 1) * hd]));

  const Tensor a = d.zeros({2, 3, 4}, DType::kF32), c = d.zeros({2, 3, 5}, DType::kF32);
  CHECK_THROWS_WITH_AS(d.gemm_batched(a, false, d.zeros({2, 4, 5}, DType::kF32), false, c, 1, 0, DType::kF32, Triangle::kLowerC),
                       doctest::Contains("gemm_batched: a triangle (of c) needs a square matrix; c is [3, 5]"), Error);
  CHECK_THROWS_WITH_AS(d.gemm_batched(a, false, d.zeros({2, 4, 5}, DType::kF32), false, c, 1, 0, DType::kF32, Triangle::kUpperA),
                       doctest::Contains("a triangle (of op(a)) needs a square matrix; c is [3, 5] and op(a) [3, 4]"), Error);
  CHECK_THROWS_WITH_AS(d.gemm_batched(a, false, d.zeros({2, 4, 5}, DType::kF32), false, c, 1, 0, DType::kF32, static_cast<Triangle>(7)),
                       doctest::Contains("gemm_batched: triangle 7 is not a device::Triangle (kNone, kLowerC, kLowerA, kUpperA)"), Error);
}

TEST_CASE("cast: floats to integers convert whole numbers and refuse what the integer type cannot hold") {
  auto& d = test::cpu();
  auto f = d.empty({5}, DType::kF32);
  auto ids = d.empty({5}, DType::kI32);
  const float ok[] = {0.0f, 3.0f, -7.0f, 2147483520.0f, -2147483648.0f};
  std::copy(std::begin(ok), std::end(ok), f.span<float>().begin());
  d.cast(f, ids);
  CHECK(std::vector<std::int32_t>(ids.span<std::int32_t>().begin(), ids.span<std::int32_t>().end()) ==
        std::vector<std::int32_t>{0, 3, -7, 2147483520, -2147483647 - 1});
  // NaN, infinities and values past the type's range had no defined conversion (NaN became INT_MIN)
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e30f, 2147483648.0f}) {
    CAPTURE(bad);
    f.span<float>()[2] = bad;
    CHECK_THROWS_WITH_AS(d.cast(f, ids), doctest::Contains("cast of f32 [5] to i32: element 2 is"), Error);
  }
  auto longs = d.empty({5}, DType::kI64);
  f.span<float>()[2] = 1e30f;
  CHECK_THROWS_WITH_AS(d.cast(f, longs), doctest::Contains("which i64 cannot hold"), Error);
  f.span<float>()[2] = 4e18f;
  d.cast(f, longs);
  CHECK(longs.span<std::int64_t>()[2] == static_cast<std::int64_t>(4e18f));
}

TEST_CASE("element-wise: add, mul, axpy, scale, fill, bias broadcast and its gradient") {
  auto& d = test::cpu64();
  Tensor a = test::tensor({2, 3}, {1, 2, 3, 4, 5, 6}), b = test::tensor({2, 3}, {6, 5, 4, 3, 2, 1});
  Tensor out = d.empty({2, 3}, DType::kF32);
  d.add(a, b, out);
  CHECK(test::values(out) == std::vector<double>(6, 7.0));
  d.mul(a, b, out);
  CHECK(test::values(out) == std::vector<double>{6, 10, 12, 12, 10, 6});
  d.axpy(2.0, a, out);
  CHECK(test::values(out) == std::vector<double>{8, 14, 18, 20, 20, 18});
  d.scale(out, 0.5);
  CHECK(test::values(out) == std::vector<double>{4, 7, 9, 10, 10, 9});
  d.add_row_vector(out, test::tensor({3}, {1, 0, -1}));
  CHECK(test::values(out) == std::vector<double>{5, 7, 8, 11, 10, 8});
  Tensor col = test::tensor({3}, {1, 1, 1});
  d.sum_rows(out, col, 1.0);
  CHECK(test::values(col) == std::vector<double>{17, 18, 17});
  d.fill(out, 2.5);
  CHECK(test::values(out) == std::vector<double>(6, 2.5));
  CHECK(d.sum_squares(a) == doctest::Approx(91));
  CHECK_THROWS_WITH_AS(d.add(a, test::random({4}, 1), out), doctest::Contains("differ in size"), Error);
}

TEST_CASE("activations: GELU (tanh form) and ReLU with their derivatives") {
  auto& d = test::cpu64();
  Tensor x = test::tensor<double>({5}, {-3, -0.5, 0, 0.7, 2});
  Tensor y = d.empty({5}, DType::kF64), dy = test::tensor<double>({5}, {1, 2, 3, 4, 5}), dx = d.empty({5}, DType::kF64);
  d.gelu(x, y);
  auto xv = test::values<double>(x);
  for (int i = 0; i < 5; ++i) {
    double u = xv[i];
    double g = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
    CHECK(test::values<double>(y)[i] == doctest::Approx(g).epsilon(1e-14));
  }
  d.gelu_backward(x, dy, dx);
  for (int i = 0; i < 5; ++i) {
    auto f = [](double u) { return 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u))); };
    double num = (f(xv[i] + 1e-6) - f(xv[i] - 1e-6)) / 2e-6;
    CHECK(test::values<double>(dx)[i] == doctest::Approx((i + 1) * num).epsilon(1e-8));
  }
  d.relu(x, y);
  CHECK(test::values<double>(y) == std::vector<double>{0, 0, 0, 0.7, 2});
  d.relu_backward(x, dy, dx);
  CHECK(test::values<double>(dx) == std::vector<double>{0, 0, 0, 4, 5});
  // a NaN passes through, as PyTorch's relu: bad data must reach the loss, not become 0
  x.span<double>()[1] = std::nan("");
  d.relu(x, y);
  CHECK(std::isnan(test::values<double>(y)[1]));
}

TEST_CASE("layer_norm: normalised rows, saved statistics") {
  auto& d = test::cpu64();
  Tensor x = test::tensor<double>({2, 4}, {1, 2, 3, 4, -1, 0, 1, 6});
  Tensor g = test::tensor<double>({4}, {1, 2, 1, 1}), b = test::tensor<double>({4}, {0, 0, 1, 0});
  Tensor y = d.empty({2, 4}, DType::kF64), mean = d.empty({2}, DType::kF64), rstd = d.empty({2}, DType::kF64);
  d.layer_norm(x, g, b, y, mean, rstd, 1e-5);
  CHECK(test::values<double>(mean) == std::vector<double>{2.5, 1.5});
  const double r0 = 1 / std::sqrt(1.25 + 1e-5);
  CHECK(test::values<double>(rstd)[0] == doctest::Approx(r0).epsilon(1e-14));
  CHECK(test::values<double>(y)[1] == doctest::Approx(2 * (2 - 2.5) * r0).epsilon(1e-14));
  CHECK(test::values<double>(y)[2] == doctest::Approx((3 - 2.5) * r0 + 1).epsilon(1e-14));
}

TEST_CASE("layer_norm_backward: a double loop's values for row counts that end inside a chunk, the same bits on 1 and 2 threads") {
  // the parameter gradients are summed chunk by chunk (kLayerNormChunkRows rows), then the chunks
  // in order: a chunk that ends early must count each row once, and the thread count must not
  // change the order of the sums
  const std::int64_t chunk = epl::detail::cpu::kLayerNormChunkRows;
  for (std::int64_t rows : {std::int64_t{1}, chunk - 1, chunk, chunk + 1, 3 * chunk + 5}) {
    for (std::int64_t cols : {7, 70}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const auto value = [](std::int64_t i, int seed) { return static_cast<double>(static_cast<float>(std::sin(0.37 * i + seed))); };
      std::vector<double> x0(rows * cols), dy0(rows * cols), g0(cols), dg0(cols), db0(cols);
      for (std::int64_t i = 0; i < rows * cols; ++i) x0[i] = 2 * value(i, 1), dy0[i] = value(i, 2);
      for (std::int64_t j = 0; j < cols; ++j) g0[j] = 1 + 0.5 * value(j, 3), dg0[j] = value(j, 4), db0[j] = value(j, 5);
      std::vector<std::vector<double>> dx, dg, db;  // f32 values, held in double
      std::vector<double> mu(rows), rs(rows);
      for (int threads : {1, 2}) {
        device::Cpu d(0, threads);
        Tensor x = test::tensor<float>({rows, cols}, x0), dy = test::tensor<float>({rows, cols}, dy0), g = test::tensor<float>({cols}, g0);
        Tensor b = test::tensor<float>({cols}, std::vector<double>(cols, 0.0)), y = d.empty({rows, cols}, DType::kF32);
        Tensor mean = d.empty({rows}, DType::kF32), rstd = d.empty({rows}, DType::kF32), dxt = d.empty({rows, cols}, DType::kF32);
        Tensor dgt = test::tensor<float>({cols}, dg0), dbt = test::tensor<float>({cols}, db0);
        d.layer_norm(x, g, b, y, mean, rstd, 1e-5);
        d.layer_norm_backward(x, g, mean, rstd, dy, dxt, dgt, dbt);
        dx.push_back(test::values<float>(dxt)), dg.push_back(test::values<float>(dgt)), db.push_back(test::values<float>(dbt));
        const auto M = test::values<float>(mean), R = test::values<float>(rstd);
        for (std::int64_t r = 0; r < rows; ++r) mu[r] = M[r], rs[r] = R[r];
      }
      CHECK(dx[0] == dx[1]);
      CHECK(dg[0] == dg[1]);
      CHECK(db[0] == db[1]);
      std::vector<double> dg_want = dg0, db_want = db0;
      for (std::int64_t r = 0; r < rows; ++r) {
        double m1 = 0, m2 = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
          const double xhat = (x0[r * cols + j] - mu[r]) * rs[r], dxhat = dy0[r * cols + j] * g0[j];
          m1 += dxhat / cols, m2 += dxhat * xhat / cols;
          dg_want[j] += dy0[r * cols + j] * xhat, db_want[j] += dy0[r * cols + j];
        }
        for (std::int64_t j = 0; j < cols; ++j) {
          const double xhat = (x0[r * cols + j] - mu[r]) * rs[r];
          REQUIRE(dx[0][r * cols + j] == doctest::Approx(rs[r] * (dy0[r * cols + j] * g0[j] - m1 - xhat * m2)).epsilon(1e-5).scale(1));
        }
      }
      for (std::int64_t j = 0; j < cols; ++j) {
        REQUIRE(dg[0][j] == doctest::Approx(dg_want[j]).epsilon(1e-5).scale(1));
        REQUIRE(db[0][j] == doctest::Approx(db_want[j]).epsilon(1e-5).scale(1));
      }
    }
  }
}

TEST_CASE("softmax_causal: row i sees columns 0..i and sums to one") {
  auto& d = test::cpu64();
  Tensor s = test::random<double>({2, 4, 4}, 5), p = d.empty({2, 4, 4}, DType::kF64);
  d.softmax_causal(s, p, 0.5);
  auto sv = test::values<double>(s), pv = test::values<double>(p);
  for (int bt = 0; bt < 8; ++bt) {
    int i = bt % 4;
    double z = 0;
    for (int j = 0; j <= i; ++j) z += std::exp(0.5 * sv[bt * 4 + j]);
    for (int j = 0; j < 4; ++j) {
      double expect = j <= i ? std::exp(0.5 * sv[bt * 4 + j]) / z : 0.0;
      CHECK(pv[bt * 4 + j] == doctest::Approx(expect).epsilon(1e-13));
    }
  }
  CHECK_THROWS_WITH_AS(d.softmax_causal(test::random({2, 3, 4}, 1), test::random({2, 3, 4}, 1), 1.0),
                       doctest::Contains("needs [batch, t, t]"), Error);
}

TEST_CASE("softmax_causal: f32 rows of every length to 37, scores above the diagonal never reach the probabilities") {
  // the kernel takes exp over whole vectors past a row's visible columns and zeroes the rest:
  // infinities, NaN and huge values above the diagonal must not show
  const std::int64_t t = 37;
  std::vector<double> sv(2 * t * t);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = 0; j < t; ++j) {
        const double masked[] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 1e30, -1e30};
        sv[(b * t + i) * t + j] = j <= i ? 0.37 * static_cast<double>((i * 7 + j * 3 + b) % 11) - 2.0 : masked[(i + j) % 4];
      }
  for (int threads : {1, 2}) {
    device::Cpu d(0, threads);
    Tensor s = test::tensor<float>({2, t, t}, sv), p = d.empty({2, t, t}, DType::kF32);
    d.softmax_causal(s, p, 0.5);
    const auto pv = test::values<float>(p);
    for (std::int64_t r = 0; r < 2 * t; ++r) {
      const std::int64_t i = r % t;
      double z = 0;
      for (std::int64_t j = 0; j <= i; ++j) z += std::exp(0.5 * static_cast<double>(static_cast<float>(sv[r * t + j])));
      for (std::int64_t j = 0; j < t; ++j) {
        CAPTURE(r);
        CAPTURE(j);
        const double expect = j <= i ? std::exp(0.5 * static_cast<double>(static_cast<float>(sv[r * t + j]))) / z : 0.0;
        REQUIRE(pv[r * t + j] == doctest::Approx(expect).epsilon(1e-6));
      }
    }
  }
}

// The unfused attention: heads moved out of qkv, the triangles' batched products, the softmax,
// and back; and its backward from dout (test::values of o, then of dqkv).
template <class T, class D>
std::pair<std::vector<double>, std::vector<double>> unfused_attention(const D& d, const Tensor& h, const Tensor& dout, std::int64_t heads,
                                                                      double scale, DType inputs) {
  using device::Triangle;
  auto like = [&](const Tensor& x) { return d.empty(x.shape(), x.dtype()); };
  const DType dt = h.dtype();
  const std::int64_t b = h.dim(0), t = h.dim(1), dim = h.dim(2) / 3, hd = dim / heads;
  const Shape batched{b * heads, t, hd};
  Tensor q = d.empty({b, heads, t, hd}, dt), k = like(q), v = like(q);
  d.permute_heads(h, q, 0, true), d.permute_heads(h, k, dim, true), d.permute_heads(h, v, 2 * dim, true);
  Tensor s = d.empty({b * heads, t, t}, dt), p = like(s), o = d.empty(batched, dt), merged = d.empty({b, t, dim}, dt);
  d.gemm_batched(q.view(batched), false, k.view(batched), true, s, 1, 0, inputs, Triangle::kLowerC);
  d.softmax_causal(s, p, scale);
  d.gemm_batched(p, false, v.view(batched), false, o, 1, 0, inputs, Triangle::kLowerA);
  d.permute_heads(merged, o.view({b, heads, t, hd}), 0, false);
  Tensor dh4 = like(q), dp = like(p), ds = like(p), dq = like(q), dk = like(q), dv = like(q);
  d.permute_heads(dout, dh4, 0, true);
  d.gemm_batched(dh4.view(batched), false, v.view(batched), true, dp, 1, 0, inputs, Triangle::kLowerC);
  d.gemm_batched(p, true, dh4.view(batched), false, dv.view(batched), 1, 0, inputs, Triangle::kUpperA);
  d.softmax_causal_backward(p, dp, ds, scale);
  d.gemm_batched(ds, false, k.view(batched), false, dq.view(batched), 1, 0, inputs, Triangle::kLowerA);
  d.gemm_batched(ds, true, q.view(batched), false, dk.view(batched), 1, 0, inputs, Triangle::kUpperA);
  Tensor dh = d.empty(h.shape(), dt);
  d.permute_heads(dh, dq, 0, false), d.permute_heads(dh, dk, dim, false), d.permute_heads(dh, dv, 2 * dim, false);
  return {test::values<T>(merged), test::values<T>(dh)};
}

TEST_CASE("attention_heads: [t, t] scores past the machine's memory are refused naming t, before a thread draws them") {
  // a stranger's --context=100000 ended in a bare std::bad_alloc (40 GB a thread); 10^6 positions
  // are 4 TB a thread: more than any machine, forward and backward, on 1 thread and on 2
  const std::int64_t t = 1'000'000;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    device::Cpu d(0, threads);
    Tensor h = d.zeros({1, t, 6}, DType::kF32), o = d.zeros({1, t, 2}, DType::kF32), dh = d.zeros({1, t, 6}, DType::kF32);
    CHECK_THROWS_WITH_AS((void)d.attention_heads(h, o, 2, 1.0, DType::kF32),
                         doctest::Contains("attention_heads: the causal scores of a head are [t, t] with t = 1000000 positions, 3814697 MiB a "
                                           "thread"),
                         Error);
    CHECK_THROWS_WITH_AS((void)d.attention_heads_backward(h, o, dh, 2, 1.0, DType::kF32),
                         doctest::Contains("shorten the sequence (the context), or run fewer threads"), Error);
  }
}

TEST_CASE("attention_heads: a head at a time equals the unfused ops bit for bit, forward and backward, in every precision and kernel") {
  std::vector<std::optional<device::CpuBf16Kernel>> kernels = {std::nullopt};
  for (auto k : {device::CpuBf16Kernel::kRoundedF32, device::CpuBf16Kernel::kAvx512Bf16, device::CpuBf16Kernel::kAmx})
    if (epl::detail::cpu::bf16_kernel_runs(k)) kernels.push_back(k);
  struct Case { std::int64_t b, t, heads, hd; };
  for (const Case c : {Case{2, 1, 1, 4}, Case{1, 17, 3, 5}, Case{2, 64, 2, 8}, Case{1, 130, 3, 24}, Case{1, 256, 1, 64}}) {
    for (const DType inputs : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const auto& kernel : inputs == DType::kBF16 ? kernels : std::vector<std::optional<device::CpuBf16Kernel>>{std::nullopt}) {
        for (int threads : {1, 2}) {
          if (kernel) device::Cpu::use_bf16_kernel(*kernel);
          CAPTURE(c.t);
          CAPTURE(c.heads);
          CAPTURE(c.hd);
          CAPTURE(name_of(inputs));
          CAPTURE(kernel ? device::name(*kernel) : "chosen");
          CAPTURE(threads);
          device::Cpu d(0, threads);
          const std::int64_t dim = c.heads * c.hd;
          const double scale = 1 / std::sqrt(static_cast<double>(c.hd));
          Tensor h = test::random({c.b, c.t, 3 * dim}, 7), dout = test::random({c.b, c.t, dim}, 8);
          Tensor o = d.empty({c.b, c.t, dim}, DType::kF32), dh = d.empty(h.shape(), DType::kF32);
          const bool fused = d.attention_heads(h, o, c.heads, scale, inputs);
          CHECK(fused == (inputs == DType::kF32 || std::string_view(epl::detail::cpu::f32_kernel()) != "eigen"));
          if (fused) {
            REQUIRE(d.attention_heads_backward(h, dout, dh, c.heads, scale, inputs));
            const auto [o_ref, dh_ref] = unfused_attention<float>(d, h, dout, c.heads, scale, inputs);
            if (c.t % 16 == 0) {  // rows of whole vectors: summed in the same order
              CHECK(test::values<float>(o) == o_ref);
              CHECK(test::values<float>(dh) == dh_ref);
            } else {  // up to the rounding of a row's sums: a last-bit difference in f32, which a half
              // operand's rounding can turn into one unit of the half format (2^-10 for f16, 2^-7 for bf16;
              // a clang build on a Zen 1 saw 2.9e-5 in f16 at t = 130)
              const double tol = inputs == DType::kF32 ? 1e-5 : inputs == DType::kF16 ? 0x1p-10 : 0x1p-7;
              CHECK(test::max_rel_diff(test::values<float>(o), o_ref) < tol);
              CHECK(test::max_rel_diff(test::values<float>(dh), dh_ref) < tol);
            }
            CHECK(std::ranges::max(dh_ref, {}, [](double x) { return std::abs(x); }) != 0);  // a real gradient, not zeros on both sides
          }
          device::Cpu::use_bf16_kernel(std::nullopt);
        }
      }
    }
  }
  // in double: the same ops, on Eigen's products
  auto& d64 = test::cpu64();
  Tensor h = test::random<double>({2, 33, 3 * 12}, 3), dout = test::random<double>({2, 33, 12}, 4);
  Tensor o = d64.empty({2, 33, 12}, DType::kF64), dh = d64.empty(h.shape(), DType::kF64);
  REQUIRE(d64.attention_heads(h, o, 4, 0.5, DType::kF32));
  REQUIRE(d64.attention_heads_backward(h, dout, dh, 4, 0.5, DType::kF32));
  const auto [o_ref, dh_ref] = unfused_attention<double>(d64, h, dout, 4, 0.5, DType::kF32);
  CHECK(test::max_rel_diff(test::values<double>(o), o_ref) < 1e-12);
  CHECK(test::max_rel_diff(test::values<double>(dh), dh_ref) < 1e-12);
  // half operands of a double compute type are rounded in copies: declined, o left as it was
  d64.fill(o, 3);
  CHECK_FALSE(d64.attention_heads(h, o, 4, 0.5, DType::kBF16));
  CHECK_FALSE(d64.attention_heads_backward(h, dout, dh, 4, 0.5, DType::kBF16));
  CHECK(test::values<double>(o) == std::vector<double>(static_cast<std::size_t>(o.numel()), 3.0));
  // shapes that are not qkv and its output
  CHECK_THROWS_WITH_AS((void)d64.attention_heads(h, o, 5, 0.5, DType::kF32),
                       doctest::Contains("attention_heads: qkv [2, 33, 36] is not [batch, t, 3 dim] with 5 heads dividing dim"), Error);
  CHECK_THROWS_WITH_AS((void)d64.attention_heads(h, d64.empty({2, 32, 12}, DType::kF64), 4, 0.5, DType::kF32),
                       doctest::Contains("attention_heads: [2, 32, 12] for qkv [2, 33, 36]; expected [2, 33, 12]"), Error);
  CHECK_THROWS_WITH_AS((void)d64.attention_heads_backward(h, dout, d64.empty({2, 33, 12}, DType::kF64), 4, 0.5, DType::kF32),
                       doctest::Contains("attention_heads_backward: [2, 33, 36] and [2, 33, 12] differ in size"), Error);
  CHECK_THROWS_WITH_AS((void)d64.attention_heads(h, d64.empty({2, 33, 12}, DType::kF32), 4, 0.5, DType::kF32),
                       doctest::Contains("attention_heads: dtypes f64 and f32 differ"), Error);
}

TEST_CASE("embedding: gather, scatter-add with repeated ids, and ids out of range") {
  auto& d = test::cpu64();
  Tensor table = test::tensor({3, 2}, {0, 1, 10, 11, 20, 21});
  Tensor ids = d.empty({4}, DType::kI64);
  std::int64_t idv[] = {2, 0, 2, 1};
  d.upload(idv, ids);
  Tensor out = d.empty({4, 2}, DType::kF32);
  d.embedding(ids, table, out);
  CHECK(test::values(out) == std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11});
  Tensor dt = d.zeros({3, 2}, DType::kF32);
  d.embedding_backward(ids, test::tensor({4, 2}, {1, 1, 2, 2, 3, 3, 4, 4}), dt);
  CHECK(test::values(dt) == std::vector<double>{2, 2, 4, 4, 4, 4});
  idv[1] = 3;
  d.upload(idv, ids);
  CHECK_THROWS_WITH_AS(d.embedding(ids, table, out), doctest::Contains("id 3 at [1] of [4] outside [0, 3)"), Error);
  // where it is, by row and column in the ids' shape (a stranger's finding)
  Tensor out2 = d.empty({2, 2, 2}, DType::kF32);
  CHECK_THROWS_WITH_AS(d.embedding(ids.view({2, 2}), table, out2), doctest::Contains("id 3 at [0, 1] of [2, 2] outside [0, 3)"), Error);
  idv[1] = 0;
  idv[2] = -1;
  d.upload(idv, ids);
  CHECK_THROWS_WITH_AS(d.embedding(ids.view({2, 2}), table, out2), doctest::Contains("id -1 at [1, 0] of [2, 2] outside [0, 3)"), Error);
}

TEST_CASE("cross_entropy: loss and gradient against the softmax formula") {
  auto& d = test::cpu64();
  Tensor logits = test::tensor<double>({2, 3}, {1, 2, 3, 0, 0, 5});
  Tensor targets = d.empty({2}, DType::kI32);
  std::int32_t tv[] = {0, 2};
  d.upload(tv, targets);
  const double l0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 1;
  const double l1 = std::log(2 + std::exp(5)) - 5;
  CHECK(d.cross_entropy(logits, targets) == doctest::Approx(l0 + l1).epsilon(1e-14));
  Tensor g = d.empty({2, 3}, DType::kF64);
  d.cross_entropy_backward(logits, targets, g, 0.5);
  const double z0 = std::exp(1) + std::exp(2) + std::exp(3);
  CHECK(test::values<double>(g)[0] == doctest::Approx(0.5 * (std::exp(1) / z0 - 1)).epsilon(1e-14));
  CHECK(test::values<double>(g)[5] == doctest::Approx(0.5 * (std::exp(5) / (2 + std::exp(5)) - 1)).epsilon(1e-14));
  tv[1] = 7;
  d.upload(tv, targets);
  CHECK_THROWS_WITH_AS((void)d.cross_entropy(logits, targets), doctest::Contains("id 7 at [1] of [2] outside [0, 3)"), Error);
}

TEST_CASE("exp_of: Eigen's exp bit for bit, over the whole range, at every power of two's edge, infinities, NaN, and every tail length") {
  // the softmax and cross-entropy kernels take exp_of for its faster scaling by 2^m: it must not
  // change one bit of what Eigen's exp gives, subnormal results and overflow included
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i) x.push_back(-100.0f + 0.01f * static_cast<float>(i));  // -100 .. 100
  for (int m = -130; m <= 130; ++m)  // either side of m ln 2, where the exponent steps
    for (float d : {-0.5f, -0.25f, -1e-3f, 0.0f, 1e-3f, 0.25f, 0.5f}) x.push_back((static_cast<float>(m) + d) * 0.6931472f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 88.72f, 88.7228f, 88.723f, 88.8f, -87.3f, -88.0f, -88.72f, -88.723f, -89.0f, -103.0f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN(), 1e-40f, -1e-40f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(v);
  const auto n = static_cast<Eigen::Index>(x.size());
  const Eigen::Map<const Eigen::ArrayXf> X(x.data(), n);
  const Eigen::ArrayXf eigen = X.exp(), ours = detail::cpu::exp_of(X);
  std::int64_t differ = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    if (std::bit_cast<std::uint32_t>(eigen[i]) != std::bit_cast<std::uint32_t>(ours[i])) {
      if (++differ <= 5) MESSAGE("exp(" << x[i] << "): Eigen " << eigen[i] << ", exp_of " << ours[i]);
    }
  }
  CHECK(differ == 0);
  CHECK(std::isnan(ours[n - 5]));
  CHECK(ours[n - 7] == inf);
  CHECK(ours[n - 1] < 1e-37f);  // Eigen's exp(-max) is its clamp's subnormal, and so is ours
  // inside expressions (a scaled, shifted row, summed): the same traversal, the same scalar tail
  for (Eigen::Index len = 1; len < 70; ++len) {
    const Eigen::Map<const Eigen::ArrayXf> row(x.data() + 9000, len);
    const float a = (row * 0.5f - 1.5f).exp().sum(), b = detail::cpu::exp_of(row * 0.5f - 1.5f).sum();
    CAPTURE(len);
    CHECK(std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b));
  }
  // f64 is Eigen's own
  const Eigen::ArrayXd xd = X.head(100).cast<double>();
  CHECK((detail::cpu::exp_of(xd) == xd.exp()).all());
}

TEST_CASE("dropout: reproducible mask, kept values scaled by 1/(1-p)") {
  auto& d = test::cpu64();
  Tensor x = d.empty({10000}, DType::kF32);
  d.fill(x, 1.0);
  Tensor y1 = d.empty({10000}, DType::kF32), y2 = d.empty({10000}, DType::kF32);
  d.dropout(x, y1, 0.25, 77);
  d.dropout(x, y2, 0.25, 77);
  CHECK(test::values(y1) == test::values(y2));
  int zeros = 0;
  for (double v : test::values(y1)) {
    CHECK((v == 0.0 || v == doctest::Approx(1 / 0.75)));
    zeros += v == 0.0;
  }
  CHECK(zeros > 2300);
  CHECK(zeros < 2700);
}

TEST_CASE("dropout: a part of a tensor at an offset draws exactly its part of the whole's mask") {
  auto& d = test::cpu64();
  Tensor x = test::random({12, 5}, 3);
  Tensor whole = d.empty({12, 5}, DType::kF32);
  d.dropout(x, whole, 0.5, 91);
  for (std::int64_t row : {0, 4, 7}) {  // rows [row, row + 5) as a part of their own
    Tensor part = d.empty({5, 5}, DType::kF32);
    d.dropout(x.slice(row, row + 5), part, 0.5, 91, row * 5);
    CHECK(test::values(part) == test::values(whole.slice(row, row + 5)));
  }
}

namespace {
struct Fma {  // a user's element-wise function: a * b + c
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b, T c) const { return a * b + c; }
};
}  // namespace

TEST_CASE("map: element-wise functions of one to three tensors, built-in and a user's own") {
  auto& d = test::cpu64();
  Tensor x = test::random<double>({3, 7}, 4), y = test::random<double>({3, 7}, 5), out = d.empty({3, 7}, DType::kF64);
  d.map(out, ops::Sigmoid{}, x);
  for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(out.span<double>()[i] == doctest::Approx(1 / (1 + std::exp(-x.span<double>()[i]))));
  d.map(out, ops::Mul{}, x, y);
  for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(out.span<double>()[i] == x.span<double>()[i] * y.span<double>()[i]);
  d.map(out, Fma{}, x, y, x);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    CHECK(out.span<double>()[i] == doctest::Approx(x.span<double>()[i] * y.span<double>()[i] + x.span<double>()[i]));
  CHECK_THROWS_WITH_AS(d.map(out, ops::Exp{}, test::random<double>({2, 7}, 6)), doctest::Contains("map: [2, 7] and [3, 7] differ"), Error);
  CHECK_THROWS_WITH_AS(d.map(out, ops::Exp{}, test::random<float>({3, 7}, 6)), doctest::Contains("map: dtypes f32 and f64 differ"), Error);
}

// device::Cpu computes in f32 only, so a training program never instantiates f64 kernels; f64 is
// device::CpuF64's, for gradient checks. An f64 tensor on device::Cpu is an error that says so.
TEST_CASE("device::Cpu computes in f32 and names device::CpuF64 for f64") {
  device::Cpu f32_only(33);
  Tensor a = test::random<double>({2, 2}, 1), c = f32_only.empty({2, 2}, DType::kF64);
  CHECK_THROWS_WITH_AS(f32_only.gemm(a, false, a, false, c),
                       doctest::Contains("dtype f64 is not computed by device::Cpu, which computes in f32; f64 (gradient checks) runs on device::CpuF64"),
                       Error);
  Tensor f = f32_only.empty({2, 2}, DType::kF32);
  CHECK_NOTHROW(f32_only.cast(a, f));  // copies and casts take every dtype
}

TEST_CASE("permute_heads: token layout to heads and back is the identity") {
  auto& d = test::cpu64();
  Tensor tok = test::random({2, 3, 12}, 9);  // [b, t, 3 * (h=2 * d=2)]
  Tensor h = d.empty({2, 2, 3, 2}, DType::kF32);
  d.permute_heads(tok, h, 4, true);  // the k block
  // head 1 of batch 0 at time 2 is tokens[0, 2, 4 + 1*2 .. 4 + 1*2 + 2)
  CHECK(h.span<float>()[((0 * 2 + 1) * 3 + 2) * 2 + 1] == tok.span<float>()[(0 * 3 + 2) * 12 + 4 + 2 + 1]);
  Tensor back = d.zeros({2, 3, 12}, DType::kF32);
  d.permute_heads(back, h, 4, false);
  for (int i = 0; i < 6; ++i)
    for (int c = 4; c < 8; ++c) CHECK(back.span<float>()[i * 12 + c] == tok.span<float>()[i * 12 + c]);
}

TEST_CASE("optimizer kernels follow PyTorch's update rules") {
  auto& d = test::cpu64();
  Tensor p = test::tensor<double>({2}, {1.0, -2.0}), g = test::tensor<double>({2}, {0.5, 0.25});
  d.sgd_update(p, g, 0.1, 0.01);
  CHECK(test::values<double>(p)[0] == doctest::Approx(1.0 - 0.1 * (0.5 + 0.01)).epsilon(1e-15));
  Tensor v = d.zeros({2}, DType::kF64);
  p = test::tensor<double>({2}, {1.0, -2.0});
  d.momentum_update(p, g, v, 0.1, 0.9, 0.0, true);
  // v = g; nesterov: p -= lr (g + mu v) = lr * 1.9 g
  CHECK(test::values<double>(p)[0] == doctest::Approx(1.0 - 0.1 * 1.9 * 0.5).epsilon(1e-15));
  Tensor m = d.zeros({2}, DType::kF64), s = d.zeros({2}, DType::kF64);
  p = test::tensor<double>({2}, {1.0, -2.0});
  d.adamw_update(p, g, m, s, 0.01, 0.9, 0.999, 1e-8, 0.1, 1);
  // step 1: mhat = g, vhat = g^2 -> p = p (1 - lr wd) - lr g / (|g| + eps)
  CHECK(test::values<double>(p)[0] == doctest::Approx(1.0 * (1 - 0.001) - 0.01 * 0.5 / (0.5 + 1e-8)).epsilon(1e-12));
  CHECK(test::values<double>(p)[1] == doctest::Approx(-2.0 * (1 - 0.001) - 0.01 * 0.25 / (0.25 + 1e-8)).epsilon(1e-12));
  // called directly, a device's update checks what the Updater checks: no NaN written silently
  CHECK_THROWS_WITH_AS(d.adamw_update(p, g, m, s, 0.01, 0.9, 0.999, 1e-8, 0.1, 0), doctest::Contains("step 0; steps count from 1"), Error);
  CHECK_THROWS_WITH_AS(d.adamw_update(p, g, m, s, 0.01, 1.0, 0.999, 1e-8, 0.1, 1), doctest::Contains("betas (1, 0.999) must lie in [0, 1)"),
                       Error);
  CHECK_THROWS_WITH_AS(d.adamw_update(p, g, m, s, 0.01, 0.9, 0.999, 0, 0.1, 1), doctest::Contains("eps 0 must be positive"), Error);
  CHECK_THROWS_WITH_AS(d.sgd_update(p, g, 0.1, 0, std::nan("")), doctest::Contains("sgd_update: gradient factor nan is not finite"), Error);
  CHECK_THROWS_WITH_AS(d.momentum_update(p, g, v, std::numeric_limits<double>::infinity(), 0.9, 0, false),
                       doctest::Contains("momentum_update: lr inf and weight decay 0 must be finite"), Error);
  CHECK_THROWS_WITH_AS(d.momentum_update(p, g, v, 0.1, -0.5, 0, false), doctest::Contains("momentum -0.5 must be finite and not negative"),
                       Error);
  CHECK(test::values<double>(p)[1] == doctest::Approx(-2.0 * (1 - 0.001) - 0.01 * 0.25 / (0.25 + 1e-8)).epsilon(1e-12));  // untouched
}

TEST_CASE("element-wise kernels in L1 blocks: AdamW, momentum, GELU's backward equal a scalar loop for lengths that end inside a block, 1 and 2 threads") {
  // each kernel makes its statements' passes block by block (kL1Block); a block or a thread's
  // range that ends early must still see every element once, in each pass
  const std::int64_t block = epl::detail::cpu::kL1Block;
  for (int threads : {1, 2}) {
    device::Cpu d(0, threads);
    for (std::int64_t n : {std::int64_t{1}, block - 1, block, 3 * block + 5, std::int64_t{1} << 16 | 7}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<double> p0(n), g0(n), m0(n), v0(n), x0(n), dy0(n);  // f32 values, held in double
      for (std::int64_t i = 0; i < n; ++i) {
        p0[i] = 0.5f - 0.001f * static_cast<float>(i % 977);
        g0[i] = 0.01f * static_cast<float>(i % 13) - 0.06f;
        m0[i] = 0.001f * static_cast<float>(i % 7);
        v0[i] = 1e-4f * static_cast<float>(i % 5);
        x0[i] = 0.01f * static_cast<float>(i % 601) - 3.0f;
        dy0[i] = 0.1f * static_cast<float>(i % 11) - 0.5f;
      }
      auto t = [&](const std::vector<double>& v) { return test::tensor<float>({n}, v); };
      Tensor p = t(p0), g = t(g0), m = t(m0), v = t(v0), x = t(x0), dy = t(dy0), dx = d.zeros({n}, DType::kF32);
      d.adamw_update(p, g, m, v, 1e-3, 0.9, 0.95, 1e-8, 0.1, 3, 0.5);
      d.gelu_backward(x, dy, dx);
      Tensor q = t(p0), u = t(m0);
      d.momentum_update(q, g, u, 1e-2, 0.9, 0.01, true, 2.0);
      const auto P = test::values<float>(p), M = test::values<float>(m), V = test::values<float>(v), DX = test::values<float>(dx),
                 Q = test::values<float>(q), U = test::values<float>(u);
      const double bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.95, 3);
      for (std::int64_t i = 0; i < n; ++i) {
        const double gi = 0.5 * g0[i], mi = 0.9 * m0[i] + 0.1 * gi, vi = 0.95 * v0[i] + 0.05 * gi * gi;
        const double pi = p0[i] * (1 - 1e-4) - 1e-3 / bc1 * mi / (std::sqrt(vi / bc2) + 1e-8);
        REQUIRE(M[i] == doctest::Approx(mi).epsilon(1e-5));
        REQUIRE(V[i] == doctest::Approx(vi).epsilon(1e-5));
        REQUIRE(P[i] == doctest::Approx(pi).epsilon(1e-5));
        const double xi = x0[i], th = std::tanh(0.7978845608028654 * (xi + 0.044715 * xi * xi * xi));
        const double dgelu = 0.5 * (1 + th) + 0.5 * xi * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * xi * xi);
        REQUIRE(DX[i] == doctest::Approx(dy0[i] * dgelu).epsilon(1e-5).scale(1));  // f32 tanh near x = -3 cancels
        const double di = 2.0 * g0[i] + 0.01 * p0[i], ui = 0.9 * m0[i] + di;
        REQUIRE(U[i] == doctest::Approx(ui).epsilon(1e-5));
        REQUIRE(Q[i] == doctest::Approx(p0[i] - 1e-2 * (di + 0.9 * ui)).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("device concepts: the CPU backend models every refinement") {
  static_assert(device_memory<device::Cpu>);
  static_assert(device_blas<device::Cpu>);
  static_assert(device_math<device::Cpu>);
  static_assert(device_for_layers<device::Cpu>);
  static_assert(!device_memory<int>);
  CHECK(test::cpu64().id().kind == DeviceKind::kCpu);
}
}
