// The multi-rank device matrix on device::Isolated: thread ranks whose buffers live in a memory
// space host code cannot touch train every strategy and policy equal to one device and to the CPU,
// so every host access and staging copy a GPU run would trip on shows up here first.
#include <doctest/doctest.h>

#include "../multirank_matrix.hpp"
#include "epl/device/isolated/isolated.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("isolated matrix: every strategy and policy on 2 and 4 ranks of separate memory equals one device and the CPU") {
  // device::Isolated runs the CPU's kernels: one device of it equals the CPU exactly
  test::matrix::run_all([](int r) { return std::make_unique<device::Isolated>(120 + r); }, 1e-5, 1e-12, 1e-5);
  test::matrix::print_table("device::Isolated");
}
}
