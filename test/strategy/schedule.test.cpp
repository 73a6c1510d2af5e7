// Schedules are lists of actions that can be inspected before anything runs.
#include "../helpers.hpp"
#include "epl/strategy/schedule.hpp"

#include <numeric>

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

TEST_SUITE("cpu") {
TEST_CASE("GPipe: all forwards, then all backwards; stage 0 holds every micro-batch") {
  strategy::GPipe s(4);
  CHECK(strategy::describe(s.actions(0, 2)) == "F0 F1 F2 F3 B0 B1 B2 B3");
  CHECK(strategy::max_in_flight(s.actions(0, 2)) == 4);
}

TEST_CASE("1F1B: p - s - 1 warm-up forwards, then one forward one backward; at most p in flight on stage 0") {
  strategy::OneFOneB s(8);
  CHECK(strategy::describe(s.actions(0, 4)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(strategy::describe(s.actions(3, 4)) == "F0.3 B0.3 F1.3 B1.3 F2.3 B2.3 F3.3 B3.3 F4.3 B4.3 F5.3 B5.3 F6.3 B6.3 F7.3 B7.3");
  for (int p : {2, 4})
    for (int m : {1, 4, 8, 16})
      for (int stage = 0; stage < p; ++stage) {
        CAPTURE(p);
        CAPTURE(m);
        auto a = strategy::OneFOneB(m).actions(stage, p);
        CHECK(strategy::max_in_flight(a) == std::min(p - stage, m));
        CHECK(a.size() == static_cast<std::size_t>(2 * m));
      }
  CHECK(strategy::max_in_flight(strategy::OneFOneB(2).actions(0, 4)) == 2);  // fewer micro-batches than stages
}

TEST_CASE("interleaved: v chunks per rank, micro-batches in groups of p, each chunk's micro-batches in order") {
  strategy::Interleaved s(4, 2);  // 2 ranks, 4 chunks: rank 0 holds chunks 0 and 2
  CHECK(strategy::describe(s.actions(0, 2)) == "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 B3.2 B2.0 B3.0");
  for (int p : {2, 4})
    for (int m : {4, 8, 16})
      for (int stage = 0; stage < p; ++stage) {
        auto a = strategy::Interleaved(m, 2).actions(stage, p);
        CHECK(a.size() == static_cast<std::size_t>(2 * 2 * m));
        for (int c : {stage, stage + p}) {  // each of this rank's chunks sees F then B of every micro-batch, in order
          std::vector<int> f, b;
          for (const auto& x : a)
            if (x.chunk == c) (x.kind == strategy::Action::Kind::kForward ? f : b).push_back(x.micro_batch);
          std::vector<int> all(static_cast<std::size_t>(m));
          std::iota(all.begin(), all.end(), 0);
          CHECK(f == all);
          CHECK(b == all);
        }
      }
  for (int p : {2, 4})  // stage 0 holds its warm-up chunks plus one: (2(p - 1) + (v - 1) p + 1) chunks of 1/v stage
    for (int v : {2, 3}) {
      CAPTURE(p);
      CAPTURE(v);
      CHECK(strategy::max_in_flight(strategy::Interleaved(4 * p, v).actions(0, p)) == 2 * (p - 1) + (v - 1) * p + 1);
    }
  CHECK_THROWS_WITH_AS((void)strategy::Interleaved(3, 2).actions(0, 2), doctest::Contains("to be a multiple of the 2 pipeline ranks"), Error);
  CHECK_THROWS_WITH_AS(strategy::Interleaved(4, 1), doctest::Contains("with 1 it is 1F1B"), Error);
}

TEST_CASE("with_communication: receives before, sends after, none between chunks of one rank") {
  auto a = strategy::with_communication(strategy::OneFOneB(2).actions(1, 2), 2, 2);  // the last stage
  CHECK(strategy::describe(a) == "recvF0.1 F0.1 B0.1 sendB0.1 recvF1.1 F1.1 B1.1 sendB1.1");
  auto b = strategy::with_communication(strategy::OneFOneB(2).actions(0, 2), 2, 2);  // the first stage
  CHECK(strategy::describe(b) == "F0 sendF0 F1 sendF1 recvB0 B0 recvB1 B1");
  auto local = strategy::with_communication(strategy::Interleaved(1, 2).actions(0, 1), 1, 2);  // both chunks on one rank
  CHECK(strategy::describe(local) == "F0.0 F0.1 B0.1 B0.0");
  CHECK(strategy::theoretical_bubble(4, 8) == doctest::Approx(3.0 / 11));
  CHECK(strategy::theoretical_bubble(4, 8, 2) == doctest::Approx(3.0 / 19));
}
}
