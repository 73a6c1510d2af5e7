#pragma once
/// \file
/// \brief The bodies of the schedules' functions (the header declares them): included by that
/// header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/strategy/schedule.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

EPL_LINKED std::vector<Action> Accumulate::actions(int stage, int stages) const {
  EPL_CHECK(stages == 1 && stage == 0, "gradient accumulation is the schedule of one stage; a model of ", stages,
            " stages needs a pipeline schedule (pipeline.strategy)");
  std::vector<Action> a;
  for (int m = 0; m < m_; ++m) {
    a.push_back({Action::Kind::kForward, m});
    a.push_back({Action::Kind::kBackward, m});
  }
  return a;
}

EPL_LINKED std::string describe(const std::vector<Action>& actions) {
  bool chunks = false;
  for (const auto& a : actions) chunks |= a.chunk != 0;
  std::string s;
  for (const auto& a : actions)
    s += (s.empty() ? "" : " ") + std::string(name_of(a.kind)) + std::to_string(a.micro_batch) +
         (chunks ? "." + std::to_string(a.chunk) : std::string());
  return s;
}

EPL_LINKED bool splits_backward(const std::vector<Action>& actions) {
  return std::any_of(actions.begin(), actions.end(), [](const Action& a) { return a.kind == Action::Kind::kWeight; });
}

EPL_LINKED int max_in_flight(const std::vector<Action>& actions) {
  const auto done = splits_backward(actions) ? Action::Kind::kWeight : Action::Kind::kBackward;
  int now = 0, most = 0;
  for (const auto& a : actions) {
    if (a.kind == Action::Kind::kForward) most = std::max(most, ++now);
    if (a.kind == done) --now;
  }
  return most;
}

EPL_LINKED std::vector<Action> with_communication(const std::vector<Action>& compute, int ranks, int chunks) {
  std::vector<Action> out;
  auto remote = [&](int a, int b) { return a % ranks != b % ranks; };
  for (const auto& a : compute) {
    const int c = a.chunk;
    if (a.kind == Action::Kind::kForward) {
      if (c > 0 && remote(c, c - 1)) out.push_back({Action::Kind::kRecvForward, a.micro_batch, c});
      out.push_back(a);
      if (c + 1 < chunks && remote(c, c + 1)) out.push_back({Action::Kind::kSendForward, a.micro_batch, c});
    } else if (a.kind == Action::Kind::kBackward) {
      if (c + 1 < chunks && remote(c, c + 1)) out.push_back({Action::Kind::kRecvBackward, a.micro_batch, c});
      out.push_back(a);
      if (c > 0 && remote(c, c - 1)) out.push_back({Action::Kind::kSendBackward, a.micro_batch, c});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

EPL_LINKED const ScheduleEntry& schedule_named(std::string_view name) {
  if (const auto* e = find_schedule(name)) return *e;
  std::string names;
  for (const auto& e : kSchedules)
    names += (names.empty() ? "" : ", ") + std::string(e.name) + (e.aliases.empty() ? "" : " (or " + std::string(e.aliases) + ")");
  EPL_FAIL("pipeline.strategy = \"", name, "\" is not a schedule; choose one of ", names);
}
}  // namespace strategy
}  // namespace v0
}  // namespace epl
