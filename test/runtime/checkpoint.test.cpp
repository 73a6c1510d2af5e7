// Checkpoints: 10 steps in one run equal 5 steps, a save, a new trainer, a load and 5 more, bit
// for bit (1, 2 and 4 thread ranks; accumulation, dropout, ZeRO, AMP's loss scale, the loader's
// position); a checkpoint saved by one layout loads into another and the next step matches
// continuing unchanged; every damaged or foreign checkpoint is refused naming the file and the
// problem; a save that fails part-way leaves the previous checkpoint the one resumed.
#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"
#include "epl/checkpoint/checkpoint.hpp"
#include "epl/checkpoint/export.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/core/files.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <functional>
#include <fcntl.h>
#include <fstream>
#include <unistd.h>

using namespace epl;
namespace fs = std::filesystem;

namespace test_runtime_checkpoint {

namespace {
gpt::Shape tiny(std::int64_t dim = 16) { return {.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = dim}; }
// examples/gpt's model with dropout after the embedding.
struct DropGpt {
  gpt::Embed embed;
  nn::Dropout drop;
  nn::Repeat<gpt::Block> body;
  gpt::Head head;
};
DropGpt make_drop_gpt(std::int64_t dim = 16) {
  auto g = gpt::make_gpt(tiny(dim));
  return {g.embed, nn::Dropout(0.1), g.body, g.head};
}
// The same with 4 attention heads instead of 2: every shape as DropGpt's.
DropGpt make_drop_gpt_4_heads(std::int64_t dim) {
  auto shape = tiny(dim);
  shape.heads = 4;
  auto g = gpt::make_gpt(shape);
  return {g.embed, nn::Dropout(0.1), g.body, g.head};
}
using Policy = Policies<Zero<3>, Amp<amp::BF16>>;

// A fresh directory for one test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const char* name)
      : path(fs::temp_directory_path() / ("epl-checkpoint-test-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

Config config(const char* zero = "", std::int64_t micro = 2, const char* amp = "") {
  Config c;
  c.set("pipeline.num_micro_batch", micro);
  c.set("zero.level", zero);
  c.set("amp.level", amp);
  return c;
}

struct Outcome {
  std::vector<double> losses, params;  // rank 0's losses; the whole parameters after the last step
  std::vector<double> rates;           // rank 0's learning rate of each step
  std::int64_t start = -1;             // the step the run started from
  double loss_scale = 0;
};
struct Plan {
  int ranks = 1;
  Config cfg = config();
  int steps = 5;
  fs::path resume_from = {}, save_to = {};  // a directory to resume from and to save into at the end (empty: none)
  std::int64_t dim = 16;
  std::uint64_t seed = 5;
  double eps = 1e-8;  // AdamW's
  std::function<double(std::int64_t)> lr_schedule = nullptr;  // TrainerOptions::lr_schedule
};
// Trains DropGpt (or the model make returns) with AdamW on plan.ranks thread ranks over the same
// global batches.
template <class Model = DropGpt>
Outcome train(const Plan& plan, Model (*make)(std::int64_t) = make_drop_gpt) {
  Outcome out;
  comm::run_threads(plan.ranks, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 200 + c.rank());
    Trainer<Model, optim::AdamW, Policy> t(ctx, plan.cfg, make(plan.dim), optim::AdamW({.lr = 1e-2, .eps = plan.eps}),
                                             {.seed = plan.seed, .clip_norm = 1.0, .amp_init_scale = 256, .amp_growth_interval = 2,
                                              .lr_schedule = plan.lr_schedule});
    if (!plan.resume_from.empty() && !t.resume(plan.resume_from)) EPL_FAIL("no checkpoint in ", plan.resume_from);
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    t.watch(loader);
    if (c.rank() == 0) out.start = t.steps();
    for (int s = 0; s < plan.steps; ++s) {
      const double l = t.step(loader.next(ctx.cpu()));
      if (c.rank() == 0) out.losses.push_back(l);
      if (c.rank() == 0) out.rates.push_back(t.learning_rate());
    }
    if (!plan.save_to.empty()) t.save(plan.save_to);
    t.gather_parameters();
    if (c.rank() == 0) {
      nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {  // pipelined: this rank's stages
        if (p.materialized())
          for (float x : p.value.span<float>()) out.params.push_back(x);
      });
      out.loss_scale = t.loss_scale();
    }
  });
  return out;
}
// The directories an unfinished save left in dir whose names start with `prefix`.
int unfinished(const fs::path& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (const std::string f = e.path().filename().string(); f.starts_with(prefix) && f.ends_with(".partial")) ++n;
  return n;
}
std::vector<double> tail(const std::vector<double>& v, std::size_t n) { return {v.end() - static_cast<std::ptrdiff_t>(n), v.end()}; }

// Flips one byte of a file at offset at.
void flip_byte(const fs::path& f, std::streamoff at) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(io.good());
  io.seekg(at);
  char b = 0;
  io.read(&b, 1);
  b = static_cast<char>(b ^ 0x5a);
  io.seekp(at);
  io.write(&b, 1);
}
// The error of resuming dir on one device and training a step with a loader over `tokens` ids,
// watched or not.
std::string resume_error(const fs::path& dir, std::size_t tokens, bool watch) {
  try {
    Trainer<DropGpt, optim::AdamW, Policy> t(test::cpu(), config(), make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5, .clip_norm = 1.0});
    if (!t.resume(dir)) return "nothing to resume";
    auto ds = test::token_corpus(tokens);
    data::WindowLoader loader(ds, 8, 8, 17);
    if (watch) t.watch(loader);
    (void)t.step(loader.next(test::cpu()));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}
