#pragma once
/// \file
/// \brief Schedules: for each pipeline stage, the list of actions a rank runs in one step —
/// forward micro-batch m, backward micro-batch m (whole, or split into its input-gradient pass B
/// and its weight-gradient pass W), send or receive an activation or a gradient —
/// computed before anything runs, so a test can inspect the order and the micro-batches in
/// flight. The step engine executes the list; a single-stage model's schedule is gradient
/// accumulation.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/linked.hpp"

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
    kWeight,        ///< run micro-batch m's weight-gradient work, which its backward (B) left for later
  };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  int chunk = 0;  ///< the model chunk (pipeline stage, counting virtual stages) it runs on
  friend bool operator==(const Action&, const Action&) = default;
};

inline const char* name_of(Action::Kind k) {
  constexpr const char* names[] = {"F", "B", "sendF", "recvF", "sendB", "recvB", "W"};
  return names[static_cast<int>(k)];
}
/// \brief "F0 B0 F1 B1" (with chunks when any is not 0: "F0.1"): a list of actions as text.
EPL_LINKED std::string describe(const std::vector<Action>& actions);

/// \brief S satisfies schedule if it names its micro-batch count and gives each stage of a
/// pipeline of `stages` stages its list of forward and backward actions for one step (the sends
/// and receives follow from them: with_communication).
template <class S>
concept schedule = requires(const S& s, int stage, int stages) {
  { s.micro_batches() } -> std::convertible_to<int>;
  { s.actions(stage, stages) } -> std::same_as<std::vector<Action>>;
};

/// \brief Whether a list splits backward into B and W passes (a zero-bubble schedule's).
EPL_LINKED bool splits_backward(const std::vector<Action>& actions);

/// \brief The most micro-batches a list of actions holds in flight (forwarded, not yet
/// backward; with W passes, not yet through W, which still needs part of the activations): the
/// activations a stage keeps at its peak.
EPL_LINKED int max_in_flight(const std::vector<Action>& actions);

/// \brief Gradient accumulation, the schedule of a single stage: F0 B0 F1 B1 ... one micro-batch
/// in flight at a time, the gradients accumulating (pipeline.num_micro_batch).
class Accumulate {
 public:
  explicit Accumulate(int micro_batches) : m_(micro_batches) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
  }
  [[nodiscard]] int micro_batches() const noexcept { return m_; }
  [[nodiscard]] EPL_LINKED std::vector<Action> actions(int stage = 0, int stages = 1) const;

 private:
  int m_;
};

static_assert(schedule<Accumulate>);

/// \brief GPipe (EPL's PreferForward): every micro-batch's forward, then every backward. Stage
/// 0 holds all M micro-batches' activations at its peak.
class GPipe {
 public:
  constexpr explicit GPipe(int micro_batches) : m_(micro_batches) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
  }
  [[nodiscard]] constexpr int micro_batches() const noexcept { return m_; }
  /// A constant expression, as every schedule's: the compile-time planner walks it.
  [[nodiscard]] constexpr std::vector<Action> actions(int stage, int stages) const {
    EPL_CHECK(stages >= 1 && stage >= 0 && stage < stages, "stage ", stage, " of a pipeline of ", stages, " stages");
    std::vector<Action> a;
    for (int m = 0; m < m_; ++m) a.push_back({Action::Kind::kForward, m, stage});
    for (int m = 0; m < m_; ++m) a.push_back({Action::Kind::kBackward, m, stage});
    return a;
  }

 private:
  int m_;
};

/// \brief 1F1B (EPL's PreferBackward): stage s runs p - s - 1 forwards, then alternates one
/// forward and one backward, then the remaining backwards; at most p micro-batches are in flight
/// on stage 0, whatever M is. Same bubble as GPipe: (p - 1) / (m + p - 1).
class OneFOneB {
 public:
  constexpr explicit OneFOneB(int micro_batches) : m_(micro_batches) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
  }
  [[nodiscard]] constexpr int micro_batches() const noexcept { return m_; }
  [[nodiscard]] constexpr std::vector<Action> actions(int stage, int stages) const {
    EPL_CHECK(stages >= 1 && stage >= 0 && stage < stages, "stage ", stage, " of a pipeline of ", stages, " stages");
    const int warmup = std::min(stages - stage - 1, m_);
    std::vector<Action> a;
    for (int m = 0; m < warmup; ++m) a.push_back({Action::Kind::kForward, m, stage});
    for (int i = 0; i < m_ - warmup; ++i) {
      a.push_back({Action::Kind::kForward, warmup + i, stage});
      a.push_back({Action::Kind::kBackward, i, stage});
    }
    for (int m = m_ - warmup; m < m_; ++m) a.push_back({Action::Kind::kBackward, m, stage});
    return a;
  }

 private:
  int m_;
};

