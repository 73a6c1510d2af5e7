#include <Eigen/Core>

#include <bit>
#include <cstdio>
#include <fstream>
#include <cmath>
#include <limits>

#include "../helpers.hpp"
#include "epl/core/timeline.hpp"
#include "epl/device/cpu/sgemm.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("shape: extents, rows, errors") {
  Shape s{2, 3, 4};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 24);
  CHECK(s.rows() == 6);
  CHECK(Shape{3, 0}.rows() == 3);  // rows of no columns are still rows (a stranger's [3, 0] was reported as [0, 0])
  CHECK(Shape{0, 4}.rows() == 0);
  CHECK(Shape{5}.rows() == 1);
  CHECK(s.back() == 4);
  CHECK(s[-1] == 4);
  CHECK(s.with_back(5) == Shape{2, 3, 5});
  CHECK(s.str() == "[2, 3, 4]");
  CHECK_THROWS_WITH_AS(s[3], doctest::Contains("dimension 3 out of range"), Error);
  CHECK_THROWS_WITH_AS(Shape({1, -2}), doctest::Contains("negative extent -2"), Error);
  // extents whose product overflows (it wrapped to 0 elements, and a tensor of 0 bytes was made)
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(Shape({big, big}), doctest::Contains("shape [1099511627776, 1099511627776] has more than 2^56 elements"), Error);
  CHECK_THROWS_WITH_AS(Shape({std::int64_t{1} << 62, 4}), doctest::Contains("has more than 2^56 elements"), Error);
  CHECK_THROWS_WITH_AS((void)test::cpu().empty({big, big}, DType::kF32), doctest::Contains("has more than 2^56 elements"), Error);
  CHECK_THROWS_WITH_AS((void)Shape({big, 2}).with_back(big), doctest::Contains("has more than 2^56 elements"), Error);
  CHECK_THROWS_WITH_AS((void)Shape({2, big}).with_front(big), doctest::Contains("has more than 2^56 elements"), Error);
  CHECK_THROWS_WITH_AS((void)s.with_front(-1), doctest::Contains("negative extent -1"), Error);
  CHECK_THROWS_WITH_AS(Shape({big, big, 0}), doctest::Contains("has more than 2^56 elements"), Error);  // numel() would overflow on the way
  CHECK(Shape({big, 0, 1024}).numel() == 0);
  CHECK(Shape({Shape::kMaxElements}).numel() == Shape::kMaxElements);
}

TEST_CASE("tensor: views and slices share storage without copying") {
  Tensor t = test::tensor({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor v = t.view({2, 4});
  CHECK(v.raw() == t.raw());
  Tensor s = t.slice(1, 3);
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.span<float>()[0] == 2.0f);
  s.span<float>()[0] = 42;
  CHECK(t.span<float>()[2] == 42.0f);
  CHECK_THROWS_WITH_AS((void)t.view({3, 3}), doctest::Contains("cannot view [4, 2]"), Error);
  CHECK_THROWS_WITH_AS((void)t.slice(3, 5), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS((void)t.data<double>(), doctest::Contains("tensor of dtype f32 read as f64"), Error);
  CHECK_THROWS_WITH_AS((void)Tensor{}.raw(), doctest::Contains("undefined"), Error);
}

TEST_CASE("memory: accounting per device and category, current and peak") {
  device::Cpu dev(31);  // its own accounting index, untouched by other tests
  const auto base = memory_stats(dev.id());
  {
    Tensor p = dev.empty({256}, DType::kF32, MemoryCategory::kParameters);   // 1 KiB
    Tensor g = dev.empty({512}, DType::kF64, MemoryCategory::kGradients);    // 4 KiB
    auto s = memory_stats(dev.id());
    CHECK(s.current_of(MemoryCategory::kParameters) - base.current_of(MemoryCategory::kParameters) == 1024);
    CHECK(s.current_of(MemoryCategory::kGradients) - base.current_of(MemoryCategory::kGradients) == 4096);
    CHECK(s.total_current - base.total_current == 5120);
    {
      Tensor a = dev.empty({1000}, DType::kI32, MemoryCategory::kActivations);
      CHECK(memory_stats(dev.id()).current_of(MemoryCategory::kActivations) == 4000);
    }
    {  // an empty tensor is charged nothing (a stage of no parameters was charged 1 byte, which the planner's exact prediction is not)
      Tensor none = dev.empty({0, 8}, DType::kF32, MemoryCategory::kActivations);
      CHECK(none.data<float>() != nullptr);
      CHECK(memory_stats(dev.id()).current_of(MemoryCategory::kActivations) == 0);
    }
    auto after = memory_stats(dev.id());
    CHECK(after.current_of(MemoryCategory::kActivations) == 0);
    CHECK(after.peak_of(MemoryCategory::kActivations) == 4000);
    CHECK(after.total_peak == 9120);
  }
  CHECK(memory_stats(dev.id()).total_current == 0);
  memory_account(dev.id()).reset_peaks();
  CHECK(memory_stats(dev.id()).total_peak == 0);
  CHECK(memory_stats(dev.id()).reserved > 0);  // blocks stay cached for the next step
  host_allocator(31).release_cached();
  CHECK(memory_stats(dev.id()).reserved == 0);
}

// The smaps entry of the mapping that holds p: its field (e.g. "THPeligible:"), or "" if none.
std::string smaps_field(const void* p, const std::string& field) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) inside = lo <= at && at < hi;
    else if (inside && line.rfind(field, 0) == 0) return line;
  }
  return "";
}

