// Must not compile: a model that does not fit its budget, checked with plan::fits_v. The error
// names the reason (the optimizer state is largest: add epl::Zero<1>) and shows the bytes a rank
// needs (16 bytes an element with AdamW: 16,000,000,000) and its budget (8,000,000,000).
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
constexpr epl::plan::Cluster kCluster{.ranks = 2};
constexpr epl::plan::Budget kBudget{.bytes = 8'000'000'000, .rows = 2};
static_assert(epl::plan::fits_v<Model, epl::Policies<>, kCluster, kBudget>);
int main() {}