/// \brief ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024; in neither EPL nor
/// Megatron-LM): 1F1B's order of forwards and backwards, with each backward split into B (the
/// input gradient, which the previous stage waits for) and W (the weight gradients, which nobody
/// waits for). Stage s runs W of micro-batch i right after B of micro-batch i + s, and the last
/// s W passes at the end: the W passes fill the time a stage would wait for gradients in 1F1B's
/// cool-down, and the B passes reach stage 0 a W sooner per stage. With F, B and W of equal time
/// the bubble is (p - 1) of them against 1F1B's 3(p - 1): (p - 1) / (3m + p - 1) of the step for
/// m >= p (kSchedules' path gives fewer micro-batches' too). Every stage holds at most p micro-batches' activations between F and W, as 1F1B's
/// stage 0 does (1F1B's later stages hold fewer).
class ZeroBubble {
 public:
  constexpr explicit ZeroBubble(int micro_batches) : m_(micro_batches) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
  }
  [[nodiscard]] constexpr int micro_batches() const noexcept { return m_; }
  [[nodiscard]] constexpr std::vector<Action> actions(int stage, int stages) const {
    std::vector<Action> a;
    int weights = 0;  // W passes placed: micro-batches [0, weights)
    const auto one_f_one_b = OneFOneB(m_).actions(stage, stages);  // named: g++ 12 frees a range-for's temporary twice in a constant expression
    for (const auto& x : one_f_one_b) {
      a.push_back(x);
      if (x.kind == Action::Kind::kBackward && x.micro_batch >= stage) a.push_back({Action::Kind::kWeight, weights++, stage});
    }
    while (weights < m_) a.push_back({Action::Kind::kWeight, weights++, stage});
    return a;
  }

 private:
  int m_;
};

/// \brief Interleaved 1F1B (Megatron-LM's; not in EPL): each of the p ranks holds v model chunks
/// (virtual stages s, s + p, ..., s + (v-1)p of a model cut into p v stages), and micro-batches
/// go round the ranks v times. The bubble shrinks v-fold: (p - 1) / (v m + p - 1) of the step.
/// Needs m to be a multiple of p.
class Interleaved {
 public:
  constexpr Interleaved(int micro_batches, int virtual_stages) : m_(micro_batches), v_(virtual_stages) {
    EPL_CHECK(micro_batches >= 1, "pipeline.num_micro_batch = ", micro_batches, " must be at least 1");
    EPL_CHECK(virtual_stages >= 2, "the interleaved schedule needs at least 2 model chunks per rank "
              "(pipeline.num_virtual_stages = ", virtual_stages, "); with 1 it is 1F1B (PreferBackward)");
  }
  [[nodiscard]] constexpr int micro_batches() const noexcept { return m_; }
  [[nodiscard]] constexpr int virtual_stages() const noexcept { return v_; }
  /// \param stage the rank's place on the pipeline axis (0 .. ranks - 1)
  /// \param ranks the ranks on the pipeline axis (p); chunk c of the model runs on rank c % p
  /// A constant expression, as the compile-time planner walks it (the order a rank's chunks'
  /// gradient blocks are reduced in).
  [[nodiscard]] constexpr std::vector<Action> actions(int stage, int ranks) const {
    const int p = ranks, v = v_;
    EPL_CHECK(p >= 1 && stage >= 0 && stage < p, "stage ", stage, " of a pipeline of ", p, " ranks");
    EPL_CHECK(m_ % p == 0, "the interleaved schedule needs pipeline.num_micro_batch (", m_, ") to be a multiple of the ", p,
              " pipeline ranks");
    const int total = m_ * v;
    // the i-th forward (or backward) of this rank: micro-batch and chunk, Megatron's order
    auto micro = [&](int i) { return (i / (p * v)) * p + i % p; };
    auto chunk_f = [&](int i) { return ((i / p) % v) * p + stage; };
    auto chunk_b = [&](int i) { return (v - 1 - (i / p) % v) * p + stage; };
    const int warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p);
    std::vector<Action> a;
    for (int i = 0; i < warmup; ++i) a.push_back({Action::Kind::kForward, micro(i), chunk_f(i)});
    for (int i = 0; i < total - warmup; ++i) {
      a.push_back({Action::Kind::kForward, micro(warmup + i), chunk_f(warmup + i)});
      a.push_back({Action::Kind::kBackward, micro(i), chunk_b(i)});
    }
    for (int i = total - warmup; i < total; ++i) a.push_back({Action::Kind::kBackward, micro(i), chunk_b(i)});
    return a;
  }

 private:
  int m_, v_;
};

