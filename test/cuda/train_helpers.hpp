// Helpers of the CUDA trainer tests: train a model on a device for a few steps, read its
// parameters back from whichever device holds them.
#pragma once
#include <cmath>

#include "../../examples/gpt/gpt.hpp"
#include "epl/device/cuda/cuda.cuh"

namespace epl::test {
struct Run {
  std::vector<double> losses, params;
};
inline data::TokenDataset corpus() {
  std::vector<std::int32_t> t(6000);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * i + 3 * i) % 89);
  return data::TokenDataset::from_tokens(t, 96);
}
// The values of every parameter, read back from whichever device holds them.
template <class D, class M>
std::vector<double> params_of(const D& d, M& m) {
  std::vector<double> v;
  nn::for_each_parameter(m, [&](nn::Parameter& p) {
    std::vector<float> h(static_cast<std::size_t>(p.value.numel()));
    d.download(p.value, h.data());
    v.insert(v.end(), h.begin(), h.end());
  });
  return v;
}
inline gpt::Shape shape() { return {.vocab = 96, .context = 40, .layers = 2, .heads = 2, .dim = 48}; }

template <class Policy, class Model, class Optimizer, class D>
Run train(const D& d, Model model, Optimizer opt, const Config& cfg, int steps, Context* ctx = nullptr) {
  auto run = [&](auto& t) {
    Run r;
    auto ds = corpus();
    data::WindowLoader loader(ds, shape().context, 8, 17, t.data_shard());
    for (int s = 0; s < steps; ++s) r.losses.push_back(t.step(loader.next(d)));
    t.gather_parameters();
    r.params = params_of(d, t.model());
    return r;
  };
  const TrainerOptions o{.seed = 5, .clip_norm = 0.5};
  if (ctx) {
    Trainer<Model, Optimizer, Policy, nn::SoftmaxCrossEntropy, D> t(*ctx, d, cfg, std::move(model), std::move(opt), o);
    return run(t);
  }
  Trainer<Model, Optimizer, Policy, nn::SoftmaxCrossEntropy, D> t(d, cfg, std::move(model), std::move(opt), o);
  return run(t);
}
inline double rel(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}
}  // namespace epl::test
