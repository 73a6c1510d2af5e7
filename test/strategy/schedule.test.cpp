// Schedules are lists of actions that can be inspected before anything runs.
#include "../helpers.hpp"
#include "epl/strategy/schedule.hpp"

#include <map>
#include <numeric>

using namespace epl;

namespace test_strategy_schedule {

namespace {
// Runs every rank's list on ideal stages: F takes 1, B 2 (1 when the list splits off W, which
// takes 1), each action starting when its rank is free and what it needs is done (the forward of
// the chunk before, the backward of the chunk after, the own backward for W). Returns the step's
// time, or -1 if the lists deadlock.
double simulate(const std::vector<std::vector<strategy::Action>>& lists, int chunks) {
  using K = strategy::Action::Kind;
  const int p = static_cast<int>(lists.size());
  std::map<std::tuple<int, int, int>, double> done;  // (kind, chunk, micro-batch) -> end
  std::vector<std::size_t> next(lists.size(), 0);
  std::vector<double> free(lists.size(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      auto& i = next[static_cast<std::size_t>(r)];
      if (i == lists[static_cast<std::size_t>(r)].size()) continue;
      const auto& a = lists[static_cast<std::size_t>(r)][i];
      const bool split = strategy::splits_backward(lists[static_cast<std::size_t>(r)]);
      auto end = [&](K k, int c) -> const double* {
        auto it = done.find({static_cast<int>(k), c, a.micro_batch});
        return it == done.end() ? nullptr : &it->second;
      };
      const double* need = nullptr;
      double zero = 0;
      if (a.kind == K::kForward) need = a.chunk == 0 ? &zero : end(K::kForward, a.chunk - 1);
      else if (a.kind == K::kBackward) need = a.chunk == chunks - 1 ? end(K::kForward, a.chunk) : end(K::kBackward, a.chunk + 1);
      else need = end(K::kBackward, a.chunk);
      if (!need) continue;
      const double start = std::max(*need, free[static_cast<std::size_t>(r)]);
      const double took = a.kind == K::kBackward && !split ? 2 : 1;
      done[{static_cast<int>(a.kind), a.chunk, a.micro_batch}] = free[static_cast<std::size_t>(r)] = start + took;
      ++i;
      moved = true;
    }
  }
  for (std::size_t r = 0; r < lists.size(); ++r)
    if (next[r] != lists[r].size()) return -1;
  return *std::max_element(free.begin(), free.end());
}
}  // namespace

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

TEST_CASE("zero bubble (ZB-H1): 1F1B's forwards and backwards, W of micro-batch i after B of i + s on stage s") {
  strategy::ZeroBubble s(8);
  CHECK(strategy::describe(s.actions(0, 4)) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  CHECK(strategy::describe(s.actions(3, 4)) ==
        "F0.3 B0.3 F1.3 B1.3 F2.3 B2.3 F3.3 B3.3 W0.3 F4.3 B4.3 W1.3 F5.3 B5.3 W2.3 F6.3 B6.3 W3.3 F7.3 B7.3 W4.3 W5.3 W6.3 W7.3");
  for (int p : {2, 4, 8})
    for (int m : {1, 2, 4, 8, 16})
      for (int stage = 0; stage < p; ++stage) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(stage);
        const auto a = strategy::ZeroBubble(m).actions(stage, p);
        CHECK(a.size() == static_cast<std::size_t>(3 * m));
        // each micro-batch: F, then B, then W; W in order of micro-batches
        std::vector<int> w;
        std::map<int, std::string> seen;
        for (const auto& x : a) {
          seen[x.micro_batch] += strategy::name_of(x.kind);
          if (x.kind == strategy::Action::Kind::kWeight) w.push_back(x.micro_batch);
        }
        for (const auto& entry : seen) CHECK(entry.second == "FBW");
        CHECK(std::is_sorted(w.begin(), w.end()));
        // between F and W at most p micro-batches on every stage: 1F1B's stage 0
        CHECK(strategy::max_in_flight(a) == std::min(p, m));
        CHECK(strategy::max_in_flight(strategy::OneFOneB(m).actions(stage, p)) <= strategy::max_in_flight(a));
      }
}

TEST_CASE("schedules on ideal stages: every list runs without deadlock and takes its schedule's critical path") {
  // F 1, backward 2 (B 1 + W 1): a chunk-pass is 3, so a step takes 3 path(m, v, p)
  for (const auto& entry : strategy::kSchedules)
    for (int p : {2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16}) {
        const int v = entry.virtual_stages ? 2 : 1;
        if (v > 1 && m % p != 0) continue;
        CAPTURE(entry.name);
        CAPTURE(p);
        CAPTURE(m);
        std::vector<std::vector<strategy::Action>> lists;
        for (int s = 0; s < p; ++s) lists.push_back(entry.actions(m, v, s, p));
        const double step = simulate(lists, p * v);
        CHECK(step == doctest::Approx(3.0 * entry.path(m, v, p)));
        const double bubble = strategy::theoretical_bubble(entry, p, m, v);
        CHECK(bubble == doctest::Approx(1.0 - 3.0 * v * m / step));
        if (entry.splits_backward && m >= p) {
          CHECK(bubble == doctest::Approx(static_cast<double>(p - 1) / (3 * m + p - 1)));  // ZB-H1's (p - 1) / (3m + p - 1)
          CHECK(bubble < strategy::theoretical_bubble(p, m));                              // below 1F1B's
        }
      }
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
  auto zb = strategy::with_communication(strategy::ZeroBubble(2).actions(1, 2), 2, 2);  // W passes need no transfer
  CHECK(strategy::describe(zb) == "recvF0.1 F0.1 B0.1 sendB0.1 recvF1.1 F1.1 B1.1 sendB1.1 W0.1 W1.1");
}
}
}  // namespace test_strategy_schedule
