#pragma once
/// \file
/// \brief Recompute's home (EPL's gradient checkpointing): the gradient_checkpoint.* keys and the
/// decision (what each chunk recomputes). No tag: a model marks its boundaries with
/// epl::Recompute<...> (nn/recompute.hpp), or the library chooses them ("auto").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/nn/pass.hpp"
#include "epl/policy/home.hpp"
#include "epl/policy/recompute_check.hpp"

namespace epl {
inline namespace v0 {

namespace keys {
inline constexpr Key<std::string> checkpoint_type{"gradient_checkpoint.type"};
inline constexpr Key<std::int64_t> checkpoint_end_taskgraph{"gradient_checkpoint.end_taskgraph"};
inline constexpr Key<bool> checkpoint_check_gradients{"gradient_checkpoint.check_gradients"};
}  // namespace keys

namespace policy::home {
struct Recompute {
  struct Keys {
    std::optional<std::string> recompute;  ///< gradient_checkpoint.type: "", "collection", "auto"
    std::int64_t end_taskgraph = -1;       ///< gradient_checkpoint.end_taskgraph
    bool end_taskgraph_given = false;
    bool check_gradients = false;          ///< gradient_checkpoint.check_gradients
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.recompute = r.optional(keys::checkpoint_type);
    k.end_taskgraph = r.get(keys::checkpoint_end_taskgraph);
    k.end_taskgraph_given = r.given(keys::checkpoint_end_taskgraph);
    k.check_gradients = r.get(keys::checkpoint_check_gradients);
  }
  static std::vector<ConfigKey> config_keys() {
    constexpr double kNone = ConfigKey::kNoLimit;
    return {{"gradient_checkpoint.type", std::string(), {"", "collection", "auto"}, -kNone, kNone, true,
             "recompute activations: collection at the model's epl::Recompute boundaries, auto at about sqrt(n) segments the library "
             "chooses; unset: the marks"},
            {"gradient_checkpoint.end_taskgraph", std::int64_t{-1}, {}, -1, 1 << 20, true,
             "the last task graph (pipeline stage, from 0 in model order) that recomputes; -1: all"},
            {"gradient_checkpoint.check_gradients", false, {}, -kNone, kNone, true,
             "on the first step, compare the recomputed gradients with full-activation ones and print the largest difference"}};
  }
  struct Compiled {};
  struct Decision {
    nn::RecomputeMode recompute = nn::RecomputeMode::kMarked;
    std::int64_t end_taskgraph = -1;  ///< the last chunk that recomputes (-1: all)
    bool check_gradients = false;
  };
  template <class D>
  using Hook = RecomputeCheck;  // gradient_checkpoint.check_gradients

  // the planner's axis: the segments the library chooses ("auto"), on any program
  struct Choice {
    bool recompute = false;  ///< gradient_checkpoint.type = "auto"
  };
  static constexpr void reach(const auto&, auto& most) { most.recompute = true; }
  static constexpr int choices(const auto& most) { return most.recompute ? 2 : 1; }
  static constexpr void choose(int i, auto& c) { c.recompute = i == 1; }
  static constexpr int index(const auto& c) { return c.recompute ? 1 : 0; }
  static constexpr Refused refusal(const auto&, const Layout&) { return {}; }
  static void keys(const auto& c, auto& out) { out.push_back({"gradient_checkpoint.type", c.recompute ? "auto" : ""}); }
  template <class K>
  static void apply(const auto& c, K& k) {
    k.recompute = c.recompute ? "auto" : "";
  }
  static void label(const auto& c, std::string& s) {
    if (c.recompute) s += " recompute";
  }

  /// gradient_checkpoint.*: type unset, the model's epl::Recompute marks recompute; "" turns them
  /// off; "collection" asks for them (a model without one is an error); "auto" recomputes the
  /// segments each chunk chooses (the marks then keep their activations). end_taskgraph: only
  /// chunks (pipeline stages, in model order) up to it recompute.
  template <class K, class C, class S>
  static void decide(const K& k, const C&, const Facts& f, S& s) {
    const std::string type = k.recompute.value_or("");
    if (type == "auto") s.recompute = nn::RecomputeMode::kSegments;
    else if (type == "collection" || !k.recompute) s.recompute = nn::RecomputeMode::kMarked;
    else s.recompute = nn::RecomputeMode::kNone;
    EPL_CHECK(type != "collection" || f.marks_recompute, "gradient_checkpoint.type = \"collection\" but the model "
              "marks no boundary; wrap the layers whose activations to recompute in epl::Recompute<...> (a field of the model), "
              "or let the library choose them with gradient_checkpoint.type = \"auto\"");
    s.end_taskgraph = k.end_taskgraph;
    EPL_CHECK(s.end_taskgraph < f.chunks, "gradient_checkpoint.end_taskgraph = ", s.end_taskgraph, " but the model runs as ",
              f.chunks, " task graph", f.chunks == 1 ? "" : "s", " (pipeline stages, numbered from 0 in model order)",
              "; choose -1 (all of them) or at most ", f.chunks - 1);
    s.check_gradients = k.check_gradients;
    // the keys that shape recompute ask for one: nothing recomputed is named, not ignored
    const bool nothing = s.recompute == nn::RecomputeMode::kNone || (s.recompute == nn::RecomputeMode::kMarked && !f.marks_recompute);
    const char* asked = k.check_gradients ? "gradient_checkpoint.check_gradients = true"
                        : k.end_taskgraph_given ? "gradient_checkpoint.end_taskgraph is set" : nullptr;
    EPL_CHECK(!asked || !nothing, asked, " but nothing is recomputed (gradient_checkpoint.type = ",
              s.recompute == nn::RecomputeMode::kNone ? "\"\"" : "unset and the model marks no epl::Recompute",
              "); set gradient_checkpoint.type to \"auto\" (or \"collection\" with marks), or drop the key");
  }
};
}  // namespace policy::home
}  // namespace v0
}  // namespace epl