/// \brief Inserts the point-to-point actions a list of forwards and backwards implies, for a
/// model of `chunks` chunks with chunk c on pipeline rank c % ranks: a forward of chunk c > 0
/// first receives its input, and a forward of chunk c < chunks - 1 then sends its output; a
/// backward of a chunk c < chunks - 1 first receives its output's gradient, and a backward of
/// chunk c > 0 then sends its input's gradient. Transfers between chunks of one rank are local
/// and get no actions.
EPL_LINKED std::vector<Action> with_communication(const std::vector<Action>& compute, int ranks, int chunks);

/// \brief A pipeline schedule as pipeline.strategy names it: what it runs on each stage, from the
/// micro-batch count m, the chunks per rank v (its virtual stages; 1 unless virtual_stages) and
/// the rank's place.
struct ScheduleEntry {
  std::string_view name;  ///< pipeline.strategy's value
  std::string_view help;
  /// Other names pipeline.strategy accepts for it, comma-separated: what Megatron, DeepSpeed and
  /// the papers call it ("1F1B", "GPipe", "ZB-H1").
  std::string_view aliases;
  bool virtual_stages;    ///< runs several model chunks per rank (pipeline.num_virtual_stages)
  bool splits_backward;   ///< runs backward as B and W passes (a layer's weight-gradient work waits for W)
  std::vector<Action> (*actions)(int m, int v, int stage, int ranks);
  /// The critical path of a step of ideal stages, in passes of one chunk (a forward and its whole
  /// backward): v m + p - 1 for 1F1B, GPipe and Interleaved; for ZB-H1, with F, B and W each a
  /// third of a pass, m + (p - 1) / 3 when m >= p, else (2(p + m) - 1) / 3 (the first B waits
  /// for the forward to cross every stage). The bubble is 1 - v m / path.
  double (*path)(int m, int v, int ranks);
  /// Micro-batches of a stage's activations the busiest rank (the first) holds at its peak, in
  /// stage-activations (its v chunks' of one micro-batch make 1): m for GPipe (every forward before
  /// any backward); the warm-up's min(m, p) for 1F1B and ZB-H1; Interleaved's warm-up of
  /// 2(p - 1) + (v - 1)p + 1 chunk-passes, over v.
  double (*in_flight)(int m, int v, int ranks);
  /// How a plan's name shows it ("1F1B"; a schedule of virtual stages adds their count).
  std::string_view label;
};