TEST_CASE("memory: a host block of 2 MiB or more starts on a huge page and asks for transparent huge pages") {
  auto& pool = host_allocator(32);
  void* small = pool.allocate(4096);
  CHECK(reinterpret_cast<std::uintptr_t>(small) % 64 == 0);
  const std::size_t bytes = 6 * detail::kHugePage + 4096;  // 3 whole huge pages and a 4 KiB tail
  void* big = pool.allocate(bytes);
  CHECK(reinterpret_cast<std::uintptr_t>(big) % detail::kHugePage == 0);
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.find("[madvise]") != std::string::npos) {  // Debian's default: only advised memory gets huge pages
    CHECK(smaps_field(big, "THPeligible:").find('1') != std::string::npos);
    CHECK(smaps_field(static_cast<char*>(big) + bytes - 1, "THPeligible:").find('0') != std::string::npos);  // not the tail
    CHECK(smaps_field(small, "THPeligible:").find('0') != std::string::npos);
  } else {
    MESSAGE("transparent huge pages are " << mode << " here: only the alignment is checked");
  }
  // the workspace the packed GEMMs pack into comes from the same place
  detail::cpu::sgemm::Workspace w;
  const float* packed = detail::cpu::sgemm::Workspace::grow<float>(w.b, w.b_size, 2 * detail::kHugePage / 4);
  CHECK(reinterpret_cast<std::uintptr_t>(packed) % detail::kHugePage == 0);
  pool.deallocate(small, 4096);
  pool.deallocate(big, bytes);
  pool.release_cached();
}

// A stranger's 5000 thread ranks each took a model's worth while it fitted, together exhausted the
// machine, and the kernel killed the process without a word. A large block is weighed against the
// memory left before it is taken, one at a time: past it, the error names the tensor and the memory.
TEST_CASE("memory: a host block larger than the memory left is refused naming the tensor, not left to the kernel's OOM killer") {
  const std::int64_t left = detail::available_host_bytes();
  if (left < 0) {
    MESSAGE("this machine shows neither /proc/meminfo nor a cgroup v2 limit: nothing to check");
    return;
  }
  CHECK(left > detail::kHostReserve);  // the test itself runs
  device::Cpu dev(33);
  const std::int64_t rows = (left + (std::int64_t{1} << 30)) / 4 / 1024;  // 1 GiB more than is left
  const std::string names = "a f32 [" + std::to_string(rows) + ", 1024] tensor of activations: host allocation of ";
  CHECK_THROWS_WITH_AS((void)dev.empty({rows, 1024}, DType::kF32, MemoryCategory::kActivations), doctest::Contains(names.c_str()), Error);
  CHECK_THROWS_WITH_AS((void)dev.empty({rows, 1024}, DType::kF32), doctest::Contains("MiB available); reduce the batch or the model, the thread "
                                                                                   "ranks that share this memory"), Error);
  CHECK(memory_stats(dev.id()).total_current == 0);  // nothing charged
  // one that fits is taken, filled (in memory before the next is weighed) and usable
  Tensor fits = dev.zeros({1024, 1024}, DType::kF32);
  CHECK(fits.span<float>()[1024 * 1024 - 1] == 0.0f);
}