std::string error_of(const Plan& plan) {
  try {
    (void)train(plan);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("checkpoint: 5 steps, save, load in a new trainer, 5 more equal 10 steps bit for bit") {
  struct Case {
    int ranks;
    const char* zero;
    const char* amp;
  };
  for (const Case k : {Case{1, "", ""}, Case{2, "", ""}, Case{4, "", ""}, Case{2, "v2", ""}, Case{4, "v1", "O1"}, Case{2, "v0", "O1"}}) {
    CAPTURE(k.ranks);
    CAPTURE(k.zero);
    CAPTURE(k.amp);
    TempDir dir("bit-exact");
    const Config cfg = config(k.zero, 2, k.amp);
    const Outcome straight = train({.ranks = k.ranks, .cfg = cfg, .steps = 10});
    const Outcome first = train({.ranks = k.ranks, .cfg = cfg, .steps = 5, .save_to = dir.path});
    REQUIRE(fs::is_directory(dir.path / "step-00000005"));
    const Outcome second = train({.ranks = k.ranks, .cfg = cfg, .steps = 5, .resume_from = dir.path});
    CHECK(second.start == 5);
    CHECK(first.losses == std::vector<double>(straight.losses.begin(), straight.losses.begin() + 5));
    CHECK(second.losses == tail(straight.losses, 5));  // the loader's position, dropout's step, AdamW's moments
    CHECK(second.params == straight.params);
    CHECK(second.loss_scale == straight.loss_scale);
    if (std::string(k.amp) == "O1") CHECK(straight.loss_scale != 256);  // the scale moved: its state was restored
  }
}

TEST_CASE("checkpoint: a learning-rate schedule resumes exactly: the same rates and losses as the run that never stopped") {
  auto cosine = [](const char* zero) {
    Config c = config(zero);
    c.set("lr.schedule", "cosine");
    c.set("lr.warmup_steps", 3);
    c.set("lr.decay_steps", 8);
    c.set("lr.min", 1e-3);
    return c;
  };
  auto own = [](std::int64_t step) { return 1e-2 / static_cast<double>(1 + step % 3); };  // a program's own rule
  for (int ranks : {1, 2}) {
    for (bool custom : {false, true}) {
      CAPTURE(ranks);
      CAPTURE(custom);
      TempDir dir("schedule");
      const Config cfg = custom ? config("v1") : cosine("v1");
      const auto rule = custom ? std::function<double(std::int64_t)>(own) : nullptr;
      const Outcome straight = train({.ranks = ranks, .cfg = cfg, .steps = 10, .lr_schedule = rule});
      (void)train({.ranks = ranks, .cfg = cfg, .steps = 5, .save_to = dir.path, .lr_schedule = rule});
      const Outcome second = train({.ranks = ranks, .cfg = cfg, .steps = 5, .resume_from = dir.path, .lr_schedule = rule});
      CHECK(second.rates == tail(straight.rates, 5));
      CHECK(second.losses == tail(straight.losses, 5));
      CHECK(second.params == straight.params);
      if (!custom) {  // warm-up 1/3, 2/3, 1 of 1e-2; cosine to 1e-3 at step 8; then the floor
        CHECK(straight.rates[0] == doctest::Approx(1e-2 / 3));
        CHECK(straight.rates[2] == doctest::Approx(1e-2));
        CHECK(straight.rates[5] == doctest::Approx(1e-3 + 9e-3 * 0.5 * (1 + std::cos(3.14159265358979 * 3 / 5))));
        CHECK(straight.rates[7] == doctest::Approx(1e-3));
        CHECK(straight.rates[9] == doctest::Approx(1e-3));
      } else {
        CHECK(straight.rates[1] == own(2));
      }
    }
  }
  // a resume with another schedule is refused, naming both
  TempDir dir("schedule-changed");
  (void)train({.cfg = cosine(""), .steps = 2, .save_to = dir.path});
  Config longer = cosine("");
  longer.set("lr.decay_steps", 20);
  CHECK_THROWS_WITH_AS(train({.cfg = longer, .steps = 1, .resume_from = dir.path}), doctest::Contains("decay_steps=8"), Error);
  CHECK_THROWS_WITH_AS(train({.cfg = longer, .steps = 1, .resume_from = dir.path}), doctest::Contains("same lr.* keys"), Error);
  CHECK_THROWS_WITH_AS(train({.cfg = config(), .steps = 1, .resume_from = dir.path}), doctest::Contains("this trainer's is \"constant\""),
                       Error);
}

TEST_CASE("learning-rate schedules: bad settings are named, and ranks that disagree fail before the first step") {
  auto error = [](Config cfg, std::function<double(std::int64_t)> rule = nullptr, int ranks = 1) {
    try {
      (void)train({.ranks = ranks, .cfg = std::move(cfg), .steps = 1, .lr_schedule = std::move(rule)});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Config no_length = config();
  no_length.set("lr.schedule", "cosine");
  CHECK(error(no_length).find("give lr.decay_steps greater than lr.warmup_steps") != std::string::npos);
  Config high_floor = no_length;
  high_floor.set("lr.decay_steps", 10);
  high_floor.set("lr.min", 1.0);
  CHECK(error(high_floor).find("lr.min = 1 is not a floor under the base rate 0.01") != std::string::npos);
  Config constant_decay = config();
  constant_decay.set("lr.decay_steps", 10);
  CHECK(error(constant_decay).find("lr.schedule = constant does not decay") != std::string::npos);
  Config warm = config();
  warm.set("lr.warmup_steps", 2);
  CHECK(error(warm, [](std::int64_t) { return 0.1; }).find("give one of the two") != std::string::npos);
  CHECK(error(config(), [](std::int64_t) { return -1.0; }).find("gives -1 for step 1") != std::string::npos);
  CHECK(error(config(), [](std::int64_t s) { return current_rank() == 1 ? 0.2 : 0.1 * static_cast<double>(s); }, 2)
            .find("disagree on TrainerOptions::lr_schedule(1)") != std::string::npos);
  // a rule that differs on one rank at steps no start-up probe looks at: the step's own check names it
  auto sly = [](std::int64_t s) { return current_rank() == 1 && s >= 3 && s <= 5 ? 0.02 : 0.01; };
  std::string at_step;
  try {
    (void)train({.ranks = 2, .cfg = config(), .steps = 4, .lr_schedule = sly});
  } catch (const std::exception& e) {
    at_step = e.what();
  }
  CHECK(at_step.find("at step 3 rank 1 would update with learning rate 0.02 and rank 0 with 0.01") != std::string::npos);
  CHECK_THROWS_WITH_AS(config().set("lr.schedule", "exponential"), doctest::Contains("choose one of \"constant\", \"cosine\", \"linear\""), Error);
}

TEST_CASE("checkpoint: a save by one layout loads into another; the next step matches continuing unchanged") {
  struct Layout {
    int ranks;
    const char* zero;
    std::int64_t stages = 1;
  };
  auto with = [](const Layout& l) {
    Config c = config(l.zero);
    if (l.stages > 1) {
      c.set("pipeline.num_stages", l.stages);
      c.set("auto.auto_parallel", true);
    }
    return c;
  };
  struct Change {
    Layout from, to;
  };
  for (const Change ch : {Change{{4, "v2"}, {1, ""}}, Change{{4, "v2"}, {2, "v0"}}, Change{{1, ""}, {4, "v2"}}, Change{{2, "v1"}, {4, ""}},
                          Change{{2, "", 2}, {1, ""}}, Change{{1, ""}, {4, "", 2}}}) {
    CAPTURE(ch.from.ranks);
    CAPTURE(ch.from.zero);
    CAPTURE(ch.from.stages);
    CAPTURE(ch.to.ranks);
    CAPTURE(ch.to.zero);
    CAPTURE(ch.to.stages);
    TempDir dir("reshard");
    // Another layout sums the gradients in another order (rounding differences near 1e-7). AdamW
    // divides each update by sqrt(v) + eps: with eps = 1e-8 an element whose gradient is rounding
    // noise moves by up to lr either way, and the parameters differ by 2e-4 after 2 steps between
    // any two layouts, checkpoint or not. eps = 1e-5 keeps that noise below the tolerance.
    constexpr double kEps = 1e-5;
    (void)train({.ranks = ch.from.ranks, .cfg = with(ch.from), .steps = 3, .save_to = dir.path, .eps = kEps});
    // the reference: the saving layout's next steps, continued from its own checkpoint; a
    // pipelined layout holds its stages only, so one device continues for it
    const Layout reference = ch.from.stages > 1 ? Layout{1, ""} : ch.from;
    const Outcome same = train({.ranks = reference.ranks, .cfg = with(reference), .steps = 2, .resume_from = dir.path, .eps = kEps});
    const Outcome changed = train({.ranks = ch.to.ranks, .cfg = with(ch.to), .steps = 2, .resume_from = dir.path, .eps = kEps});
    CHECK(changed.start == 3);
    CHECK(test::max_rel_diff(changed.losses, same.losses) < 1e-6);
    if (ch.to.stages == 1) CHECK(test::max_rel_diff(changed.params, same.params) < 1e-6);
  }
}

TEST_CASE("checkpoint: a split model's parts load into more replicas of it, and the other way round") {
  // examples/gpt's model split 2 ways (heads of the fused qkv weight, Mlp columns and rows, the
  // vocabulary), on 2 ranks and on 2 x 2 (split x data parallel, ZeRO stage 1)
  auto split = [](std::int64_t dim) { return gpt::make_split_gpt<2>(tiny(dim)); };
  constexpr double kEps = 1e-5;  // as above
  for (const auto& change : {std::pair{2, 4}, std::pair{4, 2}}) {
    const int from = change.first, to = change.second;  // not a structured binding: clang 14's CAPTURE cannot name one
    CAPTURE(from);
    TempDir dir("split");
    auto cfg = [](int ranks) { return config(ranks == 4 ? "v0" : ""); };
    (void)train<gpt::SplitGpt<2>>({.ranks = from, .cfg = cfg(from), .steps = 3, .save_to = dir.path, .eps = kEps}, split);
    const Outcome same = train<gpt::SplitGpt<2>>({.ranks = from, .cfg = cfg(from), .steps = 2, .resume_from = dir.path, .eps = kEps}, split);
    const Outcome changed = train<gpt::SplitGpt<2>>({.ranks = to, .cfg = cfg(to), .steps = 2, .resume_from = dir.path, .eps = kEps}, split);
    CHECK(changed.start == 3);
    CHECK(test::max_rel_diff(changed.losses, same.losses) < 1e-6);
    CHECK(test::max_rel_diff(changed.params, same.params) < 1e-6);  // rank 0's parts: the same parts on both
  }
}

TEST_CASE("checkpoint: a split model and its unsplit twin name their parameters alike and load each other's checkpoints") {
  // epl::Split adds nothing to its layers' names (embed.tok.weight either way), and a checkpoint
  // holds whole tensors by name, so examples/gpt's SplitGpt<2> on 2 ranks and Gpt on 1 take over
  // each other's training
  auto split = [](std::int64_t dim) { return gpt::make_split_gpt<2>(tiny(dim)); };
  auto plain = [](std::int64_t dim) { return gpt::make_gpt(tiny(dim)); };
  constexpr double kEps = 1e-5;  // as above
  for (const bool from_split : {true, false}) {
    CAPTURE(from_split);
    TempDir dir("twin");
    if (from_split) (void)train<gpt::SplitGpt<2>>({.ranks = 2, .steps = 3, .save_to = dir.path, .eps = kEps}, split);
    else (void)train<gpt::Gpt>({.ranks = 1, .steps = 3, .save_to = dir.path, .eps = kEps}, plain);
    const Outcome split_goes_on = train<gpt::SplitGpt<2>>({.ranks = 2, .steps = 2, .resume_from = dir.path, .eps = kEps}, split);
    const Outcome plain_goes_on = train<gpt::Gpt>({.ranks = 1, .steps = 2, .resume_from = dir.path, .eps = kEps}, plain);
    CHECK(split_goes_on.start == 3);
    CHECK(plain_goes_on.start == 3);
    REQUIRE(plain_goes_on.losses.size() == 2);
    CHECK(test::max_rel_diff(split_goes_on.losses, plain_goes_on.losses) < 1e-5);
  }
}

TEST_CASE("checkpoint: a checkpoint saved before parameters took their declared names loads by its index names") {
  // Until 2026-11 an aggregate's fields were named by index (0.0.weight for embed.tok.weight):
  // such a checkpoint is made here by renaming a fresh one's tensors, and resumes as it would.
  TempDir dir("index-named");
  const Outcome straight = train({.ranks = 2, .cfg = config("v1"), .steps = 5});
  (void)train({.ranks = 2, .cfg = config("v1"), .steps = 3, .save_to = dir.path});
  DropGpt model = make_drop_gpt();
  const auto old = checkpoint::index_names(model);
  std::map<std::string, std::string> rename;
  nn::visit_parameters(model, [&](std::string_view path, nn::Parameter& p) { rename[std::string(path)] = old.at(&p); });
  CHECK(rename.at("embed.tok.weight") == "0.0.weight");
  CHECK(rename.at("body.1.mlp.1.fc.bias") == "2.1.1.1.fc.bias");
  auto renamed = [&](const std::string& name) {
    const auto at = name.find('@');
    return rename.at(name.substr(0, at)) + (at == std::string::npos ? "" : name.substr(at));
  };
  const fs::path manifest = dir.path / "step-00000003" / "manifest.txt";
  checkpoint::Manifest m = checkpoint::parse(files::read_file(files::Folder(manifest.parent_path(), "checkpoint"), "manifest.txt", "manifest"), manifest.string());
  decltype(m.tensors) tensors;
  for (const auto& [name, t] : m.tensors) tensors.emplace(renamed(name), t);
  m.tensors = tensors;
  for (auto& p : m.pieces) p.tensor = renamed(p.tensor);
  files::write_file(manifest, checkpoint::format(m), "manifest");
  REQUIRE(checkpoint::Reader(dir.path / "step-00000003").has("0.0.weight"));
  const Outcome resumed = train({.ranks = 2, .cfg = config("v1"), .steps = 2, .resume_from = dir.path});
  CHECK(resumed.start == 3);
  CHECK(resumed.losses == tail(straight.losses, 2));
  CHECK(resumed.params == straight.params);
}

TEST_CASE("checkpoint: checkpoint.every saves as training goes and checkpoint.dir resumes from the newest") {
  TempDir dir("every");
  Config cfg = config("v2");
  cfg.set("checkpoint.dir", dir.path.string());
  cfg.set("checkpoint.every", 2);
  const Outcome straight = train({.ranks = 2, .cfg = config("v2"), .steps = 7});
  const Outcome first = train({.ranks = 2, .cfg = cfg, .steps = 5});
  CHECK(fs::is_directory(dir.path / "step-00000002"));
  CHECK(fs::is_directory(dir.path / "step-00000004"));
  CHECK_FALSE(fs::exists(dir.path / "step-00000005"));
  CHECK(checkpoint::newest(dir.path) == dir.path / "step-00000004");
  const Outcome second = train({.ranks = 2, .cfg = cfg, .steps = 3});  // resumes at 4 on its own
  CHECK(second.start == 4);
  CHECK(second.losses == tail(straight.losses, 3));
  CHECK(second.params == straight.params);
  CHECK(fs::is_directory(dir.path / "step-00000006"));
}

TEST_CASE("checkpoint: checkpoint.keep removes the older checkpoints a save completed, never the one just saved") {
  TempDir dir("keep");
  Config cfg = config("v2");
  cfg.set("checkpoint.dir", dir.path.string());
  cfg.set("checkpoint.every", 1);
  cfg.set("checkpoint.keep", 2);
  const auto steps_left = [&] {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir.path))
      if (e.is_directory()) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    return left;
  };
  const Outcome straight = train({.ranks = 2, .cfg = config("v2"), .steps = 6});
  const Outcome first = train({.ranks = 2, .cfg = cfg, .steps = 4});
  CHECK(steps_left() == std::vector<std::string>{"step-00000003", "step-00000004"});
  fs::create_directories(dir.path / "step-00000002" / "mine");  // no manifest: not a save's, so not the run's to remove
  std::ofstream(dir.path / "step-00000003" / "notes.txt") << "the program's own";  // a save's, with a file of the program's
  const Outcome second = train({.ranks = 2, .cfg = cfg, .steps = 2});  // resumes at 4, saves 5 and 6
  CHECK(second.start == 4);
  CHECK(second.params == straight.params);
  CHECK_FALSE(fs::exists(dir.path / "step-00000004"));
  CHECK(fs::is_regular_file(dir.path / "step-00000003" / "notes.txt"));
  CHECK(fs::is_directory(dir.path / "step-00000005"));
  CHECK(fs::is_directory(dir.path / "step-00000006"));
  CHECK(fs::is_directory(dir.path / "step-00000002" / "mine"));
  // keep 1: the save just made, even when an older run's later step is there
  Config one = cfg;
  one.set("checkpoint.keep", 1);
  (void)train({.ranks = 2, .cfg = one, .steps = 1});  // resumes at 6, saves 7
  CHECK(fs::is_directory(dir.path / "step-00000007"));
  CHECK_FALSE(fs::exists(dir.path / "step-00000006"));
  CHECK(steps_left() == std::vector<std::string>{"step-00000002", "step-00000003", "step-00000007"});
  // a folder the program saves into itself (trainer.save(dir)) is the program's: not pruned
  TempDir own("keep-own"), by_hand("keep-by-hand");
  Config pruned = config("v2");
  pruned.set("checkpoint.dir", own.path.string());
  pruned.set("checkpoint.every", 1);
  pruned.set("checkpoint.keep", 1);
  (void)train({.ranks = 2, .cfg = pruned, .steps = 2, .save_to = by_hand.path});
  (void)train({.ranks = 2, .cfg = pruned, .steps = 1, .save_to = by_hand.path});
  CHECK(fs::is_directory(by_hand.path / "step-00000002"));
  CHECK(fs::is_directory(by_hand.path / "step-00000003"));
  CHECK_FALSE(fs::exists(own.path / "step-00000002"));
  CHECK(fs::is_directory(own.path / "step-00000003"));
}

TEST_CASE("checkpoint: the manifest keeps every key's value, where each given one came from, and the program's flags") {
  TempDir dir("given");
  const Flag<std::int64_t> steps{"steps", 100, "optimizer steps"};
  const Flag<double> warmup{"warmup", 0.5, "a flag left at its default"};
  const char* argv[] = {"prog", "--steps=1", "--zero.level=", "--pipeline.num_micro_batch=2"};
  Config cfg = Config::parse(4, argv, steps, warmup);
  (void)cfg.get(steps);
  cfg.set("amp.level", "");  // code
  (void)train({.cfg = cfg, .steps = 1, .save_to = dir.path});
  const checkpoint::Reader reader(dir.path / "step-00000001");
  const auto& m = reader.manifest();
  auto value = [&](std::string_view key) {
    for (const auto& [k, v] : m.config)
      if (k == key) return v;
    return std::string("(none)");
  };
  CHECK(value("zero.level") == "\"\"");
  CHECK(value("steps") == "1");
  CHECK(value("warmup") == "0.5");
  CHECK(value("offload.level") == "\"\"");
  std::string given;
  for (const auto& [k, v] : m.given) given += k + "=" + v + ";";
  CAPTURE(given);
  CHECK(m.given == std::map<std::string, std::string, std::less<>>{{"amp.level", "code"}, {"pipeline.num_micro_batch", "command line"},
                                                                    {"steps", "command line"}, {"zero.level", "command line"}});
}

TEST_CASE("checkpoint: a save that fails part-way leaves the previous checkpoint the one resumed") {
  for (const char* phase : {"prepared", "shards written", "manifest written"}) {
    CAPTURE(phase);
    TempDir dir("crash");
    (void)train({.ranks = 2, .cfg = config("v2"), .steps = 2, .save_to = dir.path});
    std::string errors[2];
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 200 + c.rank());
      TrainerOptions o{.seed = 5, .clip_norm = 1.0};
      // rank 1 fails while writing; only rank 0 writes the manifest, so it fails after that
      o.checkpoint_phase = [&](std::string_view p) {
        if (p == phase && c.rank() == (std::string(phase) == "manifest written" ? 0 : 1)) EPL_FAIL("injected: a crash at ", p);
      };
      Trainer<DropGpt, optim::AdamW, Policy> t(ctx, config("v2"), make_drop_gpt(), optim::AdamW({.lr = 1e-2}), o);
      REQUIRE(t.resume(dir.path).has_value());
      auto ds = test::token_corpus(4000);
      data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
      t.watch(loader);
      (void)t.step(loader.next(ctx.cpu()));
      try {
        t.save(dir.path);
      } catch (const std::exception& e) {
        errors[c.rank()] = e.what();
      }
    });
    const int failed = std::string(phase) == "manifest written" ? 0 : 1;
    CHECK(errors[failed].find("injected: a crash at") != std::string::npos);  // its own error
    CHECK(errors[1 - failed].find("saving checkpoint") != std::string::npos);    // the other names it
    CHECK(errors[1 - failed].find("failed on rank " + std::to_string(failed)) != std::string::npos);
    CHECK(unfinished(dir.path, ".step-00000003.") == 1);  // the save's own directory, under a name no one guessed
    CHECK_FALSE(fs::exists(dir.path / "step-00000003"));
    CHECK(checkpoint::newest(dir.path) == dir.path / "step-00000002");
    // and the next save of that step replaces the partial one
    const Outcome again = train({.ranks = 2, .cfg = config("v2"), .steps = 1, .resume_from = dir.path, .save_to = dir.path});
    CHECK(again.start == 2);
    CHECK(fs::is_directory(dir.path / "step-00000003"));
    CHECK(unfinished(dir.path, ".step-") == 0);
  }
}

