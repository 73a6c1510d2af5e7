#pragma once
/// \file
/// \brief policy::decide — what the policies of a run do, from the configuration keys that select
/// and shape them and the policies the program compiled (epl::Policies<...>), each policy's
/// choice and checks in a function of its own. plan::make calls it (the one can_implement): a key
/// asking for what the program did not compile, or for a combination that cannot run, is an error
/// naming the key and the fix, before anything is allocated.
///
/// The keys arrive as plain values (policy::Keys: the runtime layer reads them from epl::Config),
/// so this layer does not know Config. A new policy is a tag type in policies.hpp, a decide_*
/// function here (its keys and its checks), and what it does in a step (gradient_sync.hpp or a
/// file of its own): no Trainer edit.
#include <cstdint>
#include <optional>
#include <string>

#include "epl/core/dtype.hpp"
#include "epl/core/error.hpp"
#include "epl/nn/pass.hpp"
#include "epl/policy/policies.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

/// \brief The configuration keys (and Trainer options) that select and shape a run's policies.
/// A std::optional is unset when the key holds its default (the compiled policy then decides).
struct Keys {
  std::optional<std::string> zero_level;      ///< zero.level: "", "v0", "v1", "v2"
  std::optional<std::string> offload_level;   ///< offload.level: "", "v0"
  std::optional<std::string> amp_level;       ///< amp.level: "", "O1"
  std::string amp_loss_scale = "dynamic";     ///< amp.loss_scale: "dynamic" or a number
  bool amp_loss_scale_given = false;
  bool amp_debug_log = false;                 ///< amp.debug_log
  std::optional<std::string> recompute;       ///< gradient_checkpoint.type: "", "collection", "auto"
  std::int64_t end_taskgraph = -1;            ///< gradient_checkpoint.end_taskgraph
  bool end_taskgraph_given = false;
  bool check_gradients = false;               ///< gradient_checkpoint.check_gradients
  std::int64_t apply_groups = 1;              ///< optimizer.num_apply_group
  std::int64_t max_splits = 5;                ///< communication.max_splits
  bool fp16 = false;                          ///< communication.fp16
  std::int64_t fp16_scale = 128;              ///< communication.fp16_scale
  bool fp16_scale_given = false;
  bool clip_after_allreduce = true;           ///< communication.clip_after_allreduce
  std::string reduce_method = "mean";         ///< communication.gradients_reduce_method
  // the Trainer's own options (TrainerOptions)
  double clip_norm = 0;
  double amp_init_scale = 65536;
  std::int64_t amp_growth_interval = 2000;
  DType dtype = DType::kF32;
};

/// \brief What the strategy's plan tells the policies about the run.
struct Facts {
  bool rows_over_tensor = false;  ///< a colocated or separate split: the replicated part reduces over data and tensor
  int chunks = 1;                 ///< model chunks (task graphs) of the run
  bool marks_recompute = false;   ///< the model type holds an epl::Recompute boundary
};

/// \brief What the policies do in a run.
struct Setup {
  int zero_stage = 0;             ///< 0: every rank holds everything; 1, 2, 3: ZeRO
  bool offload = false;           ///< the shards live in the device's host pool (with stage 3)
  DType matmul = DType::kF32;     ///< AMP: the dtype GEMM operands are rounded to (f32: AMP off)
  bool loss_scale_dynamic = true; ///< AMP: amp.loss_scale = "dynamic"
  double loss_scale = 65536;      ///< AMP: the scale a run starts at (or keeps)
  std::int64_t growth_interval = 2000;
  bool amp_log = false;
  nn::RecomputeMode recompute = nn::RecomputeMode::kMarked;
  std::int64_t end_taskgraph = -1;  ///< the last chunk that recomputes (-1: all)
  bool check_gradients = false;
  std::int64_t apply_groups = 1;
  int max_splits = 5;
  bool fp16 = false;
  double fp16_scale = 128;        ///< the fp16 wire's scale (1 under AMP: the loss scale is it)
  bool mean = true;               ///< gradients averaged (else summed) over the replicas
  bool clip_after_reduce = true;  ///< clip the reduced gradient (else each replica's, EPL's per-replica clipping)
  DType dtype = DType::kF32;      ///< parameters, gradients and optimizer state

  [[nodiscard]] bool amp() const noexcept { return matmul != DType::kF32; }
};

/// \brief The compiled policies of Policies<...> (what a key may ask for at most).
struct Compiled {
  int zero = 0;
  bool offload = false;
  DType amp = DType::kF32;
  bool f64 = false;  ///< the device computes in f64
};