namespace {
// Raw memory of a test's own, full at `limit` bytes: what the caching allocator draws and returns.
struct LimitedRaw {
  static constexpr bool kRetryAfterRelease = true;
  static inline std::size_t held = 0, limit = 0;
  static inline int released_calls = 0;
  static void* allocate(DeviceId, std::size_t size) {
    EPL_CHECK(held + size <= limit, "the test's memory is full");
    held += size;
    auto* p = static_cast<std::size_t*>(std::malloc(sizeof(std::size_t)));
    *p = size;
    return p;
  }
  static void release(void* p) noexcept {
    held -= *static_cast<std::size_t*>(p);
    std::free(p);
  }
  static void released() noexcept { ++released_calls; }
};
}  // namespace

TEST_CASE("memory: the caching allocator gives back what no allocation since the last trim needed, and retries a failed draw") {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  LimitedRaw::limit = 10 * kMiB;
  CachingAllocator<LimitedRaw> a(DeviceId{DeviceKind::kHost, 900});
  const auto reserved = [&] { return memory_stats(a.device()).reserved; };
  // a step's sizes recur every step: kept
  void* first = a.allocate(2 * kMiB);
  a.deallocate(first, 2 * kMiB);
  CHECK(a.trim() == 0);  // drawn since the last trim
  const auto step = [&] {
    void* p = a.allocate(2 * kMiB);
    CHECK(p == first);
    a.deallocate(p, 2 * kMiB);
  };
  for (int i = 0; i < 3; ++i) {
    step();
    CHECK(a.trim() == 0);
  }
  // a size drawn once (start-up's whole model under ZeRO-3) goes at the second trim after its use
  void* once = a.allocate(4 * kMiB);
  a.deallocate(once, 4 * kMiB);
  step();
  CHECK(a.trim() == 0);
  CHECK(LimitedRaw::held == 6 * kMiB);
  step();
  CHECK(a.trim() == 4 * kMiB);
  CHECK(LimitedRaw::held == 2 * kMiB);
  CHECK(reserved() == static_cast<std::int64_t>(2 * kMiB));
  CHECK(LimitedRaw::released_calls == 1);
  // of three cached blocks of a size, the one that stayed cached throughout goes
  void* three[3];
  for (auto& p : three) p = a.allocate(kMiB);
  for (auto* p : three) a.deallocate(p, kMiB);
  step();
  CHECK(a.trim() == 0);
  void* two[2] = {a.allocate(kMiB), a.allocate(kMiB)};
  for (auto* p : two) a.deallocate(p, kMiB);
  step();
  CHECK(a.trim() == kMiB);
  CHECK(LimitedRaw::held == 4 * kMiB);
  // a draw the device refuses is tried again once the cache is given back
  void* big = a.allocate(7 * kMiB);
  CHECK(LimitedRaw::held == 7 * kMiB);
  CHECK(reserved() == static_cast<std::int64_t>(7 * kMiB));
  // with nothing cached to give back, the device's error stands
  CHECK_THROWS_WITH_AS(a.allocate(4 * kMiB), doctest::Contains("the test's memory is full"), Error);
  a.deallocate(big, 7 * kMiB);
  CHECK(a.release_cached() == 7 * kMiB);
  CHECK(LimitedRaw::held == 0);
  CHECK(reserved() == 0);
}

