#pragma once
// Small helpers shared by the tests: host tensors from lists and element-wise comparison.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "epl/epl.hpp"
#include "epl/testing/gradcheck.hpp"

namespace epl::test {

/// The training device (f32).
inline device::Cpu& cpu() {
  static device::Cpu d;
  return d;
}
/// The device for gradient checks and double-precision references (f32 and f64).
inline device::CpuF64& cpu64() {
  static device::CpuF64 d;
  return d;
}

/// The pass context of f64 (gradient-check) runs, and of f32 ones.
using Ctx64 = nn::Pass<device::CpuF64>;
using CpuPass = nn::Pass<device::Cpu>;

template <class T = float>
Tensor tensor(Shape s, const std::vector<double>& values, MemoryCategory c = MemoryCategory::kActivations) {
  Tensor t = cpu64().empty(s, dtype_v<T>, c);
  REQUIRE(static_cast<std::int64_t>(values.size()) == t.numel());
  for (std::size_t i = 0; i < values.size(); ++i) t.span<T>()[i] = static_cast<T>(values[i]);
  return t;
}
/// Counter-based values in [-1, 1): reproducible inputs.
template <class T = float>
Tensor random(Shape s, std::uint64_t seed) {
  Tensor t = cpu().empty(s, dtype_v<T>);
  auto key = stream_key(seed, 1);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.span<T>()[i] = static_cast<T>(2 * uniform01(key, i) - 1);
  return t;
}
inline Tensor ids(Shape s, std::int64_t vocab, std::uint64_t seed) {
  Tensor t = cpu().empty(s, DType::kI32);
  auto key = stream_key(seed, 2);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.span<std::int32_t>()[i] = static_cast<std::int32_t>(uniform01(key, i) * vocab);
  return t;
}
template <class T = float>
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (auto x : t.span<T>()) v.push_back(static_cast<double>(x));
  return v;
}
/// max |a - b| / max(1, |b|) over all elements.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return m;
}
/// The rows of `whole` (the values of a [rows, ...] tensor laid flat) that `part` (count of them)
/// holds, from row `first`: a rank's trainer.predict against one device's.
inline std::vector<double> rows_like(const std::vector<double>& whole, std::int64_t rows, const std::vector<double>& part,
                                     std::int64_t first) {
  const auto per = static_cast<std::int64_t>(whole.size()) / rows;
  REQUIRE(static_cast<std::int64_t>(part.size()) % per == 0);
  REQUIRE(first * per + static_cast<std::int64_t>(part.size()) <= static_cast<std::int64_t>(whole.size()));
  const auto from = whole.begin() + first * per;
  return {from, from + static_cast<std::ptrdiff_t>(part.size())};
}

/// Learnable token ids, (i^2 + 3i) mod 29, over a vocabulary of 32.
inline data::TokenDataset token_corpus(std::size_t n) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * i + 3 * i) % 29);
  return data::TokenDataset::from_tokens(t, 32);
}
/// The peak bytes of `category` on device `id` while `run()` runs (a step), over what it held
/// before: what a planner's prediction for that category is checked against.
template <class Run>
std::int64_t peak_during(DeviceId id, MemoryCategory category, Run&& run) {
  const std::int64_t before = memory_stats(id).current_of(category);
  memory_account(id).reset_peaks();
  run();
  return memory_stats(id).peak_of(category) - before;
}
/// Every f32 parameter value of a model, in visiting order.
template <class M>
std::vector<double> flat_params(M& m) {
  std::vector<double> v;
  nn::for_each_parameter(m, [&](nn::Parameter& p) {
    for (float x : p.value.span<float>()) v.push_back(x);
  });
  return v;
}

}  // namespace epl::test
