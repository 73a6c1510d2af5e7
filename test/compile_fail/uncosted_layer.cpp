// Must not compile: a model planned at compile time with a layer whose costs its type does not
// state (an nn::Repeat: its count is a run-time value). One error names it; the search stops
// there (it went on into 21 kB of errors about what it priced from that unit).
#include <epl/plan/static_search.hpp>

struct Model {
  epl::nn::SizedLinear<16, 16> in;
  epl::nn::Repeat<epl::nn::SizedLinear<16, 16>> body;
};
constexpr auto kFound = epl::plan::static_search<Model>({.ranks = 2}, {.bytes = 1 << 30, .rows = 64});
int main() { return kFound.count > 0 ? 0 : 1; }