TEST_CASE("checkpoint: damaged, missing and foreign checkpoints are refused naming the file and the problem") {
  TempDir dir("damaged");
  (void)train({.ranks = 2, .cfg = config("v2"), .steps = 2, .save_to = dir.path});
  const fs::path ck = dir.path / "step-00000002", shard = ck / "rank-00001.bin", manifest = ck / "manifest.txt";
  const Plan resume{.ranks = 2, .cfg = config("v2"), .steps = 1, .resume_from = dir.path};
  const fs::path keep = dir.path / "keep";
  fs::copy(ck, keep);
  auto restore = [&] {
    fs::remove_all(ck);
    fs::copy(keep, ck);
  };
  SUBCASE("a flipped byte in a shard") {
    flip_byte(shard, 100);
    const auto e = error_of(resume);
    CHECK(e.find("rank-00001.bin is corrupt") != std::string::npos);
    CHECK(e.find("fail their checksum") != std::string::npos);
  }
  SUBCASE("a truncated shard") {
    fs::resize_file(shard, fs::file_size(shard) - 10);
    const auto e = error_of(resume);
    CHECK(e.find("rank-00001.bin is truncated") != std::string::npos);
  }
  // writes x over element 2 of the first piece of rank 1's shard that `which` picks, and signs the
  // checksums again (a run saved after it diverged, or a file written by hand); returns its tensor
  auto forge = [&](float x, auto which) {
    std::ifstream in(manifest);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    checkpoint::Manifest m = checkpoint::parse(text, manifest.string());
    const auto piece = std::find_if(m.pieces.begin(), m.pieces.end(), [&](const checkpoint::Piece& p) {
      return p.file == "rank-00001.bin" && which(p.tensor) && p.end - p.begin >= 3;
    });
    REQUIRE(piece != m.pieces.end());
    std::vector<char> bytes(piece->bytes);
    {
      std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(piece->offset));
      f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      std::memcpy(bytes.data() + 8, &x, 4);  // element 2 of the piece
      f.seekp(static_cast<std::streamoff>(piece->offset));
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    piece->crc = checkpoint::crc32c(bytes.data(), bytes.size());
    std::ofstream(manifest, std::ios::trunc) << checkpoint::format(m);
    return piece->tensor;
  };
  SUBCASE("a NaN weight, its checksums signed again (a run saved after it diverged, or a file written by hand)") {
    // a stranger's such checkpoint loaded, and failed 3 steps later with "the loss is nan ... lower the learning rate"
    const std::string tensor =
        forge(std::numeric_limits<float>::quiet_NaN(), [](const std::string& t) { return t.find('@') == std::string::npos; });
    const auto e = error_of(resume);
    CHECK(e.find("checkpoint " + ck.string() + " holds nan at element ") != std::string::npos);
    CHECK(e.find(" of " + tensor + ": a NaN or infinite value, saved after training diverged or written by hand; resume from "
                 "an earlier step's checkpoint") != std::string::npos);
  }
  SUBCASE("a negative second moment of AdamW, its checksums signed again") {
    // a stranger's such checkpoint loaded, and its first step's loss was nan ("lower the learning rate")
    const std::string tensor = forge(-0.25f, [](const std::string& t) { return t.ends_with("@state1"); });
    const auto e = error_of(resume);
    CHECK(e.find("checkpoint " + ck.string() + " holds -0.25 at element ") != std::string::npos);
    CHECK(e.find(" of " + tensor + ", a slot of the optimizer's state that is never negative (its kNonNegativeSlots: AdamW's second moment") != std::string::npos);
    // the first moment may be negative: the same value there loads
    restore();
    (void)forge(-0.25f, [](const std::string& t) { return t.ends_with("@state0"); });
    CHECK(error_of(resume) == "no error");
  }
  SUBCASE("a missing shard") {
    fs::remove(shard);
    CHECK(error_of(resume).find("rank-00001.bin is missing") != std::string::npos);
  }
  SUBCASE("a truncated manifest") {
    fs::resize_file(manifest, fs::file_size(manifest) / 2);
    CHECK(error_of(resume).find("manifest.txt is truncated") != std::string::npos);
  }
  SUBCASE("an edited manifest") {
    flip_byte(manifest, 30);
    CHECK(error_of(resume).find("manifest.txt is corrupt: its checksum") != std::string::npos);
  }
  SUBCASE("a missing manifest") {
    fs::remove(manifest);
    CHECK(error_of(resume).find("has no manifest.txt") != std::string::npos);
  }
  SUBCASE("another model's checkpoint") {
    Plan wider = resume;
    wider.dim = 32;
    const auto e = error_of(wider);
    CHECK(e.find("saved from another model") != std::string::npos);
    // both shapes, named: the first parameter that differs on the rank whose error arrives first
    // (rank 0's stage begins with the embedding, rank 1's with a block's attention)
    CHECK((e.find("embed.tok.weight as f32 [32, 16] but this model's is f32 [32, 32]") != std::string::npos ||
           e.find("body.0.attn.1.qkv.weight as f32 [48, 16] but this model's is f32 [96, 32]") != std::string::npos));
  }
  SUBCASE("another head count: the same shapes, another model") {
    const auto e = [&] {
      try {
        (void)train(resume, make_drop_gpt_4_heads);
      } catch (const std::exception& x) {
        return std::string(x.what());
      }
      return std::string("no error");
    }();
    CHECK(e.find("was saved from a model whose layer body.0.attn.1 has options dim=16 heads=2, and this model's has dim=16 "
                 "heads=4") != std::string::npos);
  }
  SUBCASE("another seed") {
    Plan other = resume;
    other.seed = 6;
    CHECK(error_of(other).find("was saved with TrainerOptions::seed = 5 and this trainer has 6") != std::string::npos);
  }
  restore();
  CHECK(train(resume).start == 2);  // the intact copy still loads
}