/// \brief Every pipeline schedule pipeline.strategy may name, the default first. A new schedule is
/// its class above and one entry here: the configuration's choices and the plan read this list.
inline constexpr ScheduleEntry kSchedules[] = {
    {"PreferBackward", "1F1B", "1F1B,1f1b,PipeDream-Flush,one-forward-one-backward", false, false, [](int m, int, int s, int p) { return OneFOneB(m).actions(s, p); },
     [](int m, int, int p) { return static_cast<double>(m + p - 1); }, [](int m, int, int p) { return static_cast<double>(std::min(m, p)); },
     "1F1B"},
    {"PreferForward", "GPipe", "GPipe,gpipe,AFAB,all-forward-all-backward", false, false, [](int m, int, int s, int p) { return GPipe(m).actions(s, p); },
     [](int m, int, int p) { return static_cast<double>(m + p - 1); }, [](int m, int, int) { return static_cast<double>(m); }, "GPipe"},
    {"Interleaved", "1F1B over virtual stages, epl", "interleaved,interleaved-1F1B,interleaved-1f1b,virtual-pipeline", true, false, [](int m, int v, int s, int p) { return Interleaved(m, v).actions(s, p); },
     [](int m, int v, int p) { return static_cast<double>(v * m + p - 1); },
     [](int m, int v, int p) { return static_cast<double>(std::min(2 * (p - 1) + (v - 1) * p + 1, m * v)) / v; }, "Interleaved"},
    {"ZeroBubble", "ZB-H1, backward split into B and W passes, epl", "ZB-H1,ZBH1,zbh1,zb,zero-bubble", false, true,
     [](int m, int, int s, int p) { return ZeroBubble(m).actions(s, p); },
     [](int m, int, int p) { return std::max(3.0 * m + p - 1, 2.0 * (p + m) - 1) / 3.0; },
     [](int m, int, int p) { return static_cast<double>(std::min(m, p)); }, "ZeroBubble"},
};

/// \brief The default schedule (kSchedules' first): what a run of one stage is planned with.
inline constexpr const ScheduleEntry& kDefaultSchedule = kSchedules[0];

/// \brief A schedule's place in kSchedules (what a broadcast of a plan sends), and back; a place out
/// of range is an error.
inline std::size_t schedule_index(const ScheduleEntry& s) { return static_cast<std::size_t>(&s - kSchedules); }
inline const ScheduleEntry& schedule_at(std::size_t i) {
  EPL_CHECK(i < std::size(kSchedules), "schedule number ", i, " is not one of the ", std::size(kSchedules), " pipeline schedules");
  return kSchedules[i];
}

/// \brief Whether s is one of kSchedules' entries (null or any other pointer is not). A constant
/// expression may compare it with each entry's address; comparing it with null is not one under
/// GCC's -fsanitize=undefined, which is why the searches ask this instead.
constexpr bool is_schedule(const ScheduleEntry* s) {
  for (const auto& e : kSchedules)
    if (s == &e) return true;
  return false;
}

/// \brief fn(alias) for each of a schedule's other names (ScheduleEntry::aliases, comma-separated);
/// stops at the first for which fn returns true, and says whether one did.
template <class Fn>
constexpr bool any_alias(const ScheduleEntry& e, Fn&& fn) {
  for (std::string_view rest = e.aliases; !rest.empty();) {
    const auto comma = rest.find(',');
    if (fn(rest.substr(0, comma))) return true;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return false;
}

/// \brief The schedule named `name` (pipeline.strategy's value, or one of its aliases: a stranger
/// gave a Candidate "1F1B"); null when none is.
constexpr const ScheduleEntry* find_schedule(std::string_view name) {
  for (const auto& e : kSchedules)
    if (e.name == name || any_alias(e, [&](std::string_view alias) { return alias == name; })) return &e;
  return nullptr;
}

/// \brief The schedule pipeline.strategy names; an unknown name is an error listing them.
EPL_LINKED const ScheduleEntry& schedule_named(std::string_view name);

/// \brief The fraction of a step a stage idles in an ideal pipeline of equal stages (the
/// bubble): (p - 1) / (v m + p - 1); v = 1 for GPipe and 1F1B.
constexpr double theoretical_bubble(int stages, int micro_batches, int virtual_stages = 1) {
  return static_cast<double>(stages - 1) / (virtual_stages * micro_batches + stages - 1);
}
/// \brief The same for a schedule of kSchedules: 1 - v m / its critical path ((p - 1) / (3m + p - 1)
/// for ZB-H1 with F, B and W of equal time).
constexpr double theoretical_bubble(const ScheduleEntry& s, int stages, int micro_batches, int virtual_stages = 1) {
  return 1.0 - virtual_stages * micro_batches / s.path(micro_batches, virtual_stages, stages);
}

}  // namespace strategy
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/strategy/schedule.ipp"
#endif
