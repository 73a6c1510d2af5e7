// Schedules are lists of actions that can be inspected before anything runs.
#include "../helpers.hpp"
#include "epl/strategy/schedule.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("accumulate: forward and backward of each micro-batch in turn, one in flight") {
  strategy::Accumulate s(3);
  CHECK(s.micro_batches() == 3);
  CHECK(strategy::describe(s.actions()) == "F0 B0 F1 B1 F2 B2");
  CHECK(strategy::max_in_flight(s.actions()) == 1);
  CHECK_THROWS_WITH_AS(strategy::Accumulate(0), doctest::Contains("pipeline.num_micro_batch = 0 must be at least 1"), Error);
  CHECK_THROWS_WITH_AS((void)s.actions(0, 2), doctest::Contains("needs a pipeline schedule"), Error);
}
}