// A shard only one rank reads is damaged: every rank refuses the load, and none has changed its
// values, its optimizer state or its step (the pieces are all read and checked before any is used).
TEST_CASE("checkpoint: a load that fails on one rank changes nothing on any rank") {
  TempDir dir("one_rank_fails");
  (void)train({.ranks = 2, .cfg = config("v2"), .steps = 2, .save_to = dir.path});
  const fs::path ck = dir.path / "step-00000002";
  flip_byte(ck / "rank-00001.bin", 100);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 200 + c.rank());
    Trainer<DropGpt, optim::AdamW, Policy> t(ctx, config("v2"), make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5, .clip_norm = 1.0});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    (void)t.step(loader.next(ctx.cpu()));
    auto values = [&] {
      std::vector<float> v;
      t.gather_parameters();
      nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
        for (float x : p.value.span<float>()) v.push_back(x);
      });
      return v;
    };
    const auto before = values();
    std::string message;
    try {
      t.load(ck);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(message.find("rank-00001.bin is corrupt") != std::string::npos);
    CHECK(values() == before);
    CHECK(t.steps() == 1);
  });
}

TEST_CASE("checkpoint: misuse is named") {
  TempDir dir("misuse");
  SUBCASE("checkpoint.every without checkpoint.dir") {
    Config cfg = config();
    cfg.set("checkpoint.every", 3);
    CHECK(error_of({.cfg = cfg}).find("checkpoint.every = 3 but checkpoint.dir is not set") != std::string::npos);
  }
  SUBCASE("checkpoint.keep without checkpoint.dir, and a negative keep") {
    Config cfg = config();
    cfg.set("checkpoint.keep", 2);
    CHECK(error_of({.cfg = cfg}).find("checkpoint.keep = 2 but checkpoint.dir is not set") != std::string::npos);
    CHECK_THROWS_WITH_AS(cfg.set("checkpoint.keep", -1), doctest::Contains("checkpoint.keep"), Error);
  }
  SUBCASE("a resumed run that does not watch its loader") {
    (void)train({.steps = 1, .save_to = dir.path});
    CHECK(resume_error(dir.path, 4000, false).find("holds the position of 1 data loader but the program watches 0") != std::string::npos);
  }
  SUBCASE("a loader over other data") {
    (void)train({.steps = 1, .save_to = dir.path});
    CHECK(resume_error(dir.path, 3000, true).find("the saved loader position (a checkpoint's, or the one given to seek) is in token ids "
                                                  "in memory (4000 tokens") != std::string::npos);
  }
  SUBCASE("a loader over other data of the same size, refused unless checkpoint.resume_other_data says so") {
    (void)train({.steps = 1, .save_to = dir.path});
    auto resume_on = [&](bool other_data, std::size_t tokens = 4000) {
      Config cfg = config();
      cfg.set("checkpoint.resume_other_data", other_data);
      Trainer<DropGpt, optim::AdamW, Policy> t(test::cpu(), cfg, make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5, .clip_norm = 1.0});
      REQUIRE(t.resume(dir.path).has_value());
      std::vector<std::int32_t> ids(tokens);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 1) % 31);  // other tokens
      const auto other = data::TokenDataset::from_tokens(ids, 32);
      data::WindowLoader loader(other, 8, 8, 17);
      t.watch(loader);
      (void)t.step(loader.next(test::cpu()));
      return loader.position();
    };
    CHECK_THROWS_WITH_AS(resume_on(false), doctest::Contains("(4000 tokens, checksum"), Error);
    CHECK_THROWS_WITH_AS(resume_on(false), doctest::Contains("set checkpoint.resume_other_data=true"), Error);
    // on purpose: the new data starts the next epoch, of any size (the saved place means nothing in it)
    for (std::size_t tokens : {4000, 3000, 20000}) {
      CAPTURE(tokens);
      const auto at = resume_on(true, tokens);
      CHECK(at.epoch == 1);
      CHECK(at.cursor == 8);  // one batch read
    }
  }
  SUBCASE("\"resumed from\" is said only of a resume that holds, at the first step") {
    Config cfg = config();
    cfg.set("checkpoint.dir", dir.path.string());
    (void)train({.steps = 1, .save_to = dir.path});
    auto run = [&](bool watch) {
      std::fflush(stdout);
      const fs::path out = dir.path.string() + ".stdout";
      const int saved = ::dup(1);
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::close(fd);
      std::string error;
      try {
        Trainer<DropGpt, optim::AdamW, Policy> t(test::cpu(), cfg, make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5, .clip_norm = 1.0});
        auto ds = test::token_corpus(4000);
        data::WindowLoader loader(ds, 8, 8, 17);
        if (watch) t.watch(loader);
        (void)t.step(loader.next(test::cpu()));
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::fflush(stdout);
      ::dup2(saved, 1);
      ::close(saved);
      std::ifstream in(out);
      std::string printed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      fs::remove(out);
      return std::pair{printed, error};
    };
    const auto refused = run(false);
    CHECK(refused.second.find("holds the position of 1 data loader but the program watches 0") != std::string::npos);
    CHECK(refused.first.find("resumed from checkpoint") == std::string::npos);
    const auto held = run(true);
    CHECK(held.second.empty());
    CHECK(held.first.find("resumed from checkpoint") != std::string::npos);
  }
  SUBCASE("a directory that holds no checkpoint") {
    Trainer<DropGpt, optim::AdamW, Policy> t(test::cpu(), config(), make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5});
    fs::create_directories(dir.path);
    CHECK_FALSE(t.resume(dir.path / "nothing-here").has_value());
    CHECK(t.steps() == 0);
    CHECK_THROWS_WITH_AS(t.load(dir.path), doctest::Contains("has no manifest.txt"), Error);
  }
  SUBCASE("a directory of checkpoints given to load, a file given to load, a checkpoint given as checkpoint.dir with a slash") {
    (void)train({.steps = 1, .save_to = dir.path});
    Trainer<DropGpt, optim::AdamW, Policy> t(test::cpu(), config(), make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5});
    CHECK_THROWS_WITH_AS(t.load(dir.path), doctest::Contains("is a directory of checkpoints, not one checkpoint; load one of its steps "
                                                              "(the newest is"), Error);
    CHECK_THROWS_WITH_AS(t.load(dir.path / "step-00000001" / "manifest.txt"), doctest::Contains("is not a directory; name a step-*"), Error);
    Config slash = config();
    slash.set("checkpoint.dir", (dir.path / "step-00000001").string() + "/");
    CHECK(error_of({.cfg = slash}).find("give the directory that holds the step-N directories, \"" + dir.path.string() + "\"") !=
          std::string::npos);
  }
}

