// Must not compile: a model that does not fit its budget, checked with static_assert(plan::fits(...))
// and with plan::static_search. Each error names the reason and shows the bytes a rank needs
// (16 bytes an element with AdamW: 16,000,000,000 for fits; the search's smallest plan for
// static_search), as the index of an array named for the reason; clang shows the budget too.
#include <epl/plan/static_search.hpp>

#include "too_big_model.hpp"

static_assert(epl::plan::fits<Model>({.ranks = 2}, {.bytes = 8'000'000'000, .rows = 2}));
static_assert(epl::plan::static_search<Model>({.ranks = 1}, {.bytes = 8'000'000'000, .rows = 2}).count > 0);
int main() {}
