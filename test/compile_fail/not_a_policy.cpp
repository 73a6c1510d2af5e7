// Must not compile: a type that is not a policy in an epl::Policies<...> list (it once meant "no
// ZeRO", silently).
#include <epl/policy/policies.hpp>
int main() {
  using P = epl::Policies<int>;
  return P::zero::kStage;
}