TEST_CASE("checkpoint: a save called on rank 0 only fails at once on every rank, naming the call") {
  TempDir dir("rank0-only");
  const Config cfg = config();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 200 + c.rank());
    Trainer<DropGpt, optim::AdamW, Policy> t(ctx, cfg, make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5});
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
    (void)t.step(loader.next(ctx.cpu()));
    if (c.rank() == 0) (void)t.save(dir.path);  // the slip: a save is a collective
    (void)t.step(loader.next(ctx.cpu()));
  }, {.comm = {.timeout = std::chrono::seconds(60)}, .report = false}),  // a failure that waited for it would take a minute
                       doctest::Contains("rank 0 called trainer.save() at step 1 while rank 1 called trainer.step() at step 2"), Error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK_FALSE(fs::exists(dir.path / "step-00000001"));
  // the peer returned instead: the call is named too
  std::string error;
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 200 + c.rank());
    Trainer<DropGpt, optim::AdamW, Policy> t(ctx, cfg, make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5});
    if (c.rank() != 0) return;
    try {
      (void)t.save(dir.path);
    } catch (const Error& e) {
      error = e.what();
    }
  }, {.comm = {.timeout = std::chrono::seconds(60)}, .report = false});
  CHECK(error.find("trainer.save() at step 0 could not agree with the other ranks") != std::string::npos);
  CHECK(error.find("returned from their function") != std::string::npos);
}

