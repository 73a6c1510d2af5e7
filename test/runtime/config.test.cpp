// EPL configuration keys: defaults, sources and their precedence, and every kind of bad input.
#include <cstdlib>

#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/runtime/launch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

using namespace epl;

namespace test_runtime_config {

TEST_SUITE("cpu") {
TEST_CASE("defaults are EPL's") {
  Config c;
  CHECK(c.get<std::int64_t>("pipeline.num_micro_batch") == 1);
  CHECK(c.get<std::string>("pipeline.strategy") == "PreferBackward");
  CHECK(c.get<std::int64_t>("communication.num_communicators") == 2);
  CHECK(c.get<std::int64_t>("communication.max_splits") == 5);
  CHECK(c.get<std::int64_t>("communication.fp16_scale") == 128);
  CHECK(c.get<std::string>("communication.gradients_reduce_method") == "mean");
  CHECK(c.get<std::string>("amp.loss_scale") == "dynamic");
  CHECK(c.get<bool>("cluster.device_place_prefer_intra_node") == true);
  CHECK(c.get<std::string>("zero.level").empty());
  CHECK(Config::keys().size() == 40);  // EPL's keys and epl's own (checkpoint.keep the newest)
  CHECK(c.get(keys::ema_decay) == 0.999);
  CHECK(c.get(keys::sequence_parallel) == false);
  CHECK(c.get(keys::rank_speeds).empty());
  CHECK(c.get(keys::checkpoint_dir).empty());
  CHECK(c.get(keys::checkpoint_every) == 0);
  CHECK(c.get(keys::max_splits) == 5);  // typed: a std::int64_t
  CHECK(c.get(keys::timeout) == 300.0);
  CHECK(c.source("zero.level") == Config::Source::kDefault);
}

TEST_CASE("command line, environment and code, in that order of precedence") {
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", "3", 1);
  const char* argv[] = {"prog", "--steps=7", "--pipeline.num_micro_batch=4", "data.txt"};
  Config from_env = Config::parse(1, argv);
  CHECK(from_env.get<std::int64_t>("pipeline.num_micro_batch") == 3);
  CHECK(from_env.source("pipeline.num_micro_batch") == Config::Source::kEnvironment);
  Config c = Config::parse(4, argv);
  unsetenv("EPL_PIPELINE_NUM_MICRO_BATCH");
  CHECK(c.get<std::int64_t>("pipeline.num_micro_batch") == 4);
  CHECK(c.source("pipeline.num_micro_batch") == Config::Source::kCommandLine);
  CHECK(c.program_args() == std::vector<std::string>{"--steps=7", "data.txt"});
  // an EPL key written without its dot is a mistake, not the program's own argument
  const char* underscored[] = {"prog", "--zero_level=v1"};
  CHECK_THROWS_WITH_AS(Config::parse(2, underscored),
                       doctest::Contains("option --zero_level is not EPL's key zero.level, which is dotted: write --zero.level=v1"), Error);
  const char* attribute[] = {"prog", "--num_micro_batch", "4"};
  CHECK_THROWS_WITH_AS(Config::parse(3, attribute), doctest::Contains("write --pipeline.num_micro_batch"), Error);
  Config plain;
  CHECK_THROWS_WITH_AS(plain.set_text("num_micro_batch", "2"), doctest::Contains("did you mean pipeline.num_micro_batch?"), Error);
  CHECK_THROWS_WITH_AS(plain.set_text("zero-level", "v1"), doctest::Contains("did you mean zero.level?"), Error);
  c.set("pipeline.num_micro_batch", 8);
  CHECK(c.get<std::int64_t>("pipeline.num_micro_batch") == 8);
  c.set_text("pipeline.num_micro_batch", "2", Config::Source::kEnvironment);  // lower precedence: ignored
  CHECK(c.get<std::int64_t>("pipeline.num_micro_batch") == 8);
  CHECK(Config::env_name("io.drop_last_files") == "EPL_IO_DROP_LAST_FILES");
  CHECK(c.describe().find("pipeline.num_micro_batch = 8 (code)") != std::string::npos);
}

TEST_CASE("unknown key names the key and its category's keys") {
  Config c;
  CHECK_THROWS_WITH_AS(c.set("pipeline.num_microbatch", 2),
                       doctest::Contains("unknown config key \"pipeline.num_microbatch\"; did you mean pipeline.num_micro_batch? "
                                         "keys of that category: pipeline.num_micro_batch, pipeline.num_stages, pipeline.strategy"),
                       Error);
  CHECK_THROWS_WITH_AS(c.set("bogus.key", 1), doctest::Contains("unknown config key \"bogus.key\"; see docs/config.md"), Error);
  // the right name in another category (found by the stranger): the key of that name is suggested
  CHECK_THROWS_WITH_AS(c.set("communication.run_visible_devices", "0"),
                       doctest::Contains("unknown config key \"communication.run_visible_devices\"; did you mean cluster.run_visible_devices? "
                                         "keys of that category: communication."),
                       Error);
  const char* argv[] = {"prog", "--zero.levle=v1"};
  CHECK_THROWS_WITH_AS(Config::parse(2, argv), doctest::Contains("unknown config key \"zero.levle\""), Error);
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", "many", 1);
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("pipeline.num_micro_batch takes an integer, got \"many\""), Error);
  unsetenv("EPL_PIPELINE_NUM_MICRO_BATCH");
}

TEST_CASE("wrong type, out of range and invalid choice name the key and the valid values") {
  Config c;
  CHECK_THROWS_WITH_AS(c.set("pipeline.num_micro_batch", "four"), doctest::Contains("takes an integer, got a string"), Error);
  CHECK_THROWS_WITH_AS(c.set("pipeline.num_micro_batch", 0), doctest::Contains("must be at least 1"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("io.slicing", "yes"), doctest::Contains("io.slicing takes a boolean (true, false, 1 or 0)"), Error);
  CHECK_THROWS_WITH_AS(c.set("pipeline.strategy", "Fastest"),
                       doctest::Contains("choose one of \"PreferBackward\", \"PreferForward\", \"Interleaved\""), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", "huge"), doctest::Contains("\"dynamic\" or a number from 1 to 2^64"), Error);
  for (const char* bad : {"inf", "0.5", "0", "1e400", "nan"})
    CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", bad), doctest::Contains("is not valid; use \"dynamic\" or a number from 1"), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", "0.5"), doctest::Contains("a scale below 1 shrinks"), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", "1e30"), doctest::Contains("a larger scale overflows"), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", 128), doctest::Contains("takes a string, got an integer 128; pass the number as a string: \"128\""),
                       Error);
  const char* argv[] = {"prog", "--pipeline.num_micro_batch"};
  CHECK_THROWS_WITH_AS(Config::parse(2, argv), doctest::Contains("needs a value"), Error);
  CHECK_THROWS_WITH_AS((void)c.get<bool>("pipeline.num_micro_batch"), doctest::Contains("holds an integer"), Error);
}