/// \brief zero.level: "" none, EPL's "v0" stage 1, "v1" stage 2, "v2" stage 3; unset, the compiled
/// epl::Zero<k>. A stage above the compiled one is an error naming both.
inline void decide_zero(const Keys& k, const Compiled& c, const Facts& f, Setup& s) {
  s.zero_stage = c.zero;
  if (k.zero_level) {
    const std::string& level = *k.zero_level;
    s.zero_stage = level.empty() ? 0 : level[1] - '0' + 1;
    EPL_CHECK(s.zero_stage <= c.zero, "zero.level = \"", level, "\" asks for ZeRO stage ", s.zero_stage, " but this program was built with ",
              c.zero == 0 ? std::string("no epl::Zero<k> in its epl::Policies<...>") : "epl::Zero<" + std::to_string(c.zero) + ">",
              "; add epl::Zero<", s.zero_stage, "> to them (or higher: it runs every stage up to its own; keep the other policies)",
              " or choose a zero.level up to ", c.zero == 0 ? std::string("\"\"") : "\"v" + std::to_string(c.zero - 1) + "\"");
  }
  if (s.zero_stage == 0) return;
  EPL_CHECK(!f.rows_over_tensor, "zero.level (ZeRO stage ", s.zero_stage, ") with cluster.colocate_split_and_replicate is not "
            "supported: the colocated replicated part reduces over the data and tensor axes; drop one of the two keys");
}

/// \brief offload.level: "v0" keeps weights, gradients and optimizer state in the host pool (built
/// with epl::Offload<epl::offload::V0>, which comes with epl::Zero<3>: its per-layer gathers stream
/// them); unset, the compiled level.
inline void decide_offload(const Keys& k, const Compiled& c, Setup& s) {
  s.offload = k.offload_level ? *k.offload_level == "v0" : c.offload;
  EPL_CHECK(!s.offload || c.offload, "offload.level = \"v0\" but this program was built without offload; build the Trainer with "
            "epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>> or set offload.level to \"\"");
  EPL_CHECK(!s.offload || s.zero_stage == 3, "offload.level = \"v0\"", k.offload_level ? "" : " (unset: the program's epl::Offload<epl::offload::V0>)",
            " streams each layer's weights from host memory through ZeRO stage 3's per-layer gathers, but zero.level = \"",
            k.zero_level.value_or(""), "\" asks for stage ", s.zero_stage, "; set zero.level = \"v2\" (it works on one rank too) "
            "or turn offload off with offload.level = \"\" (the empty string)");
}

/// \brief communication.*: how gradients travel, and when they are clipped.
inline void decide_communication(const Keys& k, Setup& s) {
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

/// \brief amp.level: "O1" rounds every GEMM's operands to the compiled epl::Amp<...>'s precision and
/// scales the loss (amp.loss_scale: "dynamic" or a fixed number); "" turns it off; unset, the
/// compiled policy decides.
inline void decide_amp(const Keys& k, const Compiled& c, Setup& s) {
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

/// \brief gradient_checkpoint.*: type unset, the model's epl::Recompute marks recompute; "" turns
/// them off; "collection" asks for them (a model without one is an error); "auto" recomputes the
/// segments each chunk chooses (the marks then keep their activations). end_taskgraph: only chunks
/// (pipeline stages, in model order) up to it recompute.
inline void decide_recompute(const Keys& k, const Facts& f, Setup& s) {
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

/// \brief TrainerOptions::dtype: the parameters' dtype, f32 (or f64 on a device that computes it).
/// Half precision is AMP's business: its master weights stay f32.
inline void decide_dtype(const Keys& k, const Compiled& c, Setup& s) {
  s.dtype = k.dtype;
  EPL_CHECK(k.dtype != DType::kBF16 && k.dtype != DType::kF16, "TrainerOptions::dtype = ", name_of(k.dtype), ": parameters, "
            "gradients and optimizer state stay f32; for ", name_of(k.dtype), " GEMMs use mixed precision: amp.level = \"O1\" with "
            "epl::Policies<epl::Amp<epl::amp::", k.dtype == DType::kBF16 ? "BF16" : "FP16", ">> (leave dtype at f32)");
  EPL_CHECK(k.dtype == DType::kF32 || (k.dtype == DType::kF64 && c.f64), "TrainerOptions::dtype = ", name_of(k.dtype),
            k.dtype == DType::kF64 ? " but the device computes in f32 only; train in f64 on device::CpuF64, or leave dtype at f32"
                                   : " is not a floating type; use f32");
}

/// \brief Every policy's choice and check, in order: each may read what the ones before decided.
inline Setup decide(const Keys& k, const Compiled& c, const Facts& f) {
  Setup s;
  decide_dtype(k, c, s);
  decide_zero(k, c, f, s);
  decide_offload(k, c, s);
  decide_communication(k, s);
  decide_amp(k, c, s);
  decide_recompute(k, f, s);
  return s;
}

/// \brief What Policies<...> compiled, on a device that computes in f64 or not (nothing for a type
/// that is not a Policies list: the Trainer's static_assert says why).
template <class P>
constexpr Compiled compiled(bool f64) {
  if constexpr (is_policies<P>::value) return {P::zero::kStage, P::offloading::kHost, P::mixed_precision::kMatmul, f64};
  else return {.f64 = f64};
}

}  // namespace policy
}  // namespace v0
}  // namespace epl
