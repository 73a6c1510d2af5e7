// EPL configuration keys: defaults, sources and their precedence, and every kind of bad input.
#include <cstdlib>

#include "../helpers.hpp"

using namespace epl;

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
  CHECK(Config::keys().size() == 26);
  CHECK(c.source("zero.level") == Config::Source::kDefault);
}

TEST_CASE("command line, environment and code, in that order of precedence") {
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", "3", 1);
  const char* argv[] = {"prog", "--steps=7", "--pipeline.num_micro_batch=4", "data.txt"};
  Config from_env = Config::from_args(1, argv);
  CHECK(from_env.get<std::int64_t>("pipeline.num_micro_batch") == 3);
  CHECK(from_env.source("pipeline.num_micro_batch") == Config::Source::kEnvironment);
  Config c = Config::from_args(4, argv);
  unsetenv("EPL_PIPELINE_NUM_MICRO_BATCH");
  CHECK(c.get<std::int64_t>("pipeline.num_micro_batch") == 4);
  CHECK(c.source("pipeline.num_micro_batch") == Config::Source::kCommandLine);
  CHECK(c.program_args() == std::vector<std::string>{"--steps=7", "data.txt"});
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
                       doctest::Contains("unknown config key \"pipeline.num_microbatch\"; keys of that category: "
                                         "pipeline.num_micro_batch, pipeline.num_stages, pipeline.strategy"),
                       Error);
  CHECK_THROWS_WITH_AS(c.set("bogus.key", 1), doctest::Contains("see docs/config.md"), Error);
  const char* argv[] = {"prog", "--zero.levle=v1"};
  CHECK_THROWS_WITH_AS(Config::from_args(2, argv), doctest::Contains("unknown config key \"zero.levle\""), Error);
  setenv("EPL_PIPELINE_NUM_MICRO_BATCH", "many", 1);
  CHECK_THROWS_WITH_AS(Config::from_args(1, argv), doctest::Contains("pipeline.num_micro_batch takes an integer, got \"many\""), Error);
  unsetenv("EPL_PIPELINE_NUM_MICRO_BATCH");
}

TEST_CASE("wrong type, out of range and invalid choice name the key and the valid values") {
  Config c;
  CHECK_THROWS_WITH_AS(c.set("pipeline.num_micro_batch", "four"), doctest::Contains("takes an integer, got a string"), Error);
  CHECK_THROWS_WITH_AS(c.set("pipeline.num_micro_batch", 0), doctest::Contains("must be at least 1"), Error);
  CHECK_THROWS_WITH_AS(c.set_text("io.slicing", "yes"), doctest::Contains("io.slicing takes a boolean (true/false)"), Error);
  CHECK_THROWS_WITH_AS(c.set("pipeline.strategy", "Fastest"),
                       doctest::Contains("choose one of \"PreferBackward\", \"PreferForward\""), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.loss_scale", "huge"), doctest::Contains("\"dynamic\" or a positive number"), Error);
  const char* argv[] = {"prog", "--pipeline.num_micro_batch"};
  CHECK_THROWS_WITH_AS(Config::from_args(2, argv), doctest::Contains("needs a value"), Error);
  CHECK_THROWS_WITH_AS((void)c.get<bool>("pipeline.num_micro_batch"), doctest::Contains("holds an integer"), Error);
}

TEST_CASE("a feature this version does not have is rejected, not ignored") {
  Config c;
  CHECK_THROWS_WITH_AS(c.set("zero.level", "v1"), doctest::Contains("zero.level = \"v1\" is not supported yet"), Error);
  CHECK_THROWS_WITH_AS(c.set("amp.level", "O1"), doctest::Contains("not supported yet"), Error);
  CHECK_THROWS_WITH_AS(c.set("auto.auto_parallel", true), doctest::Contains("leave it at its default false"), Error);
  CHECK_NOTHROW(c.set("zero.level", ""));            // the default is always accepted
  CHECK_NOTHROW(c.set("pipeline.strategy", "PreferBackward"));
}
}
