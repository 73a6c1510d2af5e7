// Nothing outside the run is touched: at every name epl writes (the checkpoint lock, a step
// directory and its manifest and shard files, the .partial directories, a safetensors export and
// its old temporary name, a trace, a planner profile, a store value) a planted symbolic link to a
// file outside, a FIFO, a hard link or a device node is either never opened or refused naming it;
// the file outside keeps its bytes, and nothing waits on a FIFO (epl/core/files.hpp's rule).
#include "../helpers.hpp"
#include "epl/checkpoint/checkpoint.hpp"
#include "epl/comm/store.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/plan/cost.hpp"
#include "epl/runtime/launch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

using namespace epl;
namespace fs = std::filesystem;

namespace test_runtime_planted {

namespace {
struct Net {
  nn::Linear fc1;
  nn::ReLU act;
  nn::Linear fc2;
};
Net make_net() { return {nn::Linear(4, 8), {}, nn::Linear(8, 3)}; }
using T = Trainer<Net, optim::SGD>;

// A fresh folder with a victim file beside it, outside everything epl is told about.
struct Scene {
  fs::path root, dir, victim;
  explicit Scene(const std::string& name)
      : root(fs::temp_directory_path() / ("epl-planted-" + std::to_string(::getpid()) + "-" + name)), dir(root / "run"), victim(root / "victim") {
    fs::remove_all(root);
    fs::create_directories(dir);
    std::ofstream(victim) << "the victim's own bytes\n";
  }
  ~Scene() { fs::remove_all(root); }
  [[nodiscard]] std::string victim_bytes() const {
    std::ifstream in(victim);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  [[nodiscard]] bool victim_intact() const { return fs::is_regular_file(fs::symlink_status(victim)) && victim_bytes() == "the victim's own bytes\n"; }
};

enum class Plant { kSymlink, kFifo, kHardLink, kDevice };
const char* name_of(Plant p) {
  constexpr const char* names[] = {"a symbolic link", "a FIFO", "a hard link", "a device node"};
  return names[static_cast<int>(p)];
}
// Plants p at path (a link or hard link to the scene's victim). False when it cannot be made here
// (a device node needs root).
bool plant(const Scene& s, Plant p, const fs::path& path) {
  switch (p) {
    case Plant::kSymlink: fs::create_symlink(s.victim, path); return true;
    case Plant::kFifo: REQUIRE(::mkfifo(path.c_str(), 0644) == 0); return true;
    case Plant::kHardLink: fs::create_hard_link(s.victim, path); return true;
    case Plant::kDevice: return ::mknod(path.c_str(), S_IFCHR | 0644, makedev(1, 7)) == 0;  // a copy of /dev/full
  }
  return false;
}

// Runs fn, which must end within 20 s: should it wait on a FIFO, the FIFO is opened from here to
// let it go, and the case fails as a hang. Returns fn's error message ("" when it succeeded).
std::string within_time(const fs::path& fifo, const std::function<void()>& fn) {
  auto done = std::async(std::launch::async, [&]() -> std::string {
    try {
      fn();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  if (done.wait_for(std::chrono::seconds(20)) == std::future_status::timeout) {
    FAIL_CHECK("waited on the FIFO ", fifo);
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    done.wait();
    if (fd >= 0) ::close(fd);
  }
  return done.get();
}

Batch batch() {
  Tensor x = test::random({6, 4}, 3), y = test::cpu().empty({6}, DType::kI32);
  for (int i = 0; i < 6; ++i) y.span<std::int32_t>()[i] = i % 3;
  return {x, y};
}
// A trainer that saves into dir after one step.
fs::path save_one_step(const fs::path& dir) {
  T t(test::cpu(), Config(), make_net(), optim::SGD({.lr = 0.1}));
  (void)t.step(batch());
  return t.save(dir);
}
// Two thread ranks that trace into `trace` and take `steps` steps.
void train_traced(const fs::path& trace, int steps) {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    Context ctx(c, 1);
    Config cfg;
    cfg.set("trace", trace.string());
    T t(ctx, cfg, make_net(), optim::SGD({.lr = 0.1}));
    for (int i = 0; i < steps; ++i) (void)t.step(batch());
  }, {.report = false});
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("planted entries: the checkpoint lock is never written through a link, a FIFO or a hard link") {
  for (Plant p : {Plant::kSymlink, Plant::kFifo, Plant::kHardLink}) {
    CAPTURE(name_of(p));
    Scene s("lock");
    const fs::path lock = s.dir / ".epl-checkpoint.lock";
    REQUIRE(plant(s, p, lock));
    const std::string error = within_time(lock, [&] { (void)save_one_step(s.dir); });
    CHECK(error.find(".epl-checkpoint.lock") != std::string::npos);
    CHECK(error.find(p == Plant::kHardLink ? "hard link" : p == Plant::kFifo ? "FIFO" : "symbolic link") != std::string::npos);
    CHECK(s.victim_intact());
    CHECK_FALSE(fs::exists(s.dir / "step-00000001"));
  }
}

TEST_CASE("planted entries: a regular file at the lock's name that epl did not write keeps its bytes") {
  for (bool foreign_owner : {false, true}) {
    CAPTURE(foreign_owner);
    Scene s("lock-file");
    const fs::path lock = s.dir / ".epl-checkpoint.lock";
    std::ofstream(lock) << "IMPORTANT DATA\n";
    if (foreign_owner && ::geteuid() == 0) REQUIRE(::chown(lock.c_str(), 65534, 65534) == 0);
    (void)save_one_step(s.dir);
    std::ifstream in(lock);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "IMPORTANT DATA\n");  // locked, never truncated
  }
  // epl's own lock (made by a run) holds the pid of the run that holds it
  Scene s("lock-own");
  (void)save_one_step(s.dir);
  std::ifstream in(s.dir / ".epl-checkpoint.lock");
  std::string pid;
  in >> pid;
  CHECK(pid == std::to_string(::getpid()));
}

TEST_CASE("planted entries: a step directory that a save did not write is never replaced or written into") {
  for (Plant p : {Plant::kSymlink, Plant::kFifo, Plant::kDevice}) {
    CAPTURE(name_of(p));
    Scene s("step");
    const fs::path step = s.dir / "step-00000001";
    if (!plant(s, p, step)) {
      MESSAGE("no device node without root: case not run");
      continue;
    }
    const std::string error = within_time(step, [&] { (void)save_one_step(s.dir); });
    CHECK(error.find("step-00000001") != std::string::npos);
    CHECK(error.find("a save did not write") != std::string::npos);
    CHECK(s.victim_intact());
    CHECK(fs::symlink_status(step).type() != fs::file_type::regular);  // still what was planted
  }
  // a directory of someone else's (no manifest) is not replaced either
  Scene s("foreign");
  fs::create_directories(s.dir / "step-00000001" / "theirs");
  CHECK_THROWS_WITH_AS(save_one_step(s.dir), doctest::Contains("a directory that holds no manifest.txt"), Error);
  CHECK(fs::is_directory(s.dir / "step-00000001" / "theirs"));
}

TEST_CASE("planted entries: links at the old fixed .partial names are never followed, and a save in progress has a name no one can guess") {
  Scene s("partial");
  fs::create_directories(s.root / "elsewhere");
  fs::create_symlink(s.root / "elsewhere", s.dir / ".step-00000001.partial");  // what a save wrote into before
  fs::create_symlink(s.victim, s.dir / ".step-00000001.partial.rank-00000.bin");
  const fs::path step = save_one_step(s.dir);
  CHECK(fs::is_regular_file(step / "manifest.txt"));
  CHECK(fs::is_empty(s.root / "elsewhere"));
  CHECK(s.victim_intact());
  CHECK(fs::is_symlink(s.dir / ".step-00000001.partial"));  // not epl's: left alone
  // saved again over its own step directory: replaced, nothing else changes
  const fs::path again = save_one_step(s.dir);
  CHECK(again == step);
  CHECK(fs::is_regular_file(step / "manifest.txt"));
  CHECK(fs::is_empty(s.root / "elsewhere"));
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(s.dir))
    if (e.path().filename().string().ends_with(".partial") && !fs::is_symlink(e.symlink_status())) ++leftovers;
  CHECK(leftovers == 0);
}

TEST_CASE("planted entries: a checkpoint's manifest or shard file that is a link or a FIFO is refused on reading, without waiting") {
  for (const char* file : {"manifest.txt", "rank-00000.bin"}) {
    for (Plant p : {Plant::kSymlink, Plant::kFifo}) {
      CAPTURE(file);
      CAPTURE(name_of(p));
      Scene s("read");
      const fs::path step = save_one_step(s.dir);
      fs::copy_file(step / file, s.victim, fs::copy_options::overwrite_existing);  // a link to the real bytes, even
      const std::string real = s.victim_bytes();
      fs::remove(step / file);
      REQUIRE(plant(s, p, step / file));
      const std::string error = within_time(step / file, [&] {
        T t(test::cpu(), Config(), make_net(), optim::SGD({.lr = 0.1}));
        t.load(step);
      });
      CHECK(error.find(file) != std::string::npos);
      CHECK(error.find("aside") != std::string::npos);
      CHECK(s.victim_bytes() == real);
    }
  }
}

TEST_CASE("planted entries: a checkpoint.dir moved and replaced by a link during the run is refused, not locked anew") {
  Scene s("swapped");
  fs::create_directories(s.root / "elsewhere");
  T t(test::cpu(), Config(), make_net(), optim::SGD({.lr = 0.1}));
  (void)t.step(batch());
  (void)t.save(s.dir);
  fs::rename(s.dir, s.root / "moved");
  fs::create_symlink(s.root / "elsewhere", s.dir);
  (void)t.step(batch());
  CHECK_THROWS_WITH_AS(t.save(s.dir), doctest::Contains("is no longer the directory this run locked"), Error);
  CHECK(fs::is_empty(s.root / "elsewhere"));
}

TEST_CASE("planted entries: a step-N entry that is a link is an error when resuming, naming it") {
  Scene s("newest");
  const fs::path step = save_one_step(s.dir);
  fs::rename(step, s.root / "moved");
  fs::create_symlink(s.root / "moved", s.dir / "step-00000005");
  T t(test::cpu(), Config(), make_net(), optim::SGD({.lr = 0.1}));
  CHECK_THROWS_WITH_AS(t.resume(s.dir), doctest::Contains("step-00000005\" is a symbolic link where a save writes a directory of its own"), Error);
}

TEST_CASE("planted entries: a safetensors export never writes through or over anything but a regular file") {
  for (Plant p : {Plant::kSymlink, Plant::kFifo, Plant::kDevice}) {
    CAPTURE(name_of(p));
    Scene s("export");
    const fs::path step = save_one_step(s.dir / "ckpt");
    const fs::path out = s.dir / "model.safetensors";
    if (!plant(s, p, out)) {
      MESSAGE("no device node without root: case not run");
      continue;
    }
    const auto before = fs::symlink_status(out).type();
    const std::string error = within_time(out, [&] { (void)checkpoint::export_safetensors(step, out); });
    CHECK(error.find("model.safetensors") != std::string::npos);
    CHECK(error.find("only in place of a regular file") != std::string::npos);
    CHECK(fs::symlink_status(out).type() == before);
    CHECK(s.victim_intact());
  }
  // the old fixed temporary name, planted: never opened
  Scene s("export-partial");
  const fs::path step = save_one_step(s.dir / "ckpt");
  fs::create_symlink(s.victim, s.dir / "model.safetensors.partial");
  CHECK(checkpoint::export_safetensors(step, s.dir / "model.safetensors") == 4);
  CHECK(s.victim_intact());
  CHECK(fs::is_regular_file(fs::symlink_status(s.dir / "model.safetensors")));
  // a regular file there is replaced, as PyTorch's save_file would
  CHECK(checkpoint::export_safetensors(step, s.dir / "model.safetensors") == 4);
}

TEST_CASE("planted entries: a trace file that is a link or a FIFO is refused before the first step") {
  for (Plant p : {Plant::kSymlink, Plant::kFifo}) {
    CAPTURE(name_of(p));
    Scene s("trace");
    const fs::path trace = s.dir / "trace.json";
    REQUIRE(plant(s, p, trace));
    const std::string error = within_time(trace, [&] { train_traced(trace, 0); });
    CHECK(error.find("trace.json") != std::string::npos);
    CHECK(error.find("only in place of a regular file") != std::string::npos);
    CHECK(s.victim_intact());
  }
  // a folder that takes no new names (procfs) says so, not "No such file or directory" (a stranger's finding)
  const std::string proc = within_time("/proc/self", [&] { train_traced("/proc/self/epl-trace.json", 0); });
  CHECK_MESSAGE(proc.find("cannot create a file in \"/proc/self\" for the trace file \"/proc/self/epl-trace.json\": the folder takes no "
                          "new files") != std::string::npos, proc);
  // a regular file is replaced whole at the end, and nothing else is left in the folder
  Scene s("trace-ok");
  std::ofstream(s.dir / "trace.json") << "old";
  train_traced(s.dir / "trace.json", 1);
  std::ifstream in(s.dir / "trace.json");
  std::string first;
  std::getline(in, first);
  CHECK(first.find("traceEvents") != std::string::npos);
  CHECK(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator()) == 1);
}

TEST_CASE("planted entries: a trace that cannot be written at the end (a link planted during the run) fails the launch") {
  Scene s("trace-late");
  const fs::path trace = s.dir / "trace.json";
  Config cfg;
  cfg.set("trace", trace.string());
  const int status = launch(cfg, [&](Context& ctx) {
    T t(ctx, cfg, make_net(), optim::SGD({.lr = 0.1}));
    (void)t.step(batch());
    if (ctx.rank() == 0) fs::create_symlink(s.victim, trace);  // after the check at the start
  }, {.ranks = 2});
  CHECK(status == kLaunchFailed);
  CHECK(s.victim_intact());
  CHECK(fs::is_symlink(trace));
}

TEST_CASE("planted entries: a planner profile or a benchmark's file is written only in place of a regular file") {
  for (Plant p : {Plant::kSymlink, Plant::kFifo}) {
    CAPTURE(name_of(p));
    Scene s("profile");
    const fs::path file = s.dir / "profile.txt";
    REQUIRE(plant(s, p, file));
    plan::Profile prof;
    const std::string error = within_time(file, [&] { plan::save_profile(prof, file, "key"); });
    CHECK(error.find("profile.txt") != std::string::npos);
    CHECK(s.victim_intact());
    const std::string bench = within_time(file, [&] { files::write_file(file, "[]\n", "benchmark results file"); });
    CHECK(bench.find("benchmark results file") != std::string::npos);
    CHECK(s.victim_intact());
  }
}

TEST_CASE("planted entries: a store value is never written through a link, and a FIFO is refused without waiting") {
  Scene s("store");
  comm::FileStore store(s.dir, "run", std::chrono::milliseconds(2000));
  fs::create_symlink(s.victim, s.dir / "run.id");
  CHECK_THROWS_WITH_AS(store.set("id", {'x'}), doctest::Contains("only in place of a regular file"), Error);
  CHECK(s.victim_intact());
  fs::remove(s.dir / "run.id");
  REQUIRE(::mkfifo((s.dir / "run.id").c_str(), 0644) == 0);
  const std::string error = within_time(s.dir / "run.id", [&] { (void)store.get("id"); });
  CHECK(error.find("a device, FIFO or socket") != std::string::npos);
}

TEST_CASE("files: a new file never opens what was there, and a failed write leaves nothing behind") {
  Scene s("new");
  const files::Folder folder(s.dir, "test folder");
  fs::create_symlink(s.victim, s.dir / "taken");
  CHECK_THROWS_WITH_AS(files::NewFile(folder, "taken", "test file"), doctest::Contains("already there"), Error);
  CHECK(s.victim_intact());
  {
    files::NewFile f = files::NewFile::temporary(folder, "out", "test file");
    f.write("half");
  }  // destroyed before commit
  CHECK(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator()) == 1);  // only the planted link
  files::write_file(s.dir / "out", "whole", "test file");
  CHECK(files::read_file(folder, "out", "test file") == "whole");
  CHECK(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator()) == 2);
}

TEST_CASE("checkpoint.dir that cannot be listed is an error naming it, never a fresh start from step 0") {
  Scene s("unlistable");
  (void)save_one_step(s.dir);
  fs::permissions(s.dir, fs::perms::owner_write | fs::perms::owner_exec);  // no read: cannot be listed
  // root reads any folder: the check then runs as nobody, in a child process
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::geteuid() == 0) {
      ::chown(s.root.c_str(), 65534, 65534);
      ::chown(s.dir.c_str(), 65534, 65534);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    }
    try {
      (void)checkpoint::newest(s.dir);
    } catch (const Error& e) {
      const std::string m = e.what();
      ::_exit(m.find("the checkpoint directory") != std::string::npos && m.find("Permission denied") != std::string::npos &&
              m.find(s.dir.string()) != std::string::npos ? 0 : 4);
    }
    ::_exit(5);  // no error: the run would have started from step 0
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  fs::permissions(s.dir, fs::perms::owner_all);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
}
}  // namespace test_runtime_planted
