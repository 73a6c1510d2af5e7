#pragma once
/// \file
/// \brief ZeRO's home: the tag epl::Zero<k>, the key zero.level and the decision (the stage a run
/// shards to). What a stage does in a step is policy/zero.hpp's (ZeroSync, ZeroSharder); the state
/// it saves, plan::state_bytes.
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {

/// \brief ZeRO stage: 0 (every rank holds everything), 1 (optimizer state sharded over the
/// data-parallel group), 2 (+ gradients), 3 (+ parameters).
template <int Stage>
struct Zero {
  static_assert(Stage >= 0 && Stage <= 3, "epl::Zero<Stage>: the stage is 0, 1, 2 or 3");
  static constexpr int kStage = Stage;
};

namespace keys {
inline constexpr Key<std::string> zero_level{"zero.level"};
}  // namespace keys

namespace policy {
namespace detail {
template <class P>
struct is_zero : std::false_type {};
template <int N>
struct is_zero<Zero<N>> : std::true_type {};
}  // namespace detail

namespace home {
struct Zero {
  template <class P>
  static constexpr bool kTag = detail::is_zero<P>::value;
  using Default = epl::Zero<0>;

  struct Keys {
    std::optional<std::string> zero_level;  ///< zero.level: "", "v0", "v1", "v2"
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.zero_level = r.optional(keys::zero_level);
  }
  static std::vector<ConfigKey> config_keys() {
    return {{"zero.level", std::string(), {"", "v0", "v1", "v2"}, -ConfigKey::kNoLimit, ConfigKey::kNoLimit, true,
             "ZeRO: v0 shards optimizer state, v1 also gradients, v2 also parameters (the program's epl::Zero<k> when unset); "
             "DeepSpeed's stage numbers 0-3 are accepted too (3 is v2)", false, {{"0", ""}, {"1", "v0"}, {"2", "v1"}, {"3", "v2"}}}};
  }
  struct Compiled {
    int zero = 0;  ///< the highest stage a key may ask for
  };
  template <class Tag>
  static constexpr void compile(Compiled& c) {
    c.zero = Tag::kStage;
  }
  struct Decision {
    int zero_stage = 0;  ///< 0: every rank holds everything; 1, 2, 3: ZeRO
  };

  // the planner's axis: every stage up to the compiled one where there are replicas to shard over;
  // on one replica stage 3 only, which offload streams through (the offload home refuses it alone)
  struct Choice {
    int zero = 0;  ///< ZeRO stage (zero.level "", v0, v1, v2)
  };
  static constexpr void reach(const auto& compiled, auto& most) { most.zero = compiled.zero; }
  static constexpr int choices(const auto& most) { return most.zero + 1; }
  static constexpr void choose(int i, auto& c) { c.zero = i; }
  static constexpr int index(const auto& c) { return c.zero; }
  [[noreturn]] static void zero_stage_is_0_to_3(const char* why) { EPL_FAIL(why); }
  [[noreturn]] static void zero_on_one_replica__give_zero_0(const char* why) { EPL_FAIL(why); }
  [[noreturn]] static void zero_2_or_3_with_zero_bubble(const char* why) { EPL_FAIL(why); }
  static constexpr Refused kStage{"the ZeRO stage (policies.zero) must be 0 to 3", &zero_stage_is_0_to_3};
  static constexpr Refused kOneReplica{"ZeRO shards over the data-parallel ranks: with one, give policies.zero = 0",
                                       &zero_on_one_replica__give_zero_0};
  static constexpr Refused kSplitBackward{"a schedule that splits backward (ZeroBubble) refuses ZeRO 2 and 3", &zero_2_or_3_with_zero_bubble};
  static constexpr Refused refusal(const auto& c, const Layout& l) {
    if (c.zero < 0 || c.zero > 3) return kStage;
    if (c.zero > 0 && c.zero < 3 && l.data == 1) return kOneReplica;
    if (c.zero >= 2 && l.pipeline > 1 && l.splits_backward) return kSplitBackward;
    return {};
  }
  static void keys(const auto& c, auto& out) { out.push_back({"zero.level", level(c.zero)}); }
  template <class K>
  static void apply(const auto& c, K& k) {
    k.zero_level = level(c.zero);
  }
  static std::string level(int stage) {
    EPL_CHECK(stage >= 0 && stage <= 3, "a plan's policies.zero = ", stage, " is not a ZeRO stage; give 0, 1, 2 or 3");
    return stage == 0 ? std::string() : "v" + std::to_string(stage - 1);
  }
  static void label(const auto& c, std::string& s) {
    if (c.zero) s += " zero" + std::to_string(c.zero);
  }

  /// zero.level: "" none, EPL's "v0" stage 1, "v1" stage 2, "v2" stage 3; unset, the compiled
  /// epl::Zero<k>. A stage above the compiled one is an error naming both.
  template <class K, class C, class S>
  static void decide(const K& k, const C& c, const Facts& f, S& s) {
    s.zero_stage = c.zero;
    if (k.zero_level) {
      const std::string& level = *k.zero_level;
      s.zero_stage = level.empty() ? 0 : level[1] - '0' + 1;
      EPL_CHECK(s.zero_stage <= c.zero, "zero.level = \"", level, "\" asks for ZeRO stage ", s.zero_stage, " but this program was built with ",
                c.zero == 0 ? std::string("no epl::Zero<k> in its epl::Policies<...>") : "epl::Zero<" + std::to_string(c.zero) + ">",
                "; add epl::Zero<", s.zero_stage, "> to them (or higher: it runs every stage up to its own; keep the other policies)",
                c.zero == 0 ? std::string(" or leave zero.level \"\" (no ZeRO)") : " or choose a zero.level up to \"v" + std::to_string(c.zero - 1) + "\"");
    }
    if (s.zero_stage == 0) return;
    EPL_CHECK(!f.rows_over_tensor, "zero.level (ZeRO stage ", s.zero_stage, ") with cluster.colocate_split_and_replicate is not "
              "supported: the colocated replicated part reduces over the data and tensor axes; drop one of the two keys");
  }
};
}  // namespace home
}  // namespace policy
}  // namespace v0
}  // namespace epl
