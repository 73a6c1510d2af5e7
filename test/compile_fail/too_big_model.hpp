#pragma once
// A model of 10^9 parameters that its layer states statically (16 bytes an element with AdamW:
// 16,000,000,000 a rank without ZeRO), for the compile-fail tests of a budget it does not fit.
#include <epl/plan/fits.hpp>

struct Big {
  epl::nn::Linear l{1, 1};
  template <class V> void visit(V&& v) { l.visit(v); }
};
template <>
struct epl::strategy::static_cost<Big> {
  static constexpr Cost value{.macs_per_token = 1e9, .parameters = 1'000'000'000, .activation_bytes = 0};
};
struct Model {
  Big big;
};
