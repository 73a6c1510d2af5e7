#pragma once
/// \file
/// \brief Offload's home: the tag epl::Offload<level>, the key offload.level and the decision
/// (whether the shards live in the device's host pool). It streams weights through ZeRO stage 3's
/// per-layer gathers (policy/zero.hpp), so it checks that stage is there.
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/policy/home.hpp"
#include "epl/policy/homes/zero.hpp"

namespace epl {
inline namespace v0 {

namespace offload {
/// \brief Weights stay on the device (the default).
struct None {};
/// \brief EPL's offload.level "v0": weights, gradients and optimizer state live in the host pool
/// and each layer's weights are copied to the device before it runs, the next one prefetched
/// (the per-layer gathers of ZeRO stage 3, so it needs epl::Zero<3>).
struct V0 {};
}  // namespace offload

/// \brief Where the weights live: offload::None (on the device) or offload::V0 (host memory).
template <class Level>
struct Offload {
  static_assert(std::is_same_v<Level, offload::None> || std::is_same_v<Level, offload::V0>,
                "epl::Offload<Level>: the level is epl::offload::None or epl::offload::V0");
  static constexpr bool kHost = std::is_same_v<Level, offload::V0>;
};

namespace keys {
inline constexpr Key<std::string> offload_level{"offload.level"};
}  // namespace keys

namespace policy::home {
struct Offload {
  template <class P>
  static constexpr bool kTag = kInstanceOf<P, epl::Offload>;
  using Default = epl::Offload<offload::None>;

  struct Keys {
    std::optional<std::string> offload_level;  ///< offload.level: "", "v0"
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.offload_level = r.optional(keys::offload_level);
  }
  static std::vector<ConfigKey> config_keys() {
    return {{"offload.level", std::string(), {"", "v0"}, -ConfigKey::kNoLimit, ConfigKey::kNoLimit, true,
             "v0: weights, gradients and optimizer state in host memory, each layer's weights copied to the device before it runs "
             "(with ZeRO stage 3; the program's epl::Offload when unset)"}};
  }
  struct Compiled {
    bool offload = false;
  };
  template <class Tag>
  static constexpr void compile(Compiled& c) {
    c.offload = Tag::kHost;
  }
  template <class Tags>
  static constexpr void check() {
    static_assert(!Tags::template of<Offload>::kHost || Tags::template of<Zero>::kStage == 3,
                  "epl::Offload<epl::offload::V0> streams each layer's weights to the device through ZeRO stage 3's per-layer "
                  "gathers: the policies need epl::Zero<3> (add it, or raise the epl::Zero<k> given to 3; it works on one rank too)");
  }
  struct Decision {
    bool offload = false;  ///< the shards live in the device's host pool (with stage 3)
  };

  // the planner's axis: offload where it is compiled, with ZeRO stage 3
  struct Choice {
    bool offload = false;  ///< offload.level = "v0"
  };
  static constexpr void reach(const auto& compiled, auto& most) { most.offload = compiled.offload; }
  static constexpr int choices(const auto& most) { return most.offload ? 2 : 1; }
  static constexpr void choose(int i, auto& c) { c.offload = i == 1; }
  static constexpr int index(const auto& c) { return c.offload ? 1 : 0; }
  [[noreturn]] static void offload_without_zero_3(const char* why) { EPL_FAIL(why); }
  [[noreturn]] static void zero_3_on_one_replica_without_offload(const char* why) { EPL_FAIL(why); }
  static constexpr Refused kWithoutStage3{"offload keeps ZeRO stage 3's shards in host memory: give policies.zero = 3 with it",
                                          &offload_without_zero_3};
  static constexpr Refused kOneReplica{"ZeRO shards over the data-parallel ranks: with one, give policies.zero = 0 (or 3 with "
                                       "policies.offload)", &zero_3_on_one_replica_without_offload};
  static constexpr Refused refusal(const auto& c, const Layout& l) {
    if (c.offload && c.zero != 3) return kWithoutStage3;
    if (!c.offload && c.zero == 3 && l.data == 1) return kOneReplica;  // the zero home lets stage 3 through on one replica for offload
    return {};
  }
  static void keys(const auto& c, auto& out) { out.push_back({"offload.level", c.offload ? "v0" : ""}); }
  template <class K>
  static void apply(const auto& c, K& k) {
    k.offload_level = c.offload ? "v0" : "";
  }
  static void label(const auto& c, std::string& s) {
    if (c.offload) s += " offload";
  }

  /// offload.level: "v0" keeps weights, gradients and optimizer state in the host pool (built
  /// with epl::Offload<epl::offload::V0>, which comes with epl::Zero<3>: its per-layer gathers
  /// stream them); unset, the compiled level.
  template <class K, class C, class S>
  static void decide(const K& k, const C& c, const Facts&, S& s) {
    s.offload = k.offload_level ? *k.offload_level == "v0" : c.offload;
    EPL_CHECK(!s.offload || c.offload, "offload.level = \"v0\" but this program was built without offload; build the Trainer with "
              "epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>> or set offload.level to \"\"");
    EPL_CHECK(!s.offload || s.zero_stage == 3, "offload.level = \"v0\"", k.offload_level ? "" : " (unset: the program's epl::Offload<epl::offload::V0>)",
              " streams each layer's weights from host memory through ZeRO stage 3's per-layer gathers, but zero.level = \"",
              k.zero_level.value_or(""), "\" asks for stage ", s.zero_stage, "; set zero.level = \"v2\" (it works on one rank too) "
              "or turn offload off with offload.level = \"\" (the empty string)");
  }
};
}  // namespace policy::home
}  // namespace v0
}  // namespace epl
