// Stores: values cross threads and processes' files, runs stay apart, a missing key times out.
#include <thread>
#include <unistd.h>

#include "../helpers.hpp"
#include "epl/comm/store.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("store: in-process values reach a waiting thread; a missing key times out by name") {
  comm::InProcessStore s(std::chrono::milliseconds(200));
  std::vector<char> got;
  std::thread reader([&] { got = s.get("nccl/world/id"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  s.set("nccl/world/id", {'a', 'b', 'c'});
  reader.join();
  CHECK(got == std::vector<char>{'a', 'b', 'c'});
  CHECK_THROWS_WITH_AS(s.get("never"), doctest::Contains("store key \"never\" was not published within 200 ms"), Error);
}

TEST_CASE("store: files, keyed per run, written whole") {
  auto dir = std::filesystem::temp_directory_path() / ("epl_store_" + std::to_string(::getpid()));
  comm::FileStore a(dir, "run1", std::chrono::milliseconds(300)), b(dir, "run2", std::chrono::milliseconds(100));
  std::vector<char> big(100000, 'x');
  std::vector<char> got;
  std::thread reader([&] { got = comm::FileStore(dir, "run1").get("nccl/world/id"); });
  a.set("nccl/world/id", big);
  reader.join();
  CHECK(got == big);
  CHECK_THROWS_WITH_AS(b.get("nccl/world/id"), doctest::Contains("key \"nccl/world/id\" of run \"run2\" did not appear"), Error);
  CHECK_THROWS_WITH_AS(comm::FileStore(dir, "a/b"), doctest::Contains("contain no '/'"), Error);
  a.clear();
  CHECK_THROWS_AS(a.get("nccl/world/id"), Error);
  std::filesystem::remove_all(dir);
}
}
