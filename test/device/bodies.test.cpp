// The CUDA device's kernel bodies (device/bodies.hpp), run on the host by the same code: against
// device::Cpu's kernels, against finite differences in double precision, with the lanes of a warp
// taken one after another (1, 3 and 32 lanes: the striding must not matter), and the launch
// geometry walked over every (block, thread). Plus the cuBLAS argument mapping (device/blas_args.hpp)
// run by a column-major reference GEMM. None of this needs a GPU.
#include <doctest/doctest.h>

#include <functional>
#include <tuple>

#include "../helpers.hpp"
#include "epl/device/blas_args.hpp"
#include "epl/device/bodies.hpp"

using namespace epl;
namespace k = epl::kernels;

namespace {
auto& cpu = test::cpu64();
template <class T = float>
Tensor rnd(Shape s, std::uint64_t seed) {
  Tensor x = cpu.empty(s, dtype_v<T>);
  auto key = stream_key(seed, 1);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.span<T>()[i] = static_cast<T>(2 * uniform01(key, i) - 1);
  return x;
}
template <class T = float>
Tensor zeros(Shape s) { return cpu.zeros(s, dtype_v<T>); }
template <class T = float>
Tensor copy_of(const Tensor& t) {
  Tensor c = cpu.empty(t.shape(), t.dtype());
  cpu.copy(t, c);
  return c;
}
template <class T = float>
double diff(const Tensor& a, const Tensor& b) { return test::max_rel_diff(test::values<T>(a), test::values<T>(b)); }
template <class T>
T* p(const Tensor& t) { return t.data<T>(); }
constexpr int kLaneCounts[] = {1, 3, k::kLanes};
// The column-major GEMM cuBLAS would run for g, on row-major buffers read with leading dimensions
// ld_first and ld_second: c(i, j) at c[i + j ldc] = sum over l of op(first)(i, l) op(second)(l, j).
void column_major_reference(const device::ColumnMajorGemm& g, const float* first, std::int64_t ld_first, const float* second,
                            std::int64_t ld_second, float* c) {
  auto at = [](const float* x, bool trans, std::int64_t ld, std::int64_t i, std::int64_t j) { return trans ? x[j + i * ld] : x[i + j * ld]; };
  for (std::int64_t i = 0; i < g.rows; ++i)
    for (std::int64_t j = 0; j < g.cols; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < g.inner; ++l)
        s += static_cast<double>(at(first, g.trans_first, ld_first, i, l)) * at(second, g.trans_second, ld_second, l, j);
      c[i + j * g.ldc] = static_cast<float>(s);
    }
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("kernel geometry: a grid-stride launch visits each element once, for any n") {
  for (std::int64_t n : {0, 1, 255, 256, 257, 4096 * 256 + 3, 3'000'017}) {
    CAPTURE(n);
    std::vector<int> seen(static_cast<std::size_t>(n));
    k::run_elements([&](std::int64_t i) { ++seen[static_cast<std::size_t>(i)]; }, n);
    CHECK(std::count(seen.begin(), seen.end(), 1) == n);
  }
}
TEST_CASE("kernel geometry: a row launch gives each row one whole warp, each lane once") {
  for (std::int64_t rows : {1, 7, 8, 9, 1001}) {
    CAPTURE(rows);
    const auto g = k::rows_launch(rows);
    std::vector<std::vector<int>> lanes(static_cast<std::size_t>(rows), std::vector<int>(k::kLanes));
    for (std::int64_t b = 0; b < g.blocks; ++b)
      for (std::int64_t t = 0; t < g.threads; ++t)
        if (const auto r = k::row_of(b, t); r < rows) ++lanes[static_cast<std::size_t>(r)][static_cast<std::size_t>(k::lane_of(t))];
    for (const auto& l : lanes) CHECK(std::count(l.begin(), l.end(), 1) == k::kLanes);
  }
}
TEST_CASE("kernel geometry: a column launch covers each (row, column) once, past 65535 chunks of rows too") {
  for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{1, 1}, {100, 300}, {64 * 65535 + 5, 1}}) {
    const std::int64_t rows = dims.first, cols = dims.second;  // not a structured binding: clang 14's lambdas cannot capture one
    CAPTURE(rows);
    CAPTURE(cols);
    CHECK(k::columns_launch(rows, cols).y <= 65535);
    std::vector<int> seen(static_cast<std::size_t>(rows * cols));
    k::run_columns([&](std::int64_t c, std::int64_t r0, std::int64_t r1) {
      for (auto r = r0; r < r1; ++r) ++seen[static_cast<std::size_t>(r * cols + c)];
    }, rows, cols);
    CHECK(std::count(seen.begin(), seen.end(), 1) == rows * cols);
  }
}
TEST_CASE("kernel bodies: layer norm forward and backward equal device::Cpu, for any lane count") {
  for (std::int64_t cols : {5, 70}) {
    const std::int64_t rows = 9;
    const Tensor x = rnd({rows, cols}, 1), g = rnd({cols}, 2), b = rnd({cols}, 3), dy = rnd({rows, cols}, 4);
    Tensor y = zeros({rows, cols}), mean = zeros({rows}), rstd = zeros({rows}), dx = zeros({rows, cols});
    Tensor dg = rnd({cols}, 5), db = rnd({cols}, 6);
    cpu.layer_norm(x, g, b, y, mean, rstd, 1e-5);
    cpu.layer_norm_backward(x, g, mean, rstd, dy, dx, dg, db);
    for (int lanes : kLaneCounts) {
      CAPTURE(lanes);
      Tensor y2 = zeros({rows, cols}), mean2 = zeros({rows}), rstd2 = zeros({rows}), dx2 = zeros({rows, cols});
      Tensor dg2 = rnd({cols}, 5), db2 = rnd({cols}, 6);
      k::run_rows(k::LayerNormRows<float>{p<float>(x), p<float>(g), p<float>(b), p<float>(y2), p<float>(mean2), p<float>(rstd2), cols, 1e-5f},
                  rows, lanes);
      k::run_rows(k::LayerNormBackwardRows<float>{p<float>(x), p<float>(g), p<float>(mean2), p<float>(rstd2), p<float>(dy), p<float>(dx2), cols},
                  rows, lanes);
      k::run_columns(k::LayerNormParamGrads<float>{p<float>(x), p<float>(mean2), p<float>(rstd2), p<float>(dy), p<float>(dg2), p<float>(db2), cols},
                     rows, cols);
      CHECK(diff(y2, y) < 1e-5);
      CHECK(diff(mean2, mean) < 1e-6);
      CHECK(diff(rstd2, rstd) < 1e-5);
      CHECK(diff(dx2, dx) < 1e-5);
      CHECK(diff(dg2, dg) < 1e-5);
      CHECK(diff(db2, db) < 1e-5);
    }
  }
}
TEST_CASE("kernel bodies: softmax (causal and by rows), row max and row dot equal device::Cpu") {
  const std::int64_t t = 37;
  const Tensor s = rnd({2, t, t}, 1), dp = rnd({2, t, t}, 2);
  Tensor pr = zeros({2, t, t}), ds = zeros({2, t, t}), y = zeros({2 * t, t}), dx = zeros({2 * t, t}), mx = zeros({2 * t}), dot = zeros({2 * t});
  cpu.softmax_causal(s, pr, 0.7);
  cpu.softmax_causal_backward(pr, dp, ds, 0.7);
  const Tensor s2d = s.view({2 * t, t}), dp2d = dp.view({2 * t, t});
  cpu.softmax_rows(s2d, y);
  cpu.softmax_rows_backward(y, dp2d, dx);
  cpu.row_max(s2d, mx);
  cpu.row_dot(s2d, dp2d, dot);
  for (int lanes : kLaneCounts) {
    CAPTURE(lanes);
    Tensor pr2 = rnd({2, t, t}, 9), ds2 = rnd({2, t, t}, 9), y2 = zeros({2 * t, t}), dx2 = zeros({2 * t, t}), mx2 = zeros({2 * t}),
           dot2 = zeros({2 * t});
    k::run_rows(k::SoftmaxCausalRows<float>{p<float>(s), p<float>(pr2), t, 0.7f}, 2 * t, lanes);
    k::run_rows(k::SoftmaxCausalBackwardRows<float>{p<float>(pr2), p<float>(dp), p<float>(ds2), t, 0.7f}, 2 * t, lanes);
    k::run_rows(k::SoftmaxRows<float>{p<float>(s), p<float>(y2), t}, 2 * t, lanes);
    k::run_rows(k::SoftmaxRowsBackward<float>{p<float>(y2), p<float>(dp), p<float>(dx2), t}, 2 * t, lanes);
    k::run_rows(k::RowMax<float>{p<float>(s), p<float>(mx2), t}, 2 * t, lanes);
    k::run_rows(k::RowDot<float>{p<float>(s), p<float>(dp), p<float>(dot2), t}, 2 * t, lanes);
    CHECK(diff(pr2, pr) < 1e-6);  // zeros above the diagonal included: pr2 started as noise
    CHECK(diff(ds2, ds) < 1e-6);
    CHECK(diff(y2, y) < 1e-6);
    CHECK(diff(dx2, dx) < 1e-6);
    CHECK(diff(mx2, mx) == 0);
    CHECK(diff(dot2, dot) < 1e-5);
  }
}
TEST_CASE("kernel bodies: cross-entropy, whole and by vocabulary part, equals device::Cpu; a bad target is reported") {
  const std::int64_t rows = 11, classes = 50;
  const Tensor logits = rnd({rows, classes}, 1), targets = test::ids({rows}, classes, 2);
  const double loss = cpu.cross_entropy(logits, targets);
  Tensor dl = zeros({rows, classes});
  cpu.cross_entropy_backward(logits, targets, dl, 0.3);
  for (int lanes : kLaneCounts) {
    CAPTURE(lanes);
    k::Report bad;
    Tensor per_row = zeros({rows}), dl2 = zeros({rows, classes});
    k::run_rows(k::CrossEntropyRows<float, std::int32_t>{p<float>(logits), p<std::int32_t>(targets), p<float>(per_row), nullptr, classes, 1.0f, &bad},
                rows, lanes);
    k::run_rows(k::CrossEntropyRows<float, std::int32_t>{p<float>(logits), p<std::int32_t>(targets), nullptr, p<float>(dl2), classes, 0.3f, &bad},
                rows, lanes);
    double sum = 0;
    for (float v : per_row.span<float>()) sum += v;
    CHECK(sum == doctest::Approx(loss).epsilon(1e-6));
    CHECK(diff(dl2, dl) < 1e-6);
    CHECK(bad.what == k::Report::kNone);
  }
  // classes [20, 35) of 50, against the CPU's part kernels
  const Tensor part = rnd({rows, 15}, 3);
  Tensor mx = zeros({rows}), se = zeros({rows}), tl = zeros({rows}), dp = zeros({rows, 15});
  cpu.row_max(part, mx);
  cpu.cross_entropy_stats(part, targets, mx, se, tl, 20, classes);
  cpu.cross_entropy_part_backward(part, targets, mx, se, dp, 20, 0.5);
  k::Report bad;
  Tensor se2 = zeros({rows}), tl2 = zeros({rows}), dp2 = zeros({rows, 15});
  k::run_rows(k::CrossEntropyStatsRows<float, std::int32_t>{p<float>(part), p<std::int32_t>(targets), p<float>(mx), p<float>(se2), p<float>(tl2), 15,
                                                            20, classes, &bad}, rows);
  k::run_rows(k::CrossEntropyPartBackwardRows<float, std::int32_t>{p<float>(part), p<std::int32_t>(targets), p<float>(mx), p<float>(se2),
                                                                   p<float>(dp2), 15, 20, 0.5f}, rows);
  CHECK(diff(se2, se) < 1e-6);
  CHECK(diff(tl2, tl) == 0);
  CHECK(diff(dp2, dp) < 1e-6);
  // a target outside the classes: reported with its value and the limit, its row left alone
  Tensor wrong = copy_of(targets);
  wrong.span<std::int32_t>()[4] = 77;
  Tensor dl3 = zeros({rows, classes});
  k::run_rows(k::CrossEntropyRows<float, std::int32_t>{p<float>(logits), p<std::int32_t>(wrong), nullptr, p<float>(dl3), classes, 1.0f, &bad}, rows);
  CHECK(bad.what == k::Report::kTarget);
  CHECK(bad.value == 77);
  CHECK(bad.limit == classes);
  CHECK(std::string(k::report_op(bad)) == "cross_entropy targets");
}
TEST_CASE("kernel bodies: embedding, its backward, gather and scatter-add equal device::Cpu; bad ids are reported") {
  const Tensor ids = test::ids({3, 14}, 10, 1), table = rnd({10, 6}, 2), dout = rnd({3, 14, 6}, 3);
  Tensor out = zeros({3, 14, 6}), dtable = rnd({10, 6}, 4), part = zeros({3, 14, 6}), dpart = rnd({4, 6}, 5);
  cpu.embedding(ids, table, out);
  cpu.embedding_backward(ids, dout, dtable);
  const Tensor rows4 = table.slice(3, 7);
  cpu.embedding(ids, rows4, part, 3, 10);
  cpu.embedding_backward(ids, dout, dpart, 3, 10);
  for (int lanes : kLaneCounts) {
    CAPTURE(lanes);
    k::Report bad;
    Tensor out2 = rnd({3, 14, 6}, 9), dtable2 = rnd({10, 6}, 4), part2 = rnd({3, 14, 6}, 9), dpart2 = rnd({4, 6}, 5);
    k::run_rows(k::EmbeddingRows<float, std::int32_t>{p<std::int32_t>(ids), p<float>(table), p<float>(out2), 6, 0, 10, 10, &bad}, 42, lanes);
    k::run_rows(k::EmbeddingBackwardRows<float, std::int32_t>{p<std::int32_t>(ids), p<float>(dout), p<float>(dtable2), 6, 0, 10, 10, &bad}, 42, lanes);
    k::run_rows(k::EmbeddingRows<float, std::int32_t>{p<std::int32_t>(ids), p<float>(rows4), p<float>(part2), 6, 3, 4, 10, &bad}, 42, lanes);
    k::run_rows(k::EmbeddingBackwardRows<float, std::int32_t>{p<std::int32_t>(ids), p<float>(dout), p<float>(dpart2), 6, 3, 4, 10, &bad}, 42, lanes);
    CHECK(diff(out2, out) == 0);
    CHECK(diff(dtable2, dtable) < 1e-6);
    CHECK(diff(part2, part) == 0);
    CHECK(diff(dpart2, dpart) < 1e-6);
    CHECK(bad.what == k::Report::kNone);
  }
  Tensor index = cpu.empty({5}, DType::kI64);
  for (std::int64_t i = 0; i < 5; ++i) index.span<std::int64_t>()[i] = (i * 7) % 10;
  index.span<std::int64_t>()[3] = index.span<std::int64_t>()[1];  // a repeat
  const Tensor w = rnd({5}, 6);
  Tensor g = zeros({5, 6}), sc = rnd({10, 6}, 7), g2 = zeros({5, 6}), sc2 = rnd({10, 6}, 7);
  cpu.gather_rows(table, index, g);
  cpu.scatter_add_rows(g, index, w, sc);
  k::Report bad;
  k::run_rows(k::IndexedRows<float>{p<float>(table), p<std::int64_t>(index), nullptr, p<float>(g2), 6, 10, false, &bad}, 5);
  k::run_rows(k::IndexedRows<float>{p<float>(g2), p<std::int64_t>(index), p<float>(w), p<float>(sc2), 6, 10, true, &bad}, 5);
  CHECK(diff(g2, g) == 0);
  CHECK(diff(sc2, sc) < 1e-6);
  // an id past the vocabulary: reported, its row zero, nothing read out of bounds
  Tensor bad_ids = copy_of(ids);
  bad_ids.span<std::int32_t>()[5] = 12;
  Tensor out3 = rnd({3, 14, 6}, 9);
  k::run_rows(k::EmbeddingRows<float, std::int32_t>{p<std::int32_t>(bad_ids), p<float>(table), p<float>(out3), 6, 0, 10, 10, &bad}, 42);
  CHECK(bad.what == k::Report::kEmbeddingId);
  CHECK(bad.value == 12);
  CHECK(out3.span<float>()[5 * 6] == 0);
  index.span<std::int64_t>()[2] = -1;
  k::Report bad_row;
  k::run_rows(k::IndexedRows<float>{p<float>(table), p<std::int64_t>(index), nullptr, p<float>(g2), 6, 10, false, &bad_row}, 5);
  CHECK(bad_row.what == k::Report::kRowIndex);
  CHECK(bad_row.value == -1);
}
TEST_CASE("kernel bodies: dropout draws device::Cpu's mask bit for bit; head permutes and column sums equal it") {
  const Tensor x = rnd({13, 40}, 1);
  Tensor y = zeros({13, 40}), y2 = zeros({13, 40}), c = zeros({13, 16}), c2 = zeros({13, 16});
  cpu.dropout(x, y, 0.25, 99, 500);
  k::run_elements(k::Dropout<float>{p<float>(x), p<float>(y2), 0.25, 99, 500, 1, 0, 0}, x.numel());
  CHECK(diff(y2, y) == 0);
  Tensor part = cpu.empty({13, 16}, DType::kF32);
  for (std::int64_t r = 0; r < 13; ++r)
    for (std::int64_t j = 0; j < 16; ++j) part.span<float>()[r * 16 + j] = x.span<float>()[r * 40 + 8 + j];
  cpu.dropout_columns(part, c, 0.25, 99, 500, 40, 8);
  k::run_elements(k::Dropout<float>{p<float>(part), p<float>(c2), 0.25, 99, 500, 16, 40, 8}, part.numel());
  CHECK(diff(c2, c) == 0);
  for (std::int64_t r = 0; r < 13; ++r)  // and a column part draws exactly the whole tensor's mask there
    for (std::int64_t j = 0; j < 16; ++j) CHECK(c.span<float>()[r * 16 + j] == y.span<float>()[r * 40 + 8 + j]);
  const Tensor tokens = rnd({2, 5, 24}, 2);
  Tensor heads = zeros({2, 3, 5, 4}), back = zeros({2, 5, 24});
  cpu.permute_heads(tokens, heads, 6, true);
  cpu.permute_heads(back, heads, 6, false);
  for (bool narrow : {false, true}) {  // 64-bit and 32-bit index arithmetic
    CAPTURE(narrow);
    Tensor h2 = zeros({2, 3, 5, 4}), b2 = zeros({2, 5, 24});
    k::run_elements(k::PermuteHeads<float>{p<float>(tokens), p<float>(h2), 5, 3, 4, 24, 6, true, narrow}, h2.numel());
    k::run_elements(k::PermuteHeads<float>{p<float>(b2), p<float>(h2), 5, 3, 4, 24, 6, false, narrow}, h2.numel());
    CHECK(diff(h2, heads) == 0);
    CHECK(diff(b2, back) == 0);
  }
  Tensor sums = zeros({40}), sums2 = zeros({40});
  cpu.sum_rows(x, sums);
  k::run_columns(k::ColumnSums<float>{p<float>(x), p<float>(sums2), 40}, 13, 40);
  CHECK(diff(sums2, sums) < 1e-6);
}
TEST_CASE("kernel bodies: the SGD, momentum and AdamW steps equal device::Cpu's over several steps, the gradient factor too") {
  const Tensor g = rnd({300}, 1);
  for (const double gs : {1.0, 0.37}) {  // the factor (AMP's unscale times the clip coefficient) read with the gradient
    CAPTURE(gs);
    // device::Cpu with the factor, the bodies with it, and device::Cpu on a gradient scaled beforehand
    Tensor scaled = zeros({300});
    cpu.copy(g, scaled);
    cpu.scale(scaled, gs);
    Tensor p1 = rnd({300}, 2), p2 = rnd({300}, 2), p3 = rnd({300}, 2), m1 = zeros({300}), m2 = zeros({300}), m3 = zeros({300});
    Tensor v1 = zeros({300}), v2 = zeros({300}), v3 = zeros({300});
    Tensor q1 = rnd({300}, 3), q2 = rnd({300}, 3), q3 = rnd({300}, 3), u1 = zeros({300}), u2 = zeros({300}), u3 = zeros({300});
    Tensor s1 = rnd({300}, 4), s2 = rnd({300}, 4), s3 = rnd({300}, 4);
    const float f = static_cast<float>(gs);
    for (int step = 1; step <= 4; ++step) {
      cpu.adamw_update(p1, g, m1, v1, 1e-2, 0.9, 0.95, 1e-8, 0.1, step, gs);
      k::run_elements(k::adamw_step<float>(p<float>(p2), p<float>(g), p<float>(m2), p<float>(v2), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, f),
                      300);
      cpu.adamw_update(p3, scaled, m3, v3, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
      cpu.momentum_update(q1, g, u1, 0.1, 0.9, 0.01, step % 2 == 0, gs);
      k::run_elements(k::MomentumStep<float>{p<float>(q2), p<float>(g), p<float>(u2), 0.1f, 0.9f, 0.01f, step % 2 == 0, f}, 300);
      cpu.momentum_update(q3, scaled, u3, 0.1, 0.9, 0.01, step % 2 == 0);
      cpu.sgd_update(s1, g, 0.1, 0.01, gs);
      k::run_elements(k::SgdStep<float>{p<float>(s2), p<float>(g), 0.1f, 0.01f, f}, 300);
      cpu.sgd_update(s3, scaled, 0.1, 0.01);
    }
    for (const auto& [a, b, c] : {std::tuple{p1, p2, p3}, {m1, m2, m3}, {v1, v2, v3}, {q1, q2, q3}, {u1, u2, u3}, {s1, s2, s3}}) {
      CHECK(diff(b, a) < 1e-6);
      CHECK(diff(c, a) < 1e-6);
    }
    CHECK(diff(p1, rnd({300}, 2)) > 1e-3);  // the steps moved the values
  }
}
TEST_CASE("kernel bodies: the backward bodies equal finite differences of the forward bodies in double precision") {
  const std::int64_t rows = 4, cols = 7, t = 5;
  // loss = sum(w * f(x)) for a fixed w; its gradient by the backward body against central differences
  auto check = [&](Tensor x, const Tensor& w, const std::function<void(const Tensor&, const Tensor&)>& forward,
                   const std::function<Tensor(const Tensor&)>& backward) {
    auto loss = [&](const Tensor& at) {
      Tensor y = zeros<double>(w.shape());
      forward(at, y);
      double s = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i) s += y.span<double>()[i] * w.span<double>()[i];
      return s;
    };
    const Tensor analytic = backward(x);
    double worst = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double keep = x.span<double>()[i], h = 1e-6;
      x.span<double>()[i] = keep + h;
      const double up = loss(x);
      x.span<double>()[i] = keep - h;
      const double down = loss(x);
      x.span<double>()[i] = keep;
      worst = std::max(worst, std::abs((up - down) / (2 * h) - analytic.span<double>()[i]));
    }
    return worst;
  };
  const Tensor gamma = rnd<double>({cols}, 1), beta = rnd<double>({cols}, 2), w = rnd<double>({rows, cols}, 3);
  Tensor mean = zeros<double>({rows}), rstd = zeros<double>({rows});
  auto ln = [&](const Tensor& x, const Tensor& y) {
    k::run_rows(k::LayerNormRows<double>{p<double>(x), p<double>(gamma), p<double>(beta), p<double>(y), p<double>(mean), p<double>(rstd), cols, 1e-5},
                rows, 3);
  };
  CHECK(check(rnd<double>({rows, cols}, 4), w, ln, [&](const Tensor& x) {
    Tensor y = zeros<double>({rows, cols}), dx = zeros<double>({rows, cols});
    ln(x, y);
    k::run_rows(k::LayerNormBackwardRows<double>{p<double>(x), p<double>(gamma), p<double>(mean), p<double>(rstd), p<double>(w), p<double>(dx), cols},
                rows, 3);
    return dx;
  }) < 1e-7);
  const Tensor ws = rnd<double>({2, t, t}, 5);
  auto sm = [&](const Tensor& s, const Tensor& pr) { k::run_rows(k::SoftmaxCausalRows<double>{p<double>(s), p<double>(pr), t, 0.6}, 2 * t, 3); };
  CHECK(check(rnd<double>({2, t, t}, 6), ws, sm, [&](const Tensor& s) {
    Tensor pr = zeros<double>({2, t, t}), ds = zeros<double>({2, t, t});
    sm(s, pr);
    k::run_rows(k::SoftmaxCausalBackwardRows<double>{p<double>(pr), p<double>(ws), p<double>(ds), t, 0.6}, 2 * t, 3);
    return ds;
  }) < 1e-7);
  Tensor targets = cpu.empty({rows}, DType::kI64);
  for (std::int64_t r = 0; r < rows; ++r) targets.span<std::int64_t>()[r] = (3 * r + 1) % cols;
  k::Report bad;
  const Tensor one = cpu.empty({rows}, DType::kF64);
  cpu.fill(one, 1.0);
  auto ce = [&](const Tensor& l, const Tensor& per_row) {
    k::run_rows(k::CrossEntropyRows<double, std::int64_t>{p<double>(l), p<std::int64_t>(targets), p<double>(per_row), nullptr, cols, 1.0, &bad}, rows, 3);
  };
  CHECK(check(rnd<double>({rows, cols}, 7), one, ce, [&](const Tensor& l) {
    Tensor dl = zeros<double>({rows, cols});
    k::run_rows(k::CrossEntropyRows<double, std::int64_t>{p<double>(l), p<std::int64_t>(targets), nullptr, p<double>(dl), cols, 1.0, &bad}, rows, 3);
    return dl;
  }) < 1e-7);
}
TEST_CASE("cuBLAS argument mapping, padded for the aligned kernels: zero-padded copies of k and n give the same product") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const std::int64_t m = 5, n = 11, kk = 3;
      const device::PaddedGemm pg = device::padded_gemm(ta, tb, m, n, kk);
      CHECK(pg.n == 16);
      CHECK(pg.k == 8);
      CHECK(pg.a_cols % 8 == 0);
      CHECK(pg.b_cols % 8 == 0);
      const Tensor a = rnd(ta ? Shape{kk, m} : Shape{m, kk}, 1), b = rnd(tb ? Shape{n, kk} : Shape{kk, n}, 2);
      Tensor c = zeros({m, n});
      cpu.gemm(a, ta, b, tb, c);
      // the copies: each operand's storage with zeros to the right and below, as device::Cuda makes them
      auto padded = [](const Tensor& x, std::int64_t rows, std::int64_t cols) {
        Tensor y = zeros({rows, cols});
        for (std::int64_t r = 0; r < x.dim(0); ++r)
          for (std::int64_t j = 0; j < x.dim(1); ++j) y.span<float>()[r * cols + j] = x.span<float>()[r * x.dim(1) + j];
        return y;
      };
      const Tensor pa = padded(a, pg.a_rows, pg.a_cols), pb = padded(b, pg.b_rows, pg.b_cols);
      const device::ColumnMajorGemm g = device::column_major_gemm(ta, tb, m, pg.n, pg.k);
      CHECK(g.ld_first == pg.b_cols);
      Tensor out = zeros({m, pg.n});
      column_major_reference(g, p<float>(pb), pg.b_cols, p<float>(pa), pg.a_cols, out.data<float>());
      Tensor back = zeros({m, n});  // the rows of n_pad copied into c's rows of n
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) back.span<float>()[i * n + j] = out.span<float>()[i * pg.n + j];
      CHECK(diff(back, c) < 1e-6);
    }
}
TEST_CASE("cuBLAS argument mapping: the column-major call it describes computes the row-major GEMM") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const std::int64_t m = 5, n = 7, kk = 3;
      const Tensor a = rnd(ta ? Shape{kk, m} : Shape{m, kk}, 1), b = rnd(tb ? Shape{n, kk} : Shape{kk, n}, 2);
      Tensor c = zeros({m, n});
      cpu.gemm(a, ta, b, tb, c);
      // the column-major GEMM cuBLAS would run, on the same row-major buffers
      const device::ColumnMajorGemm g = device::column_major_gemm(ta, tb, m, n, kk);
      const float* first = g.first_is_b ? p<float>(b) : p<float>(a);
      const float* second = g.first_is_b ? p<float>(a) : p<float>(b);
      Tensor cm = zeros({m, n});
      column_major_reference(g, first, g.ld_first, second, g.ld_second, cm.data<float>());
      CHECK(diff(cm, c) < 1e-6);
    }
}
}
