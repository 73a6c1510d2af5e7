#pragma once
/// \file
/// \brief How gradients travel, and when they are clipped: the communication.* keys that shape
/// the gradient reduction, optimizer.num_apply_group, and the decision. No tag: every program has
/// it. What it does in a step is policy/gradient_sync.hpp's.
#include <cstdint>
#include <string>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {

namespace keys {
inline constexpr Key<std::int64_t> num_apply_group{"optimizer.num_apply_group"};
inline constexpr Key<std::int64_t> max_splits{"communication.max_splits"};
inline constexpr Key<bool> fp16{"communication.fp16"};
inline constexpr Key<std::int64_t> fp16_scale{"communication.fp16_scale"};
inline constexpr Key<bool> clip_after_allreduce{"communication.clip_after_allreduce"};
inline constexpr Key<std::string> gradients_reduce_method{"communication.gradients_reduce_method"};
}  // namespace keys

namespace policy::home {
struct Communication {
  /// communication.max_splits' default, and its range's top: the gradient buckets, and ZeRO's blocks
  static constexpr std::int64_t kDefaultSplits = 5, kMostSplits = std::int64_t{1} << 20;
  struct Keys {
    std::int64_t apply_groups = 1;       ///< optimizer.num_apply_group
    std::int64_t max_splits = kDefaultSplits;  ///< communication.max_splits
    bool fp16 = false;                   ///< communication.fp16
    std::int64_t fp16_scale = 128;       ///< communication.fp16_scale
    bool fp16_scale_given = false;
    bool clip_after_allreduce = true;    ///< communication.clip_after_allreduce
    std::string reduce_method = "mean";  ///< communication.gradients_reduce_method
    double clip_norm = 0;                ///< TrainerOptions::clip_norm
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.apply_groups = r.get(keys::num_apply_group);
    k.max_splits = r.get(keys::max_splits);
    k.fp16 = r.get(keys::fp16);
    k.fp16_scale = r.get(keys::fp16_scale);
    k.fp16_scale_given = r.given(keys::fp16_scale);
    k.clip_after_allreduce = r.get(keys::clip_after_allreduce);
    k.reduce_method = r.get(keys::gradients_reduce_method);
  }
  static std::vector<ConfigKey> config_keys() {
    constexpr double kNone = ConfigKey::kNoLimit;
    using I = std::int64_t;
    return {{"optimizer.num_apply_group", I{1}, {}, 1, 1 << 20, true, "apply the optimizer in this many groups"},
            {"communication.max_splits", I{kDefaultSplits}, {}, 1, kMostSplits, true, "gradient fusion buckets"},
            {"communication.fp16", false, {}, -kNone, kNone, true, "send gradients as fp16"},
            {"communication.fp16_scale", I{128}, {}, 1, 65504, true,
             "scale applied before the fp16 cast (at most 65504, fp16's largest finite value)"},
            {"communication.clip_after_allreduce", true, {}, -kNone, kNone, true,
             "clip the averaged gradient (true) or per replica (false)"},
            {"communication.gradients_reduce_method", std::string("mean"), {"mean", "sum"}, -kNone, kNone, true,
             "how replicas' gradients combine"}};
  }
  struct Compiled {};
  struct Decision {
    std::int64_t apply_groups = 1;
    int max_splits = 5;
    bool fp16 = false;
    double fp16_scale = 128;        ///< the fp16 wire's scale (1 under AMP: the loss scale is it)
    bool mean = true;               ///< gradients averaged (else summed) over the replicas
    bool clip_after_reduce = true;  ///< clip the reduced gradient (else each replica's, EPL's per-replica clipping)
  };

  /// \brief communication.max_splits given by a program (policy::Keys: a planner's
  /// PlanOptions::policies), which the key table has not checked (a stranger's 0 divided by zero).
  /// `where` names where it was given.
  static void check_splits(std::int64_t max_splits, const char* where = "communication.max_splits") {
    EPL_CHECK(max_splits >= 1 && max_splits <= kMostSplits, where, " = ", max_splits, " must be from 1 to ", kMostSplits,
              " (the gradient buckets, and ZeRO's blocks, a rank's parameters are cut into)");
  }
  template <class K, class C, class S>
  static void decide(const K& k, const C&, const Facts&, S& s) {
    check_splits(k.max_splits);
    s.max_splits = static_cast<int>(k.max_splits);
    s.fp16 = k.fp16;
    s.fp16_scale = static_cast<double>(k.fp16_scale);
    s.mean = k.reduce_method != "sum";
    s.clip_after_reduce = k.clip_after_allreduce || k.clip_norm <= 0;
    s.apply_groups = k.apply_groups;
    if (s.zero_stage < 2) return;
    const bool offload = s.offload;
    EPL_CHECK(!k.fp16, "communication.fp16 with ZeRO stage ", s.zero_stage, " (zero.level = \"v", s.zero_stage - 1, "\"",
              offload ? ", which offload.level = \"v0\" needs" : "", ") is not supported: the gradient shards are reduced in "
              "full precision; set communication.fp16=false", offload ? "" : " or use zero.level=\"v0\"");
    EPL_CHECK(s.clip_after_reduce, "communication.clip_after_allreduce=false clips each replica's whole local gradient, which ZeRO "
              "stage ", s.zero_stage, " never holds; clip after the reduction (communication.clip_after_allreduce=true) or use "
              "zero.level=\"v0\"");
  }
};
}  // namespace policy::home
}  // namespace v0
}  // namespace epl