TEST_CASE("checkpoint: loaders that read other data on each rank (io.slicing) resume on the same ranks only") {
  TempDir dir("sliced");
  // rank r reads a corpus of its own (as io.slicing gives each rank its files): positions per rank
  auto run = [&](int ranks, int steps, bool save, bool slicing = true) {
    std::vector<double> losses;
    comm::run_threads(ranks, [&](comm::ThreadCommunicator& c) {
      Context ctx(c, 200 + c.rank());
      Config cfg = config();
      cfg.set("io.slicing", slicing);
      Trainer<DropGpt, optim::AdamW, Policy> t(ctx, cfg, make_drop_gpt(), optim::AdamW({.lr = 1e-2}), {.seed = 5});
      (void)data::slice_files({"part-0", "part-1"}, t.data_shard(), cfg);  // what a program slicing its files reads the key with
      (void)t.resume(dir.path);
      auto ds = test::token_corpus(1000 + 200 * static_cast<std::size_t>(c.rank()));
      data::WindowLoader loader(ds, 8, 8, 17, t.data_shard());
      t.watch(loader);
      t.watch(loader);  // twice counts once
      for (int s = 0; s < steps; ++s) {
        const double l = t.step(loader.next(ctx.cpu()));
        if (c.rank() == 0) losses.push_back(l);
      }
      if (save) t.save(dir.path);
    });
    return losses;
  };
  const auto straight = run(2, 20, false);  // past the first epoch of rank 0's 124 windows
  fs::remove_all(dir.path);
  (void)run(2, 12, true);
  {  // one loader count for all ranks (epl-checkpoint show printed it once a rank, the second without its rank)
    const checkpoint::Reader r(*checkpoint::newest(dir.path));
    const auto& scalars = r.manifest().scalars;
    CHECK(std::count_if(scalars.begin(), scalars.end(), [](const auto& s) { return s.first == "loaders"; }) == 1);
    CHECK(r.manifest().scalar("rank1.loader.0.cursor") != nullptr);
  }
  CHECK(run(2, 8, false) == tail(straight, 8));
  const auto e = [&] {
    try {
      (void)run(1, 1, false);
    } catch (const std::exception& x) {
      return std::string(x.what());
    }
    return std::string("no error");
  }();
  CHECK(e.find("holds each of its 2 ranks' own data position") != std::string::npos);
  CHECK(e.find("only a run on 2 ranks can resume; this one has 1") != std::string::npos);
  // the same ranks without io.slicing: named, not called other data (a stranger's finding)
  const auto f = [&] {
    try {
      (void)run(2, 1, false, false);
    } catch (const std::exception& x) {
      return std::string(x.what());
    }
    return std::string("no error");
  }();
  CHECK(f.find("was saved by a run with io.slicing = true and this run has io.slicing = false") != std::string::npos);
}

