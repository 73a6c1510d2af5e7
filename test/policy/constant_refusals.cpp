// Compiled, not run, with -fsanitize=undefined (test/CMakeLists.txt): g++ then keeps the address
// of an object apart from null at compile time, so a constant evaluation that compared a home's
// refusal (a pointer to its reason) with null was not constant, and a program that planned at
// compile time under UBSan did not build. The policies' refusals are values for that reason.
#include <epl/policy/axes.hpp>

namespace policy = epl::policy;

constexpr policy::Choice with(int zero, bool offload) {
  policy::Choice c;
  c.zero = zero;
  c.offload = offload;
  return c;
}
// refused, each by its own home, and accepted
static_assert(policy::refusal(with(1, false), {.data = 1}));
static_assert(policy::refusal(with(0, true), {.data = 2}));
static_assert(policy::refusal(with(2, false), {.data = 2, .pipeline = 2, .splits_backward = true}));
static_assert(!policy::refusal(with(3, true), {.data = 1}));
static_assert(!policy::refusal(with(1, false), {.data = 2}));
// the choices a search walks: every value of every axis on 2 replicas, none refused but offload
// without stage 3 (0, 1 and 2 with it)
constexpr int walked() {
  policy::Choice most;
  most.zero = 3;
  most.offload = true;
  most.recompute = true;
  int n = 0;
  policy::for_each_choice(most, {.data = 2}, [&](const policy::Choice&) { ++n; });
  return n;
}
static_assert(walked() == (4 + 1) * 2);
