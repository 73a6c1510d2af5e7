#pragma once
/// \file
/// \brief Mixed precision's home: the tag epl::Amp<precision>, the amp.* keys and the decision
/// (the GEMMs' dtype and the loss scale's rule). Its step hook is policy::MixedPrecision
/// (policy/amp.hpp: the loss scale of the passes, the gradients' factor, the verdict on a step).
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/policy/amp.hpp"
#include "epl/policy/home.hpp"

namespace epl {
inline namespace v0 {

namespace amp {
/// \brief No mixed precision (the default): every GEMM multiplies f32 operands.
struct Off {
  static constexpr DType kDType = DType::kF32;
};
/// \brief bfloat16: f32's range with 8 bits of mantissa; overflow is as rare as in f32.
struct BF16 {
  static constexpr DType kDType = DType::kBF16;
};
/// \brief IEEE half: 11 bits of mantissa, largest finite value 65504; the loss scale keeps small
/// gradients above its underflow, and a step that overflows is skipped.
struct FP16 {
  static constexpr DType kDType = DType::kF16;
};
}  // namespace amp

/// \brief Memory-efficient mixed precision (EPL's amp.level "O1"): parameters, gradients and
/// optimizer state stay f32 (the master copy); each GEMM rounds its operands to Precision on use,
/// into copies that live for that GEMM only, and accumulates in f32. The loss is scaled
/// (amp.loss_scale) and the update skipped when a gradient overflows.
template <class Precision>
struct Amp {
  static_assert(std::is_same_v<Precision, amp::Off> || std::is_same_v<Precision, amp::BF16> ||
                    std::is_same_v<Precision, amp::FP16>,
                "epl::Amp<Precision>: the precision is epl::amp::Off, epl::amp::BF16 or epl::amp::FP16");
  static constexpr DType kMatmul = Precision::kDType;
};

namespace keys {
inline constexpr Key<std::string> amp_level{"amp.level"};
inline constexpr Key<bool> amp_debug_log{"amp.debug_log"};
inline constexpr Key<std::string> amp_loss_scale{"amp.loss_scale"};
}  // namespace keys

namespace policy::home {
struct Amp {
  template <class P>
  static constexpr bool kTag = kInstanceOf<P, epl::Amp>;
  using Default = epl::Amp<amp::Off>;

  struct Keys {
    std::optional<std::string> amp_level;    ///< amp.level: "", "O1"
    std::string amp_loss_scale = "dynamic";  ///< amp.loss_scale: "dynamic" or a number
    bool amp_debug_log = false;              ///< amp.debug_log
    double amp_init_scale = 65536;           ///< TrainerOptions::amp_init_scale
    std::int64_t amp_growth_interval = 2000; ///< TrainerOptions::amp_growth_interval
  };
  template <class Read>
  static void read(const Read& r, Keys& k) {
    k.amp_level = r.optional(keys::amp_level);
    k.amp_loss_scale = r.get(keys::amp_loss_scale);
    k.amp_debug_log = r.get(keys::amp_debug_log);
  }
  static std::vector<ConfigKey> config_keys() {
    constexpr double kNone = ConfigKey::kNoLimit;
    return {{"amp.level", std::string(), {"", "O1"}, -kNone, kNone, true,
             "O1: mixed precision, every GEMM's operands rounded to the program's epl::Amp precision (bf16, f16), f32 master weights "
             "(the program's epl::Amp when unset)"},
            {"amp.debug_log", false, {}, -kNone, kNone, true, "print each loss-scale change and skipped step"},
            {"amp.loss_scale", std::string("dynamic"), {}, -kNone, kNone, true,
             "\"dynamic\" (start at 65536, halve and skip the step on overflow, double after 2000 good steps) or a fixed positive number"}};
  }
  struct Compiled {
    DType amp = DType::kF32;  ///< the compiled epl::Amp's GEMM dtype (f32: none)
  };
  template <class Tag>
  static constexpr void compile(Compiled& c) {
    c.amp = Tag::kMatmul;
  }
  struct Decision {
    DType matmul = DType::kF32;     ///< AMP: the dtype GEMM operands are rounded to (f32: AMP off)
    bool loss_scale_dynamic = true; ///< AMP: amp.loss_scale = "dynamic"
    double loss_scale = 65536;      ///< AMP: the scale a run starts at (or keeps)
    std::int64_t growth_interval = 2000;
    bool amp_log = false;
    [[nodiscard]] bool amp() const noexcept { return matmul != DType::kF32; }
  };
  template <class D>
  using Hook = MixedPrecision;

  // the planner's axis: the compiled epl::Amp's precision, where the search has its profile
  struct Choice {
    bool amp = false;  ///< amp.level = "O1" (the compiled epl::Amp's dtype)
  };
  static constexpr void reach(const auto& compiled, auto& most) { most.amp = compiled.amp != DType::kF32; }
  static constexpr int choices(const auto& most) { return most.amp ? 2 : 1; }
  static constexpr void choose(int i, auto& c) { c.amp = i == 1; }
  static constexpr int index(const auto& c) { return c.amp ? 1 : 0; }
  static constexpr Refused refusal(const auto&, const Layout&) { return {}; }
  static void keys(const auto& c, auto& out) { out.push_back({"amp.level", c.amp ? "O1" : ""}); }
  template <class K>
  static void apply(const auto& c, K& k) {
    k.amp_level = c.amp ? "O1" : "";
  }
  static void label(const auto& c, std::string& s) {
    if (c.amp) s += " amp";
  }

  /// amp.level: "O1" rounds every GEMM's operands to the compiled epl::Amp<...>'s precision and
  /// scales the loss (amp.loss_scale: "dynamic" or a fixed number); "" turns it off; unset, the
  /// compiled policy decides.
  template <class K, class C, class S>
  static void decide(const K& k, const C& c, const Facts&, S& s) {
    const bool on = k.amp_level ? *k.amp_level == "O1" : c.amp != DType::kF32;
    EPL_CHECK(!on || c.amp != DType::kF32, "amp.level = \"O1\" but this program was built without mixed precision; build the "
              "Trainer with epl::Policies<epl::Amp<epl::amp::BF16>> (or epl::amp::FP16) or set amp.level to \"\"");
    EPL_CHECK(!on || s.clip_after_reduce, "amp.level = \"O1\" with communication.clip_after_allreduce=false is not supported: "
              "each replica would clip gradients that are still multiplied by the loss scale; clip after the reduction "
              "(communication.clip_after_allreduce=true)");
    EPL_CHECK(!on || !k.fp16_scale_given, "communication.fp16_scale = ", k.fp16_scale, " with amp.level = \"O1\": the gradients "
              "already carry the loss scale (amp.loss_scale), which is also their scale on the fp16 wire, and an overflow there "
              "skips the step and lowers it; drop communication.fp16_scale");
    const char* asked = k.amp_debug_log ? "amp.debug_log = true" : k.amp_loss_scale != "dynamic" ? "amp.loss_scale is set" : nullptr;
    EPL_CHECK(on || !asked, asked, " but mixed precision is off (amp.level = \"", k.amp_level.value_or(""), "\"",
              k.amp_level ? "" : ", and the program has no epl::Amp<...>", "); set amp.level = \"O1\" or drop the key");
    s.amp_log = k.amp_debug_log;
    if (!on) return;
    s.matmul = c.amp;
    s.fp16_scale = 1;  // the gradients carry the loss scale, the fp16 wire's scale too
    s.loss_scale_dynamic = k.amp_loss_scale == "dynamic";
    s.loss_scale = s.loss_scale_dynamic ? k.amp_init_scale : std::stod(k.amp_loss_scale);
    s.growth_interval = k.amp_growth_interval;
  }
};
}  // namespace policy::home
}  // namespace v0
}  // namespace epl