TEST_CASE("checkpoint: a directory is one run's, and a checkpoint is what its name says") {
  TempDir dir("guarded");
  using T = Trainer<DropGpt, optim::AdamW, Policy>;
  const TrainerOptions o{.seed = 5};
  SUBCASE("two runs saving into one directory") {
    T a(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o), b(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    a.save(dir.path);
    // this process's own pid in the lock: the other run is a Trainer of this process, said so
    CHECK_THROWS_WITH_AS(b.save(dir.path), doctest::Contains("is in use by another Trainer of this process"), Error);
    a.save(dir.path / "elsewhere");  // a's lock moves with it
    CHECK_NOTHROW(b.save(dir.path));
  }
  SUBCASE("checkpoint.dir set when the run saves is checked at start, not at the first save") {
    fs::create_directories(dir.path);
    std::ofstream(dir.path / "a-file") << "x";
    Config cfg = config();
    cfg.set("checkpoint.dir", (dir.path / "a-file").string());
    cfg.set("checkpoint.every", 100);
    CHECK_THROWS_WITH_AS(T(test::cpu(), cfg, make_drop_gpt(), optim::AdamW({}), o), doctest::Contains("is not a directory"), Error);
    cfg.set("checkpoint.dir", (dir.path / "a-file" / "sub").string());
    CHECK_THROWS_WITH_AS(T(test::cpu(), cfg, make_drop_gpt(), optim::AdamW({}), o), doctest::Contains("cannot create checkpoint directory"), Error);
  }
  SUBCASE("a step directory given where its parent belongs") {
    T a(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    const auto step = a.save(dir.path);
    Config cfg = config();
    cfg.set("checkpoint.dir", step.string());
    CHECK_THROWS_WITH_AS(T(test::cpu(), cfg, make_drop_gpt(), optim::AdamW({}), o), doctest::Contains("is itself a checkpoint"), Error);
    CHECK_THROWS_WITH_AS(a.resume(step), doctest::Contains("give the directory that holds the step-N directories"), Error);
    CHECK_THROWS_WITH_AS(a.save(""), doctest::Contains("no checkpoint directory given"), Error);
  }
  SUBCASE("a step directory renamed") {
    T a(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    fs::rename(a.save(dir.path), dir.path / "step-00000012");
    CHECK_THROWS_WITH_AS(a.resume(dir.path), doctest::Contains("is named for step 12 but its manifest says step 0"), Error);
    // every reader alike: epl-checkpoint show and export_safetensors read it through Reader (a stranger's finding)
    CHECK_THROWS_WITH_AS(checkpoint::Reader(dir.path / "step-00000012"), doctest::Contains("is named for step 12"), Error);
    CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(dir.path / "step-00000012", dir.path / "w.safetensors"),
                         doctest::Contains("is named for step 12"), Error);
  }
  SUBCASE("steps past 10^8 are found") {
    CHECK(checkpoint::step_of("step-123456789") == 123456789);
    CHECK(checkpoint::step_of(checkpoint::step_name(12)) == 12);
    CHECK_FALSE(checkpoint::step_of("step-0000012").has_value());  // not a name a save writes
    CHECK_FALSE(checkpoint::step_of("step-00000012x").has_value());
    fs::create_directories(dir.path / "step-00000004");
    fs::create_directories(dir.path / "step-123456789");
    CHECK(checkpoint::newest(dir.path) == dir.path / "step-123456789");
  }
  SUBCASE("watching a loader the saved run did not watch") {
    T a(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    a.save(dir.path);
    T b(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    REQUIRE(b.resume(dir.path).has_value());
    auto ds = test::token_corpus(4000);
    data::WindowLoader loader(ds, 8, 8, 17);
    CHECK_THROWS_WITH_AS(b.watch(loader), doctest::Contains("holds the position of 0 data loaders, and now watches loader 1"), Error);
  }
  SUBCASE("export refuses to write into the checkpoint it reads") {
    T a(test::cpu(), config(), make_drop_gpt(), optim::AdamW({}), o);
    const auto step = a.save(dir.path);
    CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(step, step / "manifest.txt"), doctest::Contains("would be written into the checkpoint"), Error);
    CHECK_THROWS_WITH_AS(checkpoint::export_safetensors(step, dir.path), doctest::Contains("is a directory"), Error);
    fs::remove(step / "manifest.txt");
    CHECK_THROWS_AS(checkpoint::export_safetensors(step, dir.path / "m.safetensors"), Error);
    CHECK_FALSE(fs::exists(dir.path / "m.safetensors"));
    for (const auto& e : fs::directory_iterator(dir.path)) CHECK_FALSE(e.path().filename().string().starts_with(".m.safetensors"));
  }
}

TEST_CASE("checkpoint: CRC-32C, the instruction and Boost.CRC's table agree") {
  CHECK(checkpoint::crc32c("123456789", 9) == 0xE3069283u);  // the polynomial's check value
  std::vector<unsigned char> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  for (std::size_t n : {0, 1, 7, 8, 9, 63, 1000}) {
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> table;
    table.process_bytes(bytes.data(), n);
    CHECK(checkpoint::crc32c(bytes.data(), n) == table.checksum());
  }
}

TEST_CASE("checkpoint: the manifest reads back what it wrote and refuses every inconsistent line") {
  checkpoint::Manifest m;
  m.step = 7;
  m.scalars = {{"seed", "5"}, {"optimizer", "epl::optim::AdamW<with spaces>"}};
  m.config = {{"trace", ""}, {"checkpoint.dir", "/tmp/a dir/%x\n"}};
  m.given = {{"checkpoint.dir", "command line"}};  // trace had its default
  m.tensors["w"] = {DType::kF32, Shape{4, 6}};
  m.files["rank-00000.bin"] = 48;
  m.pieces.push_back({"w", "rank-00000.bin", 0, 48, 0x1234abcd, {1, 1, 2, 1}, Shape{4, 3}, 0, 12});
  const std::string text = checkpoint::format(m);
  const auto back = checkpoint::parse(text, "test");
  CHECK(back.step == 7);
  CHECK(back.scalars == m.scalars);
  CHECK(back.config == m.config);
  CHECK(back.given == m.given);
  // version 1 (no given keys) is read; a fourth word there, or a newer version, is not
  const std::string given_line = "config checkpoint.dir /tmp/a%20dir/%25x%0A command%20line\n";
  REQUIRE(text.find(given_line) != std::string::npos);
  std::string v1 = text;
  v1.replace(v1.find("epl-checkpoint 2"), 16, "epl-checkpoint 1");
  CHECK_THROWS_WITH_AS(checkpoint::parse(v1, "test", false), doctest::Contains("has 4 words; a \"config\" line has 3"), Error);
  v1.replace(v1.find(given_line), given_line.size(), "config checkpoint.dir /tmp/a%20dir/%25x%0A\n");
  const auto old = checkpoint::parse(v1, "test", false);
  CHECK(old.config == m.config);
  CHECK(old.given.empty());
  std::string v3 = text;
  v3.replace(v3.find("epl-checkpoint 2"), 16, "epl-checkpoint 3");
  CHECK_THROWS_WITH_AS(checkpoint::parse(v3, "test", false), doctest::Contains("says version 3; this epl reads versions 1 to 2 (a newer epl wrote it)"),
                       Error);
  REQUIRE(back.pieces.size() == 1);
  CHECK(back.pieces[0].crc == 0x1234abcd);
  CHECK(back.pieces[0].local == Shape{4, 3});
  CHECK(back.pieces[0].shard.index == 1);
  // each line below replaces the piece line: the parse must name what is wrong
  const std::string piece = "piece w rank-00000.bin 0 48 1234abcd 1 1 2 1 2 4 3 0 12";
  const std::pair<const char*, const char*> bad[] = {
      {"piece w rank-00000.bin 0 48 1234abcd 1 1 2 1 2 4 4 0 12", "is not part 1 of 2"},
      {"piece w rank-00000.bin 0 48 1234abcd 1 2 2 1 2 4 3 0 12", "no part of tensor w"},
      {"piece w rank-00000.bin 0 48 1234abcd 1 1 2 1 2 4 3 0 13", "elements [0, 13) of a part of 12"},
      {"piece w rank-00000.bin 8 48 1234abcd 1 1 2 1 2 4 3 0 12", "past the end of file"},
      {"piece w rank-00000.bin 0 40 1234abcd 1 1 2 1 2 4 3 0 12", "40 bytes for 12 f32 elements"},
      {"piece v rank-00000.bin 0 48 1234abcd 1 1 2 1 2 4 3 0 12", "which no tensor line describes"},
      {"piece w rank-00009.bin 0 48 1234abcd 1 1 2 1 2 4 3 0 12", "which no file line lists"},
      {"piece w rank-00000.bin -1 48 1234abcd 1 1 2 1 2 4 3 0 12", "an offset \"-1\""},
      {"piece w rank-00000.bin 0 48 1234abcd 1 1 2 1 9 4 3 0 12", "a tensor rank \"9\""},
      {"piece w rank-00000.bin 0 48 1234abcd 1 1 2 1", "has 10 words"},
      {"bogus line", "which is not a manifest line"},
  };
  for (const auto& entry : bad) {
    const char* line = entry.first;
    const char* message = entry.second;
    CAPTURE(line);
    std::string edited = text;
    edited.replace(edited.find(piece), piece.size(), line);
    CHECK_THROWS_WITH_AS(checkpoint::parse(edited, "test", false), doctest::Contains(message), Error);
    CHECK_THROWS_WITH_AS(checkpoint::parse(edited, "test"), doctest::Contains("its checksum"), Error);
  }
  CHECK_THROWS_WITH_AS(checkpoint::parse("", "empty"), doctest::Contains("is truncated"), Error);
  CHECK_THROWS_WITH_AS(checkpoint::parse("end 00000000\n", "bare", false), doctest::Contains("lacks its"), Error);
}

TEST_CASE("checkpoint: a tensor is rebuilt from split and ZeRO pieces, and a gap is named") {
  // w [4, 6] saved as two column halves (a split of 2), the second half in two ZeRO slices
  std::vector<float> whole(24);
  for (int i = 0; i < 24; ++i) whole[i] = static_cast<float>(i);
  auto part = [&](int k) {
    std::vector<float> p;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) p.push_back(whole[r * 6 + k * 3 + c]);
    return p;
  };
  std::map<std::string, std::vector<char>> files;
  checkpoint::Manifest m;
  m.tensors["w"] = {DType::kF32, Shape{4, 6}};
  auto add = [&](const std::string& file, int k, int b, int e) {
    const auto p = part(k);
    auto& bytes = files[file];
    const std::uint64_t at = bytes.size();
    bytes.insert(bytes.end(), reinterpret_cast<const char*>(p.data() + b), reinterpret_cast<const char*>(p.data() + e));
    m.pieces.push_back({"w", file, at, static_cast<std::uint64_t>(e - b) * 4, checkpoint::crc32c(p.data() + b, (e - b) * 4u),
                        {1, k, 2, 1}, Shape{4, 3}, b, e});
    m.files[file] = bytes.size();
  };
  add("a", 0, 0, 12);
  add("b", 1, 0, 5);
  add("c", 1, 5, 12);
  checkpoint::Source src;
  src.size = [&](const std::string& f) -> std::optional<std::uint64_t> { return files.count(f) ? std::optional<std::uint64_t>(files[f].size()) : std::nullopt; };
  src.read = [&](const std::string& f, std::uint64_t at, void* out, std::uint64_t n) { std::memcpy(out, files[f].data() + at, n); };
  const checkpoint::Reader r(checkpoint::format(m), "mem", src);
  const auto bytes = r.whole("w");
  std::vector<float> got(24);
  std::memcpy(got.data(), bytes.data(), 96);
  CHECK(got == whole);
  m.pieces.pop_back();  // elements 5..11 of the second half: gone
  CHECK_THROWS_WITH_AS(static_cast<void>(checkpoint::Reader(checkpoint::format(m), "mem", src).whole("w")), doctest::Contains("holds 17 of the 24 elements"), Error);
  // a piece more, over elements 2..4 of the first half (a forged manifest, its checksum right): the
  // later piece won silently (a stranger's finding)
  add("c", 1, 5, 12);
  add("d", 0, 2, 5);
  CHECK_THROWS_WITH_AS(static_cast<void>(checkpoint::Reader(checkpoint::format(m), "mem", src).whole("w")),
                       doctest::Contains("holds element 2 of tensor w in two pieces (they overlap)"), Error);
}
}
}  // namespace test_runtime_checkpoint
