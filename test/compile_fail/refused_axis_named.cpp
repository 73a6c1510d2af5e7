// A combination whose policy axes cannot run, priced at compile time: the diagnostic names the
// reason's function (g++ prints no message of a constant evaluation), here ZeRO on one replica.
#include <epl/nn/activation.hpp>
#include <epl/nn/linear.hpp>
#include <epl/plan/static_search.hpp>

struct Net {
  epl::nn::SizedLinear<8, 8> a;
  epl::nn::SizedReLU<8> r;
  epl::nn::SizedLinear<8, 4> b;
};
constexpr epl::plan::Combination kOneReplicaZero1 = [] {
  epl::plan::Combination c{.data = 1};
  c.policies.zero = 1;
  return c;
}();
static_assert(epl::plan::static_price<Net>({.ranks = 1}, {.rows = 8}, kOneReplicaZero1).seconds > 0);

int main() {}