TEST_CASE("an integer too large for what it counts is out of range, never narrowed to another number") {
  // 4294967298 = 2^32 + 2 once ran as 2 micro-batches; INT64_MAX as -1.
  Config c;
  CHECK_THROWS_WITH_AS(c.set_text("pipeline.num_micro_batch", "4294967298"),
                       doctest::Contains("pipeline.num_micro_batch = 4294967298 is out of range; it must be at most 1048576"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("pipeline.num_stages", "9223372036854775807"), doctest::Contains("must be at most 4096"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("pipeline.num_virtual_stages", "4294967298"), doctest::Contains("must be at most 1024"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("communication.fp16_scale", "1000000"), doctest::Contains("must be at most 65504"), Error);
  for (const auto& k : detail::config_keys()) {
    CAPTURE(k.name);
    if (std::holds_alternative<std::int64_t>(k.default_value)) CHECK(k.max <= std::numeric_limits<std::int32_t>::max());
  }
}
TEST_CASE("a feature this version does not have is rejected, not ignored") {
  Config c;
  CHECK_THROWS_WITH_AS(c.set("communication.sparse_as_dense", true),
                       doctest::Contains("communication.sparse_as_dense = true is not supported yet"), Error);
  CHECK_NOTHROW(c.set("zero.level", "v1"));  // built: ZeRO, apply groups, checkpointing, offload, AMP
  CHECK_NOTHROW(c.set("gradient_checkpoint.type", "auto"));
  CHECK_NOTHROW(c.set("gradient_checkpoint.end_taskgraph", 3));
  CHECK_NOTHROW(c.set("gradient_checkpoint.check_gradients", true));
  CHECK_NOTHROW(c.set("optimizer.num_apply_group", 4));
  CHECK_NOTHROW(c.set("offload.level", "v0"));
  CHECK_NOTHROW(c.set("amp.level", "O1"));
  CHECK_NOTHROW(c.set("amp.loss_scale", "1024"));
  CHECK_NOTHROW(c.set("amp.debug_log", true));
  CHECK_THROWS_WITH_AS(c.set("cluster.run_visible_devices", "0,1"), doctest::Contains("leave it at its default"), Error);
  CHECK_NOTHROW(c.set("zero.level", ""));            // the default is always accepted
  CHECK_NOTHROW(c.set("pipeline.strategy", "PreferBackward"));
}

TEST_CASE("unknown EPL_* variables are refused naming the nearest key; rank counts are plain digits") {
  for (const char* typo : {"EPL_PIPELINE_NUM_MICRO_BACH", "EPL_ZERO_LEVL", "EPL_NUM_RANK"}) {
    CAPTURE(typo);
    setenv(typo, "2", 1);
    const char* argv[] = {"prog"};
    const std::string want = std::string("unknown environment variable ") + typo;
    CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains(want.c_str()), Error);
    unsetenv(typo);
  }
  setenv("EPL_ZERO_LEVL", "v1", 1);
  const char* argv[] = {"prog"};
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("did you mean EPL_ZERO_LEVEL (zero.level)?"), Error);
  unsetenv("EPL_ZERO_LEVL");
  setenv("EPL_lr_warmup_steps", "3", 1);  // the wrong case (a stranger's)
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("did you mean EPL_LR_WARMUP_STEPS (lr.warmup_steps)?"), Error);
  unsetenv("EPL_lr_warmup_steps");
  setenv("EPL_NUM_RANK", "3", 1);
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("did you mean EPL_NUM_RANKS?"), Error);
  unsetenv("EPL_NUM_RANK");
  setenv("EPL_NUM_RANKS", "2", 1);  // a library variable, not a key: accepted
  CHECK_NOTHROW(Config::parse(1, argv));
  for (const char* bad : {" 2", "+2", "2x", "", "0", "-1", "99999"}) {
    CAPTURE(bad);
    setenv("EPL_NUM_RANKS", bad, 1);
    CHECK_THROWS_WITH_AS(comm::rank_count_from_env(1), doctest::Contains("is not a rank count"), Error);
  }
  unsetenv("EPL_NUM_RANKS");
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", " 2", 1);
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("takes an integer, got \" 2\""), Error);
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", "+2", 1);
  CHECK_THROWS_WITH_AS(Config::parse(1, argv), doctest::Contains("takes an integer, got \"+2\""), Error);
  unsetenv("EPL_PIPELINE_NUM_MICRO_BATCH");
}