TEST_CASE("dtype: casts through half and bfloat16 round to the nearest representable value") {
  auto& d = test::cpu();
  Tensor x = test::tensor({4}, {1.0, -2.5, 3.14159265, 65504.0});
  Tensor h = d.empty({4}, DType::kF16), b = d.empty({4}, DType::kBF16), back = d.empty({4}, DType::kF32);
  d.cast(x, h);
  d.cast(h, back);
  CHECK(test::values(back) == std::vector<double>{1.0, -2.5, 3.140625, 65504.0});
  d.cast(x, b);
  d.cast(b, back);
  CHECK(test::values(back) == std::vector<double>{1.0, -2.5, 3.140625, 65536.0});
  CHECK(size_of(DType::kBF16) == 2);
  CHECK(name_of(DType::kI64) == "i64");
  // every dtype to every other (i32 to f32 was refused, though the docs said casts take every dtype)
  Tensor ids = test::tensor<std::int32_t>({4}, {0, 7, -3, 2147483647});
  d.cast(ids, back);
  CHECK(test::values(back) == std::vector<double>{0.0, 7.0, -3.0, 2147483648.0});  // the nearest float
  Tensor wide = d.empty({4}, DType::kI64);
  d.cast(test::tensor({4}, {1.9, -2.9, 0.0, 1e6}), wide);
  CHECK(test::values<std::int64_t>(wide) == std::vector<double>{1.0, -2.0, 0.0, 1e6});  // truncated, as static_cast does
  d.cast(ids, h);
  d.cast(h, back);
  CHECK(test::values(back) == std::vector<double>{0.0, 7.0, -3.0, std::numeric_limits<float>::infinity()});
}

// epl's own 16-bit types (core/half.hpp) convert bit for bit as Eigen's did: every half and bfloat16
// value to float, and floats of every exponent to both (round to nearest even, overflow to infinity,
// subnormals). A NaN stays a NaN of its sign; its payload is not compared, as Eigen's differs by
// compiler (clang's build takes F16C's, which keeps the payload's top bits; g++'s does not).
TEST_CASE("half and bfloat16: the conversions equal Eigen's on every value") {
  auto bits = [](auto v) { return Eigen::numext::bit_cast<std::uint16_t>(v); };
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto u = static_cast<std::uint16_t>(b);
    const float ours = static_cast<float>(half::from_bits(u)), eigen = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(u));
    const float ours_b = static_cast<float>(bfloat16::from_bits(u)), eigen_b = static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(u));
    if (std::isnan(eigen)) REQUIRE(std::isnan(ours));
    else REQUIRE(std::bit_cast<std::uint32_t>(ours) == std::bit_cast<std::uint32_t>(eigen));
    if (std::isnan(eigen_b)) REQUIRE(std::isnan(ours_b));
    else REQUIRE(std::bit_cast<std::uint32_t>(ours_b) == std::bit_cast<std::uint32_t>(eigen_b));
  }
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 2'000'000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(state >> 32));
    if (std::isnan(f)) {
      const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
      REQUIRE(((half(f).bits & 0x7c00) == 0x7c00 && (half(f).bits & 0x3ff) != 0 && (half(f).bits & 0x8000) == sign));
      REQUIRE(((bfloat16(f).bits & 0x7f80) == 0x7f80 && (bfloat16(f).bits & 0x7f) != 0 && (bfloat16(f).bits & 0x8000) == sign));
      continue;
    }
    REQUIRE(half(f).bits == bits(Eigen::half(f)));
    REQUIRE(bfloat16(f).bits == bits(Eigen::bfloat16(f)));
  }
  CHECK(half(65519.0f).bits == 0x7bff);  // below the midpoint to 65536: the largest finite half
  CHECK(half(65520.0f).bits == 0x7c00);  // at it: ties to even, which is infinity
  CHECK(half(5.96e-8f).bits == 0x0001);  // the smallest subnormal
  CHECK(bfloat16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fc0);
}

TEST_CASE("error: a program's own epl::Error is located where it is thrown") {
  const Error e("my layer's check failed");
  CHECK(e.detail() == "my layer's check failed");
  CHECK(std::string(e.what()).find("core.test.cpp:") != std::string::npos);
}

TEST_CASE("error: a quoted value shows on one line, its control characters escaped, and long ones cut") {
  CHECK(detail::quoted("a\nb\tc\rd\x1b") == "\"a\\nb\\tc\\rd\\x1b\"");
  CHECK(detail::quoted("plain, café") == "\"plain, café\"");  // UTF-8 passes as it is
  CHECK(detail::quoted(std::string(70, 'x')) == "\"" + std::string(64, 'x') + "...\" (70 characters)");
  CHECK(detail::printable("line 1\nline 2") == "line 1\\nline 2");
}

