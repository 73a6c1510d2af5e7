#pragma once
/// \file
/// \brief Schedules: for each pipeline stage, the list of actions a rank runs in one step —
/// forward micro-batch m, backward micro-batch m, send or receive an activation or a gradient —
/// computed before anything runs, so a test can inspect the order and the micro-batches in
/// flight. The step engine executes the list; a single-stage model's schedule is gradient
/// accumulation.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

/// \brief One thing a rank does in a step.
struct Action {
  enum class Kind : std::uint8_t {
    kForward,       ///< run the stage's forward on micro-batch m
    kBackward,      ///< run the stage's backward on micro-batch m
    kSendForward,   ///< send micro-batch m's activations to the next stage
    kRecvForward,   ///< receive micro-batch m's activations from the previous stage
    kSendBackward,  ///< send micro-batch m's input gradient to the previous stage
    kRecvBackward,  ///< receive micro-batch m's output gradient from the next stage
  };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  friend bool operator==(const Action&, const Action&) = default;
};

inline const char* name_of(Action::Kind k) {
  constexpr const char* names[] = {"F", "B", "sendF", "recvF", "sendB", "recvB"};
  return names[static_cast<int>(k)];
}
/// \brief "F0 B0 F1 B1": a list of actions as text, for tests and logs.
inline std::string describe(const std::vector<Action>& actions) {
  std::string s;
  for (const auto& a : actions) s += (s.empty() ? "" : " ") + std::string(name_of(a.kind)) + std::to_string(a.micro_batch);
  return s;
}

/// \brief S satisfies schedule if it names its micro-batch count and gives each stage of a
/// pipeline of `stages` stages its list of actions for one step.
template <class S>
concept schedule = requires(const S& s, int stage, int stages) {
  { s.micro_batches() } -> std::convertible_to<int>;
  { s.actions(stage, stages) } -> std::same_as<std::vector<Action>>;
};

/// \brief The most micro-batches a list of actions holds in flight (forwarded, not yet
/// backward): the activations a stage keeps at its peak.
inline int max_in_flight(const std::vector<Action>& actions) {
  int now = 0, most = 0;
  for (const auto& a : actions) {
    if (a.kind == Action::Kind::kForward) most = std::max(most, ++now);
    if (a.kind == Action::Kind::kBackward) --now;
  }
  return most;
}

/// \brief Gradient accumulation, the schedule of a single stage: F0 B0 F1 B1 ... one micro-batch
/// in flight at a time, the gradients accumulating (pipeline.num_micro_batch).
class Accumulate {
 public:
  explicit Accumulate(int micro_batches) : m_(micro_batches) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
  }
  [[nodiscard]] int micro_batches() const noexcept { return m_; }
  [[nodiscard]] std::vector<Action> actions(int stage = 0, int stages = 1) const {
    EPL_CHECK(stages == 1 && stage == 0, "gradient accumulation is the schedule of one stage; a model of ", stages,
              " stages needs a pipeline schedule (pipeline.strategy)");
    std::vector<Action> a;
    for (int m = 0; m < m_; ++m) {
      a.push_back({Action::Kind::kForward, m});
      a.push_back({Action::Kind::kBackward, m});
    }
    return a;
  }

 private:
  int m_;
};

static_assert(schedule<Accumulate>);

}  // namespace strategy
}  // namespace v0
}  // namespace epl