// What fn writes to stderr.
template <class Fn>
std::string stderr_of(Fn fn) {
  std::fflush(stderr);
  char path[] = "/tmp/epl-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  ::close(fd);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  return text;
}

// A stranger's --ranks=-1 ran one rank silently, and --ranks=5000 started 5000 thread ranks until
// the kernel killed the process for its memory, where EPL_NUM_RANKS=5000 was refused.
TEST_CASE("launch: a rank or thread count out of range is refused before any rank starts") {
  const Config cfg;
  struct Bad { LaunchOptions opt; const char* says; };
  for (const Bad& bad : {Bad{{.ranks = -1}, "LaunchOptions::ranks is -1; give a number of thread ranks from 1 to 4096, or 0"},
                         Bad{{.ranks = 5000}, "LaunchOptions::ranks is 5000"},
                         Bad{{.ranks = 2, .threads_per_rank = -3}, "LaunchOptions::threads_per_rank is -3"}}) {
    CAPTURE(bad.says);
    bool ran = false;
    int status = 0;
    const std::string printed = stderr_of([&] { status = launch(cfg, [&](Context&) { ran = true; }, bad.opt); });
    CHECK(status == kLaunchFailed);
    CHECK_FALSE(ran);
    CHECK(printed.find(bad.says) != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(comm::run_threads(4097, [](comm::ThreadCommunicator&) {}), doctest::Contains("the rank count 4097 must be from 1 to 4096"),
                       Error);
}

TEST_CASE("launch: a rank's error is printed once, rank-prefixed, whatever it throws") {
  // a std::exception was printed twice, "[rank 1] boom" and then "epl: boom" (a stranger's finding)
  const Config cfg;
  auto once = [&](auto&& thrower) {
    int status = 0;
    const std::string printed = stderr_of([&] {
      status = launch(cfg, [&](Context& ctx) {
        if (ctx.rank() == 1) thrower();
      }, {.ranks = 2});
    });
    CHECK(status == kLaunchFailed);
    std::size_t count = 0;
    for (auto at = printed.find("boom"); at != std::string::npos; at = printed.find("boom", at + 1)) ++count;
    CHECK_MESSAGE(count == 1, printed);
    CHECK(printed.find("[rank 1]") != std::string::npos);
  };
  once([] { throw std::runtime_error("boom"); });
  once([] { EPL_CHECK(false, "boom"); });
}

TEST_CASE("an environment block given as data is read as the process environment is") {
  const char* env[] = {"PATH=/usr/bin", "EPL_ZERO_LEVEL=v1", "EPL_NUM_RANKS=2", nullptr};
  Config c;
  c.load_environment(env);
  CHECK(c.get(keys::zero_level) == "v1");
  CHECK(c.source(keys::zero_level) == Config::Source::kEnvironment);
  const char* typo[] = {"EPL_ZERO_LEVL=v1", nullptr};
  CHECK_THROWS_WITH_AS(Config().load_environment(typo), doctest::Contains("did you mean EPL_ZERO_LEVEL (zero.level)?"), Error);
  const char* no_value[] = {"EPL_PIPELINE_NUM_MICRO_BATCH", nullptr};  // no '=': the empty value, not an integer
  CHECK_THROWS_WITH_AS(Config().load_environment(no_value), doctest::Contains("takes an integer, got \"\""), Error);
  CHECK_THROWS_WITH_AS(Config().load_environment(no_value), doctest::Contains("environment variable EPL_PIPELINE_NUM_MICRO_BATCH: "), Error);  // where it came from
  CHECK_NOTHROW(Config().load_environment(nullptr));
}

TEST_CASE("a megabyte of bad value is cut in the message, not repeated whole") {
  std::string huge(1 << 20, 'x');
  Config c;
  try {
    c.set_text("pipeline.num_micro_batch", huge);
    FAIL("accepted a megabyte of x as an integer");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).size() < 400);
    CHECK(std::string(e.what()).find("(1048576 characters)") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(c.set("pipeline.strategy", huge), doctest::Contains("(1048576 characters) is not valid"), Error);
}

// A program's own flags: typed, validated like the EPL keys, --name=value or --name value.
TEST_CASE("program flags: typed values, spaces or '=', lists, booleans, --help") {
  const Flag<std::int64_t> steps{"steps", 200, "steps to run", {.min = 1}};
  const Flag<std::vector<std::string>> data{"data", {}, "files"};
  const Flag<bool> verbose{"verbose", false, "talk"};
  const Flag<double> lr{"lr", 0.1, "learning rate", {.min = 0}};
  const Flag<std::string> mode{"mode", "fast", "how", {.choices = {"fast", "slow"}}};
  const char* argv[] = {"prog", "--steps", "3", "--data=a.txt", "--verbose", "--data", "b.txt", "--lr=0.5",
                        "--pipeline.num_micro_batch", "2", "--mode=slow"};
  Config c = Config::parse(11, argv, steps, data, verbose, lr, mode);
  CHECK(c.get(steps) == 3);
  CHECK(c.get(data) == std::vector<std::string>{"a.txt", "b.txt"});
  CHECK(c.get(verbose));
  CHECK(c.get(lr) == 0.5);
  CHECK(c.get(mode) == "slow");
  CHECK(c.get(keys::num_micro_batch) == 2);
  CHECK_FALSE(c.help_requested());
  const char* shouted[] = {"prog", "--STEPS=3"};  // the wrong case (a stranger's)
  CHECK_THROWS_WITH_AS(Config::parse(2, shouted, steps, data), doctest::Contains("unknown option \"--STEPS\"; did you mean --steps?"), Error);
  const char* help[] = {"prog", "--help"};
  Config h = Config::parse(2, help, steps, data);
  CHECK(h.help_requested());
  CHECK(h.usage("prog").find("--steps (an integer, default 200)  steps to run") != std::string::npos);
  // an unset policy key is not shown as if "" meant off (a stranger read it so): the program's compiled policy decides
  CHECK(h.usage("prog").find("--zero.level=\"\" (unset)\n") != std::string::npos);
  CHECK(h.usage("prog").find("take its compiled epl::Zero, epl::Offload and epl::Amp") != std::string::npos);
  const char* help_v1[] = {"prog", "--help", "--zero.level=v1"};
  CHECK(Config::parse(3, help_v1, steps, data).usage("prog").find("--zero.level=\"v1\"\n") != std::string::npos);
  const char* help_mode[] = {"prog", "-h"};
  CHECK(Config::parse(2, help_mode, mode).usage("prog").find("--mode (a string, default \"fast\", one of fast|slow)  how") != std::string::npos);
  const char* defaults[] = {"prog"};
  CHECK(Config::parse(1, defaults, steps, data).get(steps) == 200);
}

TEST_CASE("program flags: every bad input is an error naming the option") {
  const Flag<std::int64_t> steps{"steps", 200, "steps to run", {.min = 1}};
  const Flag<std::int64_t> layers{"layers", 2, "blocks", {.min = 1, .max = 64}};
  auto parse = [&](std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return Config::parse(static_cast<int>(args.size()), args.data(), steps, layers);
  };
  CHECK_THROWS_WITH_AS(parse({"--steps=abc"}), doctest::Contains("option --steps takes an integer, got \"abc\""), Error);
  // a flag named help was accepted and never set: --help asks for the usage (a stranger's finding)
  const Flag<bool> help{"help", false, "mine"};
  const char* argv[] = {"prog", "--help"};
  CHECK_THROWS_WITH_AS((void)Config::parse(2, argv, help), doctest::Contains("flag --help shadows --help, which asks for the usage"), Error);
  // a program that never asks whether --help was given would train: its first step refuses it
  const Config asked = Config::parse(2, argv, steps);
  CHECK_THROWS_WITH_AS(asked.check_all_read(), doctest::Contains("--help was given, but this program never asked for it"), Error);
  CHECK(asked.help_requested());
  CHECK_NOTHROW(asked.check_all_read());
  CHECK_THROWS_WITH_AS(parse({"--steps=3x"}), doctest::Contains("option --steps takes an integer, got \"3x\""), Error);
  // past 64 bits: out of range, not "not an integer" (found by the stranger); a key's double alike
  CHECK_THROWS_WITH_AS(parse({"--steps=99999999999999999999"}),
                       doctest::Contains("option --steps = \"99999999999999999999\" is out of range: an integer here lies between -2^63 and 2^63 - 1"),
                       Error);
  CHECK_THROWS_WITH_AS(Config().set_text("lr.min", "1e999"), doctest::Contains("is out of range: a number here"), Error);
  // past a double with a range of its own: that range, not the type's (a stranger's finding)
  CHECK_THROWS_WITH_AS(Config().set_text("communication.timeout", "1e400"),
                       doctest::Contains("config key communication.timeout = \"1e400\" is out of range: it must be from 0.001 to 86400"), Error);
  CHECK_THROWS_WITH_AS(parse({"--layers=-99999999999999999999"}), doctest::Contains("is out of range: it must be from 1 to 64"), Error);
  CHECK_THROWS_WITH_AS(parse({"--steps=-99999999999999999999"}), doctest::Contains("is out of range: it must be at least 1"), Error);
  CHECK_THROWS_WITH_AS(parse({"--layers=-1"}), doctest::Contains("option --layers = -1 is out of range; it must be at least 1"), Error);
  CHECK_THROWS_WITH_AS(parse({"--layers=65"}), doctest::Contains("it must be at most 64"), Error);
  CHECK_THROWS_WITH_AS(parse({"--stpes=3"}), doctest::Contains("unknown option \"--stpes\"; did you mean --steps?"), Error);
  CHECK_THROWS_WITH_AS(parse({"--epochs", "3"}), doctest::Contains("unknown option \"--epochs\""), Error);
  // after a hint, a sentence; without one, a clause (a stranger's findings: "; This program's", and --=3 unnamed)
  CHECK_THROWS_WITH_AS(parse({"--stpes=3"}), doctest::Contains("did you mean --steps? This program's options: --layers, --steps"), Error);
  CHECK_THROWS_WITH_AS(parse({"--zzzzqqq=1"}), doctest::Contains("unknown option \"--zzzzqqq\"; this program's options: --layers, --steps"), Error);
  CHECK_THROWS_WITH_AS(parse({"--=3"}), doctest::Contains("unknown option \"--\" (no name before the =); this program's options"), Error);
  CHECK_THROWS_WITH_AS(parse({"--steps"}), doctest::Contains("option --steps needs a value"), Error);
  CHECK_THROWS_WITH_AS(parse({"--steps", "--layers=2"}), doctest::Contains("option --steps needs a value"), Error);
  CHECK_THROWS_WITH_AS(parse({"data.txt"}), doctest::Contains("unexpected argument \"data.txt\""), Error);
  CHECK_THROWS_WITH_AS(Flag<std::int64_t>("a.b", 1, ""), doctest::Contains("must be non-empty and contain neither '.'"), Error);
  CHECK_THROWS_WITH_AS(parse({"--steps=2", "--steps=3"}), doctest::Contains("option --steps is given twice on the command line (2 and 3)"), Error);
  // the program's own flag declarations, checked where they are made
  CHECK_THROWS_WITH_AS(Flag<std::int64_t>("n", 0, "", {.min = 1}), doctest::Contains("flag --n: its default 0 lies outside its own limits"), Error);
  CHECK_THROWS_WITH_AS(Flag<double>("x", 5, "", {.min = 10, .max = 1}), doctest::Contains("flag --x: its limits {.min = 10, .max = 1} admit no value"), Error);
  CHECK_THROWS_WITH_AS(Flag<std::string>("m", "medium", "", {.choices = {"fast", "slow"}}),
                       doctest::Contains("flag --m: its default \"medium\" is not one of its own choices"), Error);
  CHECK(parse({"--layers", "7"}).get(layers) == 7);
  // without flags of its own, what is not an EPL key is the program's to read; one that never
  // reads it has it refused, and --help is seen either way (a stranger's findings: both were ignored)
  const char* own[] = {"prog", "--bogus=3", "--help"};
  const Config loose = Config::parse(3, own);
  CHECK(loose.help_requested());
  CHECK_THROWS_WITH_AS(loose.check_all_read(), doctest::Contains("the command line's \"--bogus=3 --help\" is neither an EPL key nor an "
                                                                 "option this program declared, and the program never read its own"),
                       Error);
  CHECK(loose.program_args() == std::vector<std::string>{"--bogus=3", "--help"});
  CHECK_NOTHROW(loose.check_all_read());  // read now
  const char* none[] = {"prog"};
  CHECK_NOTHROW(Config::parse(1, none).check_all_read());
  // from code, a key is named as the code named it, without a command line's dashes (a stranger's finding)
  Config code;
  code.declare(steps);
  CHECK_THROWS_WITH_AS(code.set("zero_level", "v1"), doctest::Contains("unknown key \"zero_level\"; did you mean zero.level?"), Error);
  CHECK_THROWS_WITH_AS(code.set("stpes", 3), doctest::Contains("unknown key \"stpes\"; did you mean steps? This program's options: steps"),
                       Error);
  CHECK_THROWS_WITH_AS((void)code.get<std::int64_t>("stpes"), doctest::Contains("unknown key \"stpes\""), Error);
}

TEST_CASE("value_text holds a text whole, as the agreement and a checkpoint compare it; a message cuts and escapes it") {
  Config c;
  const std::string dir = "/data/runs/" + std::string(80, 'r') + "\nnext";
  c.set(keys::checkpoint_dir, dir);
  CHECK(c.value_text("checkpoint.dir") == "\"" + dir + "\"");
  CHECK(detail::value_str(ConfigValue{dir}) == "\"/data/runs/" + std::string(53, 'r') + "...\" (96 characters)");
  CHECK(detail::value_str(ConfigValue{std::string("a\nb")}) == "\"a\\nb\"");
}

TEST_CASE("the names Megatron and DeepSpeed users type are accepted as aliases, and held as EPL's") {
  Config c;
  for (const auto& [given, held] : std::vector<std::pair<std::string, std::string>>{
           {"1F1B", "PreferBackward"}, {"GPipe", "PreferForward"}, {"interleaved", "Interleaved"}, {"ZB-H1", "ZeroBubble"}, {"zb", "ZeroBubble"}}) {
    c.set_text("pipeline.strategy", given);
    CHECK(c.get(keys::pipeline_strategy) == held);
  }
  for (const auto& [stage, level] : std::vector<std::pair<std::string, std::string>>{{"0", ""}, {"1", "v0"}, {"2", "v1"}, {"3", "v2"}}) {
    c.set("zero.level", stage);
    CHECK(c.get(keys::zero_level) == level);
  }
  const char* argv[] = {"prog", "--zero.level=3", "--pipeline.strategy=1F1B"};
  const Config parsed = Config::parse(3, argv);
  CHECK(parsed.value_text("zero.level") == "\"v2\"");
  CHECK(parsed.value_text("pipeline.strategy") == "\"PreferBackward\"");
  CHECK_THROWS_WITH_AS(c.set("zero.level", "4"), doctest::Contains("also accepted: 0 for \"\", 1 for \"v0\", 2 for \"v1\", 3 for \"v2\""), Error);
  CHECK_THROWS_WITH_AS(c.set("pipeline.strategy", "2F2B"), doctest::Contains("1F1B for \"PreferBackward\""), Error);
}

TEST_CASE("EPL_NUM_RANKS and EPL_GPU_PER_WORKER must be whole numbers in range; --help takes no value") {
  for (const char* bad : {"EPL_GPU_PER_WORKER=abc", "EPL_GPU_PER_WORKER=-5", "EPL_GPU_PER_WORKER=65", "EPL_NUM_RANKS=abc", "EPL_NUM_RANKS=0",
                          "EPL_NUM_RANKS= 2"}) {
    CAPTURE(bad);
    const char* env[] = {bad, nullptr};
    CHECK_THROWS_WITH_AS(Config().load_environment(env), doctest::Contains("set a whole number from"), Error);
  }
  const char* good[] = {"EPL_GPU_PER_WORKER=8", "EPL_NUM_RANKS=4", nullptr};
  CHECK_NOTHROW(Config().load_environment(good));
  const Flag<std::int64_t> heads{"heads", 4, "attention heads"};
  const char* help[] = {"prog", "--help=3"};
  CHECK_THROWS_WITH_AS(Config::parse(2, help, heads), doctest::Contains("option --help takes no value"), Error);
}
}

TEST_SUITE("cpu") {
TEST_CASE("a configuration key declared twice (two policy homes' config_keys) is named, not silently dropped") {
  auto keys = detail::config_keys();  // the library's own table has every key once
  CHECK_NOTHROW(detail::check_unique_keys(keys));
  const auto ema = std::find_if(keys.begin(), keys.end(), [](const ConfigKey& k) { return k.name == "ema.decay"; });
  REQUIRE(ema != keys.end());
  keys.push_back(*ema);  // a home of a program's own that declares ema.decay again
  CHECK_THROWS_WITH_AS(detail::check_unique_keys(keys), doctest::Contains("configuration key ema.decay is declared twice"), Error);
}
}
}  // namespace test_runtime_config
