// Must not compile: two tags of one policy in an epl::Policies<...> list (which would win?).
#include <epl/policy/policies.hpp>
int main() {
  using P = epl::Policies<epl::Zero<1>, epl::Ema, epl::Zero<2>>;
  return P::zero::kStage;
}