TEST_CASE("random: counter-based values are pure functions of (key, index)") {
  auto k = stream_key(5, 3);
  CHECK(uniform01(k, 10) == uniform01(k, 10));
  CHECK(uniform01(k, 10) != uniform01(k, 11));
  CHECK(stream_key(5, 3) != stream_key(5, 4));
  double mean = 0, sq = 0;
  for (int i = 0; i < 20000; ++i) {
    double z = normal01(k, i);
    mean += z / 20000;
    sq += z * z / 20000;
  }
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(sq - 1) < 0.05);
}

TEST_CASE("error: message carries the location and what to do") {
  try {
    EPL_CHECK(1 + 1 == 3, "arithmetic broke; fix ", 42);
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("core.test.cpp") != std::string::npos);
    CHECK(e.detail() == "arithmetic broke; fix 42");
  }
}

TEST_CASE("timeline: each rank's clock is measured against rank 0's in the round where both were quickest") {
  // Rank 1's clock runs 1,000,000 ns ahead of rank 0's. In round 0 rank 1 was descheduled after the
  // all-gather (its own clock read 4.9 ms late); a barrier and one reading of each clock, as the
  // tracer did, put it that far out, and receives were drawn before their sends (a stranger's finding).
  std::vector<ClockRound> rounds{
      {{0, 1'000'003}, {12, 5'900'003}},               // wide on rank 1
      {{10'000, 1'010'002}, {10'010, 1'010'012}},      // both within 10 ns: offset (2'020'014 - 20'010) / 2
      {{20'000, 1'019'000}, {20'500, 1'021'000}},      // wide on both
  };
  CHECK(clock_offset(rounds, 0) == 0);
  CHECK(clock_offset(rounds, 1) == 1'000'002);
  rounds[1].end[0] = 900'000;  // now rank 0 was slow in that round: round 2 is the narrowest
  CHECK(clock_offset(rounds, 1) == ((1'019'000 + 1'021'000) - (20'000 + 20'500)) / 2);
  // thread ranks share one clock: the offset is 0 whatever the rounds' widths
  const std::vector<ClockRound> shared{{{100, 140}, {150, 152}}, {{200, 201}, {203, 202}}};
  CHECK(std::abs(clock_offset(shared, 1)) <= 1);
  CHECK_THROWS_AS((void)clock_offset(shared, 2), std::out_of_range);
}

TEST_CASE("timeline: spans survive the exchange between ranks and become Chrome trace events, one process per rank") {
  Timeline t;
  const auto t0 = Timeline::Clock::now();
  t.set_origin(t0);
  t.add("F3.1", "forward", Span::Lane::kCompute, t0 + std::chrono::microseconds(10), t0 + std::chrono::microseconds(35));
  t.add("all_reduce 0", "all_reduce", Span::Lane::kCommunication, t0 + std::chrono::microseconds(40), t0 + std::chrono::microseconds(90));
  {
    SpanScope off(nullptr, "never", "forward");  // tracing off records nothing
    SpanScope on(&t, "B\"odd\"", "backward");
  }
  auto back = Timeline::deserialize(t.serialize());
  REQUIRE(back.size() == 3);
  CHECK(back[0].name == "F3.1");
  CHECK(back[0].category == "forward");
  CHECK(back[0].start_us == doctest::Approx(10));
  CHECK(back[0].duration_us == doctest::Approx(25));
  CHECK(back[1].name == "all_reduce 0");  // names may hold spaces
  CHECK(back[1].lane == Span::Lane::kCommunication);
  CHECK(back[2].name == "B\"odd\"");
  const std::string json = Timeline::chrome_json({back, back});
  CHECK(json.find(R"({"ph":"M","pid":1,"name":"process_name","args":{"name":"rank 1"}})") != std::string::npos);
  CHECK(json.find(R"("pid":0,"tid":0,"ts":10.000,"dur":25.000,"cat":"forward","name":"F3.1")") != std::string::npos);
  CHECK(json.find(R"("name":"B\"odd\"")") != std::string::npos);  // quotes escaped
  CHECK_THROWS_WITH_AS(Timeline::deserialize("0 1.0 2.0 forward F0"), doctest::Contains("without its end of line"), Error);
  CHECK_THROWS_WITH_AS(Timeline::deserialize("x y\n"), doctest::Contains("a malformed record"), Error);
}
}
