// plan::make, the one can_implement of a run: the strategies' placement and the pipeline's chunks
// and schedule decided from the model type, the configuration and the world size; every policy's
// choice and check (policy::decide) made with it, before anything is allocated. Each refusal names
// the key and the fix.
#include "../helpers.hpp"

using namespace epl;

namespace {
using Stage = Replicate<1, nn::Linear>;
using FourStages = Pipeline<Stage, Stage, Stage, Stage>;
struct Net {
  nn::Linear a{4, 4};
  nn::Linear b{4, 4};
};
struct Marked {
  nn::Linear a{4, 4};
  epl::Recompute<nn::Linear> b{nn::Linear(4, 4)};
};
using All = Policies<Zero<3>, Offload<offload::V0>, Amp<amp::BF16>>;
// plan::make<Model, P> with the policy keys set by `keys`, on a world of `world`.
template <class Model = Net, class P = All>
plan::Plan plan_with(auto keys, int world = 1) {
  plan::PlanOptions o;
  keys(o.policies);
  return plan::make<Model, P>(o, world);
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("plan: the pipeline's virtual stages are what runs, or an error naming the key") {
  CHECK_THROWS_WITH_AS(plan::make<FourStages>({.micro_batches = 2, .stages = 2, .stages_given = true, .schedule = "Interleaved",
                                               .virtual_stages = 4, .virtual_stages_given = true}, 2),
                       doctest::Contains("pipeline.num_virtual_stages = 4, but the model's 4 stages (an epl::Pipeline type) on "
                                         "pipeline.num_stages = 2 ranks make 2 per rank"), Error);
  CHECK_THROWS_WITH_AS(plan::make<FourStages>({.micro_batches = 2, .stages = 4, .stages_given = true, .schedule = "PreferBackward",
                                               .virtual_stages = 2, .virtual_stages_given = true}, 4),
                       doctest::Contains("it applies to pipeline.strategy=Interleaved only"), Error);
  const auto p = plan::make<FourStages>({.micro_batches = 2, .stages = 2, .stages_given = true, .schedule = "Interleaved",
                                         .virtual_stages = 2, .virtual_stages_given = true}, 2);
  CHECK(p.virtual_stages() == 2);
  REQUIRE(p.schedule != nullptr);
  CHECK(p.schedule->name == "Interleaved");
  CHECK(plan::make<Net>({}, 4).schedule == nullptr);  // one pipeline rank: gradient accumulation
  CHECK_THROWS_WITH_AS(plan::make<Net>({.virtual_stages = 4, .virtual_stages_given = true}, 1),
                       doctest::Contains("pipeline.num_virtual_stages = 4, but this run has no pipeline"), Error);
}

TEST_CASE("plan: a model's structure is what make reads of its type; a structure made by hand is checked, not divided by") {
  struct Parts {
    Replicate<2, nn::Linear> backbone;
    Split<2, nn::Linear> head;
  };
  constexpr auto four = plan::structure_of<FourStages>();
  static_assert(four.is_pipeline && four.declared_stages == 4 && four.tensor == 1 && four.devices_per_stage == 1);
  constexpr auto parts = plan::structure_of<Parts>();
  static_assert(!parts.is_pipeline && parts.declared_stages == 1 && parts.tensor == 2 && parts.devices_per_stage == 2);
  static_assert(plan::structure_of<Marked>().marks_recompute && !plan::structure_of<Net>().marks_recompute);
  // the template and the structure give the same plan
  const auto compiled = policy::compiled<All>(false);
  const plan::PlanOptions o{.micro_batches = 4, .stages = 4, .stages_given = true};
  const auto a = plan::make<FourStages, All>(o, 4), b = plan::make(o, 4, four, compiled);
  CHECK(a.pipeline == b.pipeline);
  CHECK(a.chunks == b.chunks);
  CHECK(a.micro_batches == b.micro_batches);
  CHECK(a.schedule == b.schedule);
  CHECK(a.policies.zero_stage == b.policies.zero_stage);
  CHECK_THROWS_WITH_AS(plan::make({}, 2, {.tensor = 0}, compiled), doctest::Contains("tensor = 0, devices_per_stage = 1 and "
                                                                                     "declared_stages = 1 are device and stage counts"), Error);
  CHECK_THROWS_WITH_AS(plan::make({}, 2, {.devices_per_stage = -2}, compiled), doctest::Contains("at least 1 each"), Error);
  CHECK_THROWS_WITH_AS(plan::make({}, 2, {.declared_stages = 3}, compiled), doctest::Contains("declares 3 stages but is not a Pipeline type"),
                       Error);
  CHECK_THROWS_WITH_AS(plan::make({}, 0, {}, compiled), doctest::Contains("a world of 0 ranks"), Error);
}

TEST_CASE("plan: Replicate<2> and Split<2> on 2 ranks without the colocation key name the key") {
  struct Parts {
    Replicate<2, nn::Linear> backbone;
    Split<2, nn::Linear> head;
  };
  CHECK_THROWS_WITH_AS(plan::make<Parts>({}, 2), doctest::Contains("or cluster.colocate_split_and_replicate=true to run the "
                                                                    "Replicate and Split parts on the same devices"), Error);
  const auto colocated = plan::make<Parts>({.colocate = true}, 2);
  CHECK(colocated.colocated);
  CHECK(colocated.rows_over_tensor());
}

TEST_CASE("schedules: pipeline.strategy's choices are the registered schedules, and each runs its actions") {
  std::vector<std::string_view> names;
  for (const auto& e : strategy::kSchedules) names.push_back(e.name);
  CHECK(names == std::vector<std::string_view>{"PreferBackward", "PreferForward", "Interleaved", "ZeroBubble"});
  for (const auto& k : Config::keys())
    if (k.name == "pipeline.strategy") CHECK(k.choices == names);
  CHECK(strategy::describe(strategy::schedule_named("PreferForward").actions(2, 1, 0, 2)) == "F0 F1 B0 B1");
  CHECK(strategy::describe(strategy::schedule_named("PreferBackward").actions(2, 1, 0, 2)) == "F0 F1 B0 B1");
  CHECK(strategy::describe(strategy::schedule_named("PreferBackward").actions(2, 1, 1, 2)) == "F0.1 B0.1 F1.1 B1.1");  // stage 1 runs chunk 1
  CHECK(strategy::describe(strategy::schedule_named("ZeroBubble").actions(2, 1, 1, 2)) == "F0.1 B0.1 F1.1 B1.1 W0.1 W1.1");
  CHECK_THROWS_WITH_AS(strategy::schedule_named("ZB-V"),
                       doctest::Contains("pipeline.strategy = \"ZB-V\" is not a schedule; choose one of PreferBackward (or 1F1B,"), Error);
  CHECK_THROWS_WITH_AS(strategy::schedule_named("ZB-V"), doctest::Contains("), ZeroBubble (or ZB-H1,"), Error);
  // the names pipeline.strategy takes name the schedule everywhere (a Candidate's too: stranger 37 gave "1F1B")
  CHECK(strategy::schedule_named("1F1B").name == "PreferBackward");
  CHECK(strategy::schedule_named("GPipe").name == "PreferForward");
  static_assert(strategy::find_schedule("ZB-H1") == strategy::find_schedule("ZeroBubble") && strategy::find_schedule("zero-bubble"));
  static_assert(strategy::find_schedule("") == nullptr && strategy::find_schedule("1F") == nullptr);
}

TEST_CASE("plan: the policies a run uses, decided from the compiled ones and the keys") {
  auto none = plan_with([](policy::Keys&) {});
  CHECK(none.policies.zero_stage == 3);  // unset: the compiled epl::Zero<3>, with its offload and AMP
  CHECK(none.policies.offload);
  CHECK(none.policies.matmul == DType::kBF16);
  CHECK(none.policies.fp16_scale == 1);  // under AMP the loss scale is the fp16 wire's
  auto off = plan_with([](policy::Keys& k) {
    k.zero_level = "";
    k.offload_level = "";
    k.amp_level = "";
  });
  CHECK(off.policies.zero_stage == 0);
  CHECK_FALSE(off.policies.offload);
  CHECK_FALSE(off.policies.amp());
  auto v1 = plan_with([](policy::Keys& k) {
    k.zero_level = "v1";
    k.offload_level = "";
  });
  CHECK(v1.policies.zero_stage == 2);
  auto plain = plan_with<Net, Policies<>>([](policy::Keys&) {});
  CHECK(plain.policies.zero_stage == 0);
  CHECK(plain.policies.recompute == nn::RecomputeMode::kMarked);
  CHECK(plan_with<Marked, Policies<>>([](policy::Keys& k) { k.recompute = "auto"; }).policies.recompute ==
        nn::RecomputeMode::kSegments);
}

TEST_CASE("plan: each policy's refusal names the key and the fix") {
  auto fails = [](auto keys, const char* message, auto policies) {
    CHECK_THROWS_WITH_AS((plan_with<Net, decltype(policies)>(keys)), doctest::Contains(message), Error);
  };
  fails([](policy::Keys& k) { k.zero_level = "v2"; }, "zero.level = \"v2\" asks for ZeRO stage 3 but this program was built with "
        "epl::Zero<1>; add epl::Zero<3> to them", Policies<Zero<1>>{});
  fails([](policy::Keys& k) { k.offload_level = "v0"; }, "offload.level = \"v0\" but this program was built without offload",
        Policies<Zero<3>>{});
  fails([](policy::Keys& k) {
    k.zero_level = "v1";
    k.offload_level = "v0";
  }, "offload.level = \"v0\" streams each layer's weights from host memory through ZeRO stage 3's per-layer gathers", All{});
  fails([](policy::Keys& k) { k.amp_level = "O1"; }, "amp.level = \"O1\" but this program was built without mixed precision",
        Policies<>{});
  fails([](policy::Keys& k) {
    k.zero_level = "v1";
    k.offload_level = "";
    k.fp16 = true;
  }, "communication.fp16 with ZeRO stage 2 (zero.level = \"v1\") is not supported", All{});
  fails([](policy::Keys& k) {
    k.amp_level = "O1";
    k.clip_norm = 1;
    k.clip_after_allreduce = false;
    k.zero_level = "";
    k.offload_level = "";
  }, "amp.level = \"O1\" with communication.clip_after_allreduce=false is not supported", All{});
  fails([](policy::Keys& k) { k.amp_debug_log = true; }, "amp.debug_log = true but mixed precision is off", Policies<>{});
  fails([](policy::Keys& k) { k.recompute = "collection"; }, "gradient_checkpoint.type = \"collection\" but the model marks no "
        "boundary", Policies<>{});
  fails([](policy::Keys& k) {
    k.recompute = "auto";
    k.end_taskgraph = 1;
    k.end_taskgraph_given = true;
  }, "gradient_checkpoint.end_taskgraph = 1 but the model runs as 1 task graph", Policies<>{});
  fails([](policy::Keys& k) { k.check_gradients = true; }, "gradient_checkpoint.check_gradients = true but nothing is recomputed",
        Policies<>{});
  // half-precision parameters: AMP is how (a new user got "gradients of dtype bf16 cannot be reduced")
  fails([](policy::Keys& k) { k.dtype = DType::kBF16; }, "TrainerOptions::dtype = bf16: parameters, gradients and optimizer state "
        "stay f32; for bf16 GEMMs use mixed precision: amp.level = \"O1\" with epl::Policies<epl::Amp<epl::amp::BF16>>", Policies<>{});
  fails([](policy::Keys& k) { k.dtype = DType::kF64; }, "TrainerOptions::dtype = f64 but the device computes in f32 only; train in "
        "f64 on device::CpuF64", Policies<>{});
  plan::PlanOptions f64;
  f64.policies.dtype = DType::kF64;
  CHECK(plan::make<Net>(f64, 1, /*f64=*/true).policies.dtype == DType::kF64);
}
}
