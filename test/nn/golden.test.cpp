// epl against PyTorch: the tiny GPT of tools/torch_reference.py, same parameters, same data;
// loss, logits and every parameter gradient must agree (both run in double precision).
#include <cmath>
#include <fstream>
#include <sstream>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"

using namespace epl;
namespace nn = epl::nn;

namespace test_nn_golden {

namespace {
struct TinyGpt {  // examples/gpt's block between embeddings and head, as in the PyTorch script
  nn::Embedding tok;
  nn::PositionEmbedding pos;
  gpt::Block block;
  nn::LayerNorm ln;
  nn::Linear lm;
};
struct Golden {
  double loss = 0;
  std::vector<double> logits;
  std::vector<std::vector<double>> grads;
};
Golden read_golden() {
  std::ifstream in(std::string(EPL_GOLDEN_DIR) + "/gpt_tiny.txt");
  REQUIRE(in.good());
  Golden g;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string tag;
    s >> tag;
    std::vector<double> v;
    if (tag == "loss") s >> g.loss;
    else if (tag == "logits") for (double x; s >> x;) g.logits.push_back(x);
    else if (tag == "grad") {
      int k;
      s >> k;
      for (double x; s >> x;) v.push_back(x);
      g.grads.push_back(v);
    }
  }
  return g;
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("a tiny GPT matches PyTorch: loss, logits and all gradients") {
  const std::int64_t V = 11, T = 5, C = 8, H = 2, B = 2;
  Golden g = read_golden();
  REQUIRE(g.grads.size() == 18);
  TinyGpt m{nn::Embedding(V, C), nn::PositionEmbedding(T, C),
            gpt::make_block({.vocab = V, .context = T, .layers = 1, .heads = H, .dim = C}),
            nn::LayerNorm(C), nn::Linear(C, V)};
  (void)param::materialize(m, test::cpu64(), {.dtype = DType::kF64, .seed = 0});
  int k = 0;
  nn::visit_parameters(m, [&](std::string_view name, nn::Parameter& p) {
    const bool ln_weight = name.ends_with("weight") && p.shape.rank() == 1;
    auto v = p.value.span<double>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.3 * std::sin(0.9 * (k + 1) + 0.37 * i) + (ln_weight ? 1.0 : 0.0);
    ++k;
  });
  Tensor ids = test::cpu64().empty({B, T}, DType::kI64), targets = test::cpu64().empty({B, T}, DType::kI64);
  for (std::int64_t i = 0; i < B * T; ++i) {
    ids.span<std::int64_t>()[i] = (3 * i + 1) % V;
    targets.span<std::int64_t>()[i] = (5 * i + 2) % V;
  }
  test::Ctx64 ctx(test::cpu64());
  nn::SoftmaxCrossEntropy xent;
  Tensor logits = nn::forward(m, ctx, ids);
  double loss = xent.forward(ctx, logits, targets);
  nn::backward(m, ctx, xent.backward(ctx));
  CHECK(loss == doctest::Approx(g.loss).epsilon(1e-12));
  CHECK(test::max_rel_diff(test::values<double>(logits), g.logits) < 1e-12);
  k = 0;
  nn::visit_parameters(m, [&](std::string_view name, nn::Parameter& p) {
    CAPTURE(name);
    CHECK(test::max_rel_diff(test::values<double>(p.grad), g.grads[k++]) < 1e-12);
  });
}
}
}  // namespace test_nn_golden
