// Token datasets and the window loader: text is bytes, binary ids are checked, every window is
// served once per epoch and R shards together read the single-device batches; io.slicing divides
// files among the data-parallel ranks.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "../../examples/gpt/gpt.hpp"
#include "../helpers.hpp"

using namespace epl;

namespace test_runtime_data {

TEST_SUITE("cpu") {
// Text is bytes: every one of the 256 byte values is an id in [0, 256), and a GPT with a
// vocabulary of 256 trains on them (bytes >= 128 once became negative ids through a signed char).
TEST_CASE("text of all 256 byte values: ids 0..255, and a byte-level GPT trains on it") {
  auto path = std::filesystem::temp_directory_path() / "epl_all_bytes.txt";
  {
    std::ofstream f(path, std::ios::binary);
    for (int rep = 0; rep < 8; ++rep)
      for (int b = 0; b < 256; ++b) f.put(static_cast<char>((b * 37 + rep) % 256));
  }
  auto text = data::TokenDataset::from_text({path});
  REQUIRE(text.size() == 8 * 256);
  std::vector<int> count(256);
  for (auto id : text.tokens()) {
    REQUIRE(id >= 0);
    REQUIRE(id < 256);
    ++count[static_cast<std::size_t>(id)];
  }
  CHECK(std::count(count.begin(), count.end(), 8) == 256);  // each byte value exactly 8 times
  CHECK(text.tokens()[1] == 37);
  CHECK(text.tokens()[7] == 259 % 256);
  gpt::Shape s{.vocab = 256, .context = 16, .layers = 1, .heads = 2, .dim = 16};
  Trainer<gpt::Gpt, optim::SGD> t(test::cpu(), Config{}, gpt::make_gpt(s), optim::SGD({.lr = 0.1}));
  data::WindowLoader loader(text, 16, 8, 3);
  for (int step = 0; step < 20; ++step) CHECK(std::isfinite(t.step(loader.next(test::cpu()))));  // 20 steps: > 1 epoch
  std::filesystem::remove(path);
}

TEST_CASE("window loader: every window once per epoch, deterministic per seed") {
  std::vector<std::int32_t> t(101);
  for (int i = 0; i < 101; ++i) t[i] = i;
  auto ds = data::TokenDataset::from_tokens(t, 101);
  data::WindowLoader a(ds, 10, 2, 9), b(ds, 10, 2, 9), c(ds, 10, 2, 10);
  std::vector<int> seen;
  bool differs = false;
  for (int i = 0; i < 5; ++i) {
    Batch x = a.next(test::cpu()), y = b.next(test::cpu()), z = c.next(test::cpu());
    CHECK(test::values<std::int32_t>(x.inputs) == test::values<std::int32_t>(y.inputs));
    differs |= test::values<std::int32_t>(x.inputs) != test::values<std::int32_t>(z.inputs);
    for (int r = 0; r < 2; ++r) {
      auto row = x.inputs.span<std::int32_t>().subspan(r * 10, 10);
      seen.push_back(row[0] / 10);
      CHECK(x.targets.span<std::int32_t>()[r * 10 + 9] == row[9] + 1);  // targets shift by one
    }
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(differs);
  CHECK(a.epoch() == 0);
  (void)a.next(test::cpu());
  CHECK(a.epoch() == 1);
}

TEST_CASE("window loader shards: R ranks together read exactly the single-device batches") {
  std::vector<std::int32_t> t(401);
  for (int i = 0; i < 401; ++i) t[i] = i;
  auto ds = data::TokenDataset::from_tokens(t, 401);
  data::WindowLoader whole(ds, 10, 4, 5);
  std::vector<data::WindowLoader> parts;
  for (int r = 0; r < 4; ++r) parts.emplace_back(ds, 10, 4, 5, data::Shard{r, 4});
  for (int step = 0; step < 25; ++step) {  // 40 windows: two and a half epochs
    auto all = test::values<std::int32_t>(whole.next(test::cpu()).inputs);
    std::vector<double> joined;
    for (auto& p : parts) {
      auto v = test::values<std::int32_t>(p.next(test::cpu()).inputs);
      joined.insert(joined.end(), v.begin(), v.end());
    }
    CHECK(joined == all);
  }
  CHECK_THROWS_WITH_AS(data::WindowLoader(ds, 10, 6, 5, data::Shard{0, 4}),
                       doctest::Contains("global batch of 6 windows does not divide among 4 data-parallel ranks"), Error);
  CHECK_THROWS_WITH_AS(data::WindowLoader(ds, 10, 4, 5, data::Shard{4, 4}), doctest::Contains("rank 4 of 4 ranks is not valid"), Error);
}

TEST_CASE("data files: text bytes, binary ids, corrupt and missing files") {
  auto dir = std::filesystem::temp_directory_path() / "epl_data_test";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "a.txt") << "hello"; }
  auto text = data::TokenDataset::from_text({dir / "a.txt"});
  CHECK(text.size() == 5);
  CHECK(text.vocab_size() == 256);
  CHECK(text.tokens()[1] == 'e');
  { std::ofstream f(dir / "ids.bin", std::ios::binary); std::int32_t v[] = {3, 70000, 1}; f.write(reinterpret_cast<char*>(v), sizeof v); }
  auto bin = data::TokenDataset::from_binary(dir / "ids.bin");
  CHECK(bin.tokens() == std::vector<std::int32_t>{3, 70000, 1});
  CHECK(bin.vocab_size() == 70001);
  { std::ofstream(dir / "bad.bin", std::ios::binary) << "abcde"; }
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary(dir / "bad.bin"), doctest::Contains("is corrupt: 5 bytes"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir / "missing.txt"}), doctest::Contains("cannot open data file"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir}), doctest::Contains("is a directory; name the files inside it"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary(dir), doctest::Contains("is a directory"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({"/dev/null/x"}), doctest::Contains("data file"), Error);
  CHECK_THROWS_WITH_AS(data::WindowLoader(text, 4, 2, 0), doctest::Contains("holds 1 window of 4 tokens, fewer than one batch of 2"),
                       Error);
  const std::string named = "(" + (dir / "a.txt").string() + ")";
  CHECK_THROWS_WITH_AS(data::WindowLoader(text, 4, 2, 0), doctest::Contains(named.c_str()), Error);
  // empty files (found by the stranger): named at once, not as a dataset of 0 tokens later; an
  // empty file beside one with text is read as no bytes
  { std::ofstream(dir / "empty.txt"); std::ofstream(dir / "empty.bin"); }
  const std::string empty = "data file " + (dir / "empty.txt").string() + " is empty; name a file of text";
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir / "empty.txt"}), doctest::Contains(empty.c_str()), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text({dir / "empty.txt", dir / "empty.txt"}), doctest::Contains("are all empty"), Error);
  CHECK(data::TokenDataset::from_text({dir / "empty.txt", dir / "a.txt"}).size() == 5);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary(dir / "empty.bin"), doctest::Contains("empty.bin\" is empty; name a file of int32"), Error);
  // text or ids in memory alike (a stranger's finding: an empty span made a dataset of 0 tokens)
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text_bytes(std::span<const char>()),
                       doctest::Contains("from_text_bytes: the text is empty"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_text_bytes(""), doctest::Contains("from_text_bytes: the text is empty"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_tokens({}, 5), doctest::Contains("from_tokens: no token ids; give the ids"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("token bytes in memory: every int32 id, and the file readers' messages") {
  // id 2^31 - 1 once overflowed int32 computing the vocabulary (found by test/fuzz/tokens_fuzz.cpp)
  const char max_id[] = {5, 0, 0, 0, '\xff', '\xff', '\xff', '\x7f'};
  auto bin = data::TokenDataset::from_binary_bytes(max_id, "max.bin");
  CHECK(bin.tokens() == std::vector<std::int32_t>{5, 2147483647});
  CHECK(bin.vocab_size() == std::int64_t{1} << 31);
  const char odd[] = {1, 0, 0, 0, 1}, negative[] = {1, 0, 0, 0, '\xff', '\xff', '\xff', '\xff'};
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary_bytes(odd, "odd.bin"),
                       doctest::Contains("token file \"odd.bin\" is corrupt: 5 bytes is not a whole number of int32 ids"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_binary_bytes(negative, "neg.bin"),
                       doctest::Contains("token file \"neg.bin\" is corrupt: negative id -1 at position 1"), Error);
  auto text = data::TokenDataset::from_text_bytes(std::string_view("\xc3\xa9!"));
  CHECK(text.tokens() == std::vector<std::int32_t>{195, 169, 33});
  CHECK(text.vocab_size() == 256);
}

TEST_CASE("io.slicing: files divided among ranks, balanced, dropped or uneven, and too few files") {
  std::vector<std::filesystem::path> files;
  for (int i = 0; i < 10; ++i) files.emplace_back("part-" + std::to_string(i));
  Config off;
  CHECK(data::slice_files(files, {1, 4}, off).size() == 10);  // no slicing: every rank every file
  Config on;
  on.set("io.slicing", true);
  CHECK(data::slice_files(files, {1, 5}, on) == std::vector<std::filesystem::path>{"part-1", "part-6"});
  CHECK_THROWS_WITH_AS(data::slice_files(files, {0, 4}, on),
                       doctest::Contains("10 files do not divide among 4 data-parallel ranks; set io.drop_last_files=true to drop the last 2"), Error);
  Config drop = on;
  drop.set("io.drop_last_files", true);
  std::set<std::string> seen;
  for (int r = 0; r < 4; ++r) {
    auto mine = data::slice_files(files, {r, 4}, drop);
    CHECK(mine.size() == 2);
    for (auto& f : mine) CHECK(seen.insert(f.string()).second);  // no file read twice
  }
  CHECK(seen.size() == 8);
  Config uneven = on;
  uneven.set("io.unbalanced_io_slicing", true);
  std::size_t total = 0;
  for (int r = 0; r < 4; ++r) total += data::slice_files(files, {r, 4}, uneven).size();
  CHECK(total == 10);  // none skipped
  CHECK(data::slice_files(files, {0, 4}, uneven).size() == 3);
  CHECK_THROWS_WITH_AS(data::slice_files({"a", "b"}, {0, 3}, on), doctest::Contains("2 files for 3 data-parallel ranks"), Error);
  CHECK_THROWS_WITH_AS(data::slice_files({"a"}, {0, 2}, on), doctest::Contains("io.slicing: 1 file for 2 data-parallel ranks"), Error);
  // ranks that list the files in different orders (a directory's order differs between machines)
  // still read each file once: they are sliced by name (a stranger's rank read f0 and f2 twice)
  std::vector<std::filesystem::path> reversed(files.rbegin(), files.rend());
  std::set<std::string> once;
  for (int r = 0; r < 5; ++r)
    for (auto& f : data::slice_files(r % 2 ? reversed : files, {r, 5}, on)) CHECK(once.insert(f.string()).second);
  CHECK(once.size() == 10);
  // a file listed twice (in two spellings) is refused: two ranks trained on it as their own shares (a stranger's finding)
  CHECK_THROWS_WITH_AS(data::slice_files({"data/part0.txt", "data/part1.txt", "data/./part0.txt", "data/part2.txt"}, {0, 2}, on),
                       doctest::Contains("io.slicing: \"data/part0.txt\" is listed twice; each rank reads its own files, each file once"),
                       Error);
  // both ways of handling a remainder at once is an error, not one silently winning
  Config both = drop;
  both.set("io.unbalanced_io_slicing", true);
  CHECK_THROWS_WITH_AS(data::slice_files(files, {0, 4}, both),
                       doctest::Contains("io.drop_last_files and io.unbalanced_io_slicing are both set"), Error);
  // a key for a remainder is read when the count divides too, so a fleet-wide setting is accepted
  // (it was refused as a key nothing read)
  Config fleet = uneven;
  (void)data::slice_files(std::vector<std::filesystem::path>(files.begin(), files.begin() + 8), {0, 4}, fleet);
  CHECK_NOTHROW(fleet.check_all_read());
}

TEST_CASE("window loader of a rank's own data (io.slicing): its rows of each global batch from its own order, each window once an epoch") {
  // a stranger's ranks each read their own files through a shard of the global order: each
  // epoch read a quarter of its windows twice and another quarter never
  std::vector<std::vector<double>> seen(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::int32_t> t(81);
    for (int i = 0; i < 81; ++i) t[i] = 1000 * r + i;  // 8 windows of 10, this rank's own
    auto ds = data::TokenDataset::from_tokens(t, 2000);
    data::WindowLoader mine(ds, 10, 4, 5, data::Shard{r, 2, {}, 1, true});
    for (int step = 0; step < 4; ++step) {  // 2 rows a step: one epoch of this rank's 8 windows
      const auto v = test::values<std::int32_t>(mine.next(test::cpu()).inputs);
      CHECK(v.size() == 20);
      for (std::size_t w = 0; w < v.size(); w += 10) seen[static_cast<std::size_t>(r)].push_back(v[w]);
    }
    CHECK(mine.epoch() == 0);
    (void)mine.next(test::cpu());
    CHECK(mine.epoch() == 1);
    std::sort(seen[static_cast<std::size_t>(r)].begin(), seen[static_cast<std::size_t>(r)].end());
    std::vector<double> expect;
    for (int w = 0; w < 8; ++w) expect.push_back(1000 * r + 10 * w);
    CHECK(seen[static_cast<std::size_t>(r)] == expect);
  }
  // a rank's own data needs its share of a batch, not a whole one
  std::vector<std::int32_t> few(31, 1);
  auto small = data::TokenDataset::from_tokens(few, 2);
  CHECK_NOTHROW(data::WindowLoader(small, 10, 6, 5, data::Shard{0, 2, {}, 1, true}));
  CHECK_THROWS_WITH_AS(data::WindowLoader(small, 10, 8, 5, data::Shard{0, 2, {}, 1, true}),
                       doctest::Contains("holds 3 windows of 10 tokens, fewer than this rank's share of a batch, 4"), Error);
}

TEST_CASE("a shard of a batch that does not divide among the ranks is an error, never rows read by no rank") {
  CHECK((data::Shard{2, 4}.rows_of(8)) == 2);
  CHECK((data::Shard{2, 4}.first_of(8)) == 4);
  CHECK_THROWS_WITH_AS((void)(data::Shard{1, 3}.rows_of(8)), doctest::Contains("its last 2 rows would be read by no rank"), Error);
  CHECK_THROWS_WITH_AS((void)(data::Shard{1, 3}.rows_of(7)), doctest::Contains("its last row would be read by no rank; make the batch a "
                                                                                "multiple of 3 (or give cluster.rank_speeds"), Error);
  // fewer rows than ranks: uneven shares do not help (a stranger was sent to cluster.rank_speeds, which then refused the batch)
  CHECK_THROWS_WITH_AS((void)(data::Shard{0, 4}.rows_of(2)),
                       doctest::Contains("make the batch a multiple of 4 (uneven shares, cluster.rank_speeds, still give each rank a row)"),
                       Error);
  CHECK_THROWS_WITH_AS((void)(data::Shard{1, 3}.first_of(8)), doctest::Contains("make the batch a multiple of 3"), Error);
  CHECK((data::Shard{1, 3, {1, 1, 2}}.rows_of(8)) == 2);  // uneven shares by weight take every row
}

TEST_CASE("a shard that is not one: a rank out of range, a weight that is not a positive finite number, a quantum of 0") {
  CHECK_THROWS_WITH_AS((void)(data::Shard{-1, 2}.rows_of(8)), doctest::Contains("data-parallel rank -1 of 2 ranks is not a rank"), Error);
  CHECK_THROWS_WITH_AS((void)(data::Shard{2, 2}.first_of(8)), doctest::Contains("data-parallel rank 2 of 2 ranks is not a rank"), Error);
  for (double bad : {-1.0, 0.0, std::nan(""), HUGE_VAL})
    CHECK_THROWS_WITH_AS((void)(data::Shard{0, 2, {1, bad}}.rows_of(8)),
                         doctest::Contains("data-parallel rank 1's share weight is"), Error);
  CHECK_THROWS_WITH_AS((void)(data::Shard{0, 2, {1, 1}, 0}.rows_of(8)), doctest::Contains("quantum is 0"), Error);
  auto ds = data::TokenDataset::from_tokens(std::vector<std::int32_t>(200, 3), 5);
  CHECK_THROWS_WITH_AS(data::WindowLoader(ds, 10, 4, 5, data::Shard{0, 2, {1, -1}}), doctest::Contains("must be a positive finite number"),
                       Error);
}

TEST_CASE("ids in memory outside their vocabulary, and a string literal's terminating NUL") {
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_tokens({1, 2, 300}, 256),
                       doctest::Contains("id 300 at position 2 is not in the vocabulary of 256 ids"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_tokens({1, -2, 3}, 256), doctest::Contains("id -2 at position 1"), Error);
  CHECK_THROWS_WITH_AS(data::TokenDataset::from_tokens({1}, -5), doctest::Contains("a vocabulary of -5 ids"), Error);
  // a literal is its text, as a file of it or a std::string holds it: no id 0 at the end
  const auto literal = data::TokenDataset::from_text_bytes("abc");
  const auto string = data::TokenDataset::from_text_bytes(std::string("abc"));
  CHECK(literal.tokens() == std::vector<std::int32_t>{97, 98, 99});
  CHECK(literal.fingerprint() == string.fingerprint());
  const char bytes[] = {'a', 'b'};  // an array with no terminator keeps every byte
  CHECK(data::TokenDataset::from_text_bytes(bytes).size() == 2);
}

}
}  // namespace test_runtime_data
