#include "../helpers.hpp"
#include "epl/core/timeline.hpp"

using namespace epl;

TEST_SUITE("cpu") {
TEST_CASE("shape: extents, rows, errors") {
  Shape s{2, 3, 4};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 24);
  CHECK(s.rows() == 6);
  CHECK(s.back() == 4);
  CHECK(s[-1] == 4);
  CHECK(s.with_back(5) == Shape{2, 3, 5});
  CHECK(s.str() == "[2, 3, 4]");
  CHECK_THROWS_WITH_AS(s[3], doctest::Contains("dimension 3 out of range"), Error);
  CHECK_THROWS_WITH_AS(Shape({1, -2}), doctest::Contains("negative extent -2"), Error);
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
  CHECK_THROWS_WITH_AS(d.cast(test::ids({4}, 3, 1), back), doctest::Contains("not a floating type"), Error);
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
