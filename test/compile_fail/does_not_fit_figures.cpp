// Must not compile: a model that does not fit its budget, checked with plan::fits_v. The error
// names the reason (the optimizer state is largest: add epl::Zero<1>) and shows the bytes a rank
// needs (16 bytes an element with AdamW: 16,000,000,000) and its budget (8,000,000,000).
#include <epl/plan/fits.hpp>

#include "too_big_model.hpp"

constexpr epl::plan::Cluster kCluster{.ranks = 2};
constexpr epl::plan::Budget kBudget{.bytes = 8'000'000'000, .rows = 2};
static_assert(epl::plan::fits_v<Model, epl::Policies<>, kCluster, kBudget>);
int main() {}
