// The names a rename left behind (CHANGELOG.md, Deprecated) are the new types, so a program of
// 0.1 compiles and trains unchanged for the 0.2 releases; their use warns (compile_fail.deprecated_name).
#include "../helpers.hpp"
#include "epl/comm/run_threads.hpp"
#include "epl/nn/checkpoint.hpp"
#include "epl/nn/context.hpp"

#include <type_traits>

using namespace epl;

namespace test_runtime_deprecated {

TEST_SUITE("cpu") {
TEST_CASE("deprecated names are the renamed types, and a model written with them trains") {
  static_assert(std::is_same_v<Checkpoint<nn::Linear>, Recompute<nn::Linear>>);
  static_assert(std::is_same_v<nn::Checkpoint<nn::Linear, nn::ReLU>, nn::Recompute<nn::Linear, nn::ReLU>>);
  static_assert(std::is_same_v<nn::Context<device::Cpu>, nn::Pass<device::Cpu>>);
  static_assert(std::is_same_v<nn::CpuContext, nn::Pass<device::Cpu>>);
  static_assert(std::is_same_v<testing::CheckContext, testing::CheckPass>);
  static_assert(kVersion.major == 0 && kVersion.minor == 2);
  struct Net {
    Checkpoint<nn::Linear, nn::ReLU> body;
    nn::Linear head;
  };
  Trainer<Net, optim::SGD> t(test::cpu(), Config{}, Net{Checkpoint<nn::Linear, nn::ReLU>(nn::Linear(3, 4), {}), nn::Linear(4, 2)},
                             optim::SGD({.lr = 0.1}));
  const Batch b{test::random({4, 3}, 1), test::ids({4}, 2, 2)};
  const double first = t.step(b);
  for (int i = 0; i < 5; ++i) (void)t.step(b);
  CHECK(t.step(b) < first);
}
}
}  // namespace test_runtime_deprecated
