// The thread backend: every operation, world sizes 1-4, sizes that do not divide, every dtype,
// in place and out of place, sub-groups, asynchronous order, and loud failure.
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "reference.hpp"

using namespace epl;
using comm::Buffer;
using comm::ReduceOp;
using test::expected;
using test::value;

namespace {

template <class T>
std::vector<T> filled(int r, std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(value(r, i));
  return v;
}
comm::ThreadLaunchOptions quick(int ms = 400) { return {.comm = {.timeout = std::chrono::milliseconds(ms)}}; }

template <class T>
void check_all_reduce(int n, std::int64_t count, ReduceOp op, bool in_place) {
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    auto in = filled<T>(c.rank(), count);
    std::vector<T> out(in.size());
    if (in_place) c.all_reduce(Buffer(in.data(), count, dtype_v<T>), op);
    else c.all_reduce(Buffer(in.data(), count, dtype_v<T>), Buffer(out.data(), count, dtype_v<T>), op);
    const auto& got = in_place ? in : out;
    for (std::int64_t i = 0; i < count; ++i) {
      double e = expected(op, n, i);
      if constexpr (std::is_integral_v<T>) e = static_cast<double>(static_cast<T>(e));
      if (static_cast<double>(got[i]) != doctest::Approx(e).epsilon(sizeof(T) == 2 ? 1e-2 : 1e-6)) {
        CHECK(static_cast<double>(got[i]) == doctest::Approx(e));
        return;
      }
    }
  });
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("threads: all_reduce, every op, dtype, world size 1-4, uneven sizes, in and out of place") {
  for (int n = 1; n <= 4; ++n)
    for (std::int64_t count : {1, 7, 1001})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin})
        for (bool in_place : {false, true}) {
          CAPTURE(n);
          CAPTURE(count);
          CAPTURE(comm::name_of(op));
          CAPTURE(in_place);
          check_all_reduce<float>(n, count, op, in_place);
          check_all_reduce<double>(n, count, op, in_place);
          check_all_reduce<std::int32_t>(n, count, op, in_place);
          check_all_reduce<std::int64_t>(n, count, op, in_place);
          check_all_reduce<half>(n, count, op, in_place);
          check_all_reduce<bfloat16>(n, count, op, in_place);
        }
}

TEST_CASE("threads: all_reduce of a large buffer moves 2(n-1)/n of it per rank") {
  for (int n : {2, 3, 4}) {
    const std::int64_t count = 12 * 100000;  // divisible by 2, 3 and 4
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      auto in = filled<float>(c.rank(), count);
      c.all_reduce(Buffer(in.data(), count, DType::kF32), ReduceOp::kSum);
      CHECK(in[count - 1] == doctest::Approx(expected(ReduceOp::kSum, n, count - 1)));
      const std::int64_t bytes = count * 4;
      CHECK(c.stats().bytes_received == 2 * (n - 1) * bytes / n);
      CHECK(c.stats().bytes_sent == 2 * (n - 1) * bytes / n);
      CHECK(c.stats().operations == 1);
    });
  }
}

TEST_CASE("threads: reduce_scatter with equal and uneven shares") {
  for (int n = 1; n <= 4; ++n) {
    const std::int64_t count = 10;
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      auto in = filled<double>(c.rank(), count);
      const std::int64_t o0 = count * c.rank() / n, o1 = count * (c.rank() + 1) / n;
      std::vector<double> out(static_cast<std::size_t>(o1 - o0));
      c.reduce_scatter(Buffer(in.data(), count, DType::kF64), Buffer(out.data(), o1 - o0, DType::kF64), ReduceOp::kSum);
      for (std::int64_t i = o0; i < o1; ++i) CHECK(out[i - o0] == expected(ReduceOp::kSum, n, i));
    });
  }
}

TEST_CASE("threads: all_gather of equal and variable sizes") {
  for (int n = 1; n <= 4; ++n)
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      const std::int64_t mine = c.rank() + 2;  // rank r contributes r + 2 elements
      std::vector<std::int32_t> in(static_cast<std::size_t>(mine), c.rank() * 10);
      std::int64_t total = 0;
      for (int q = 0; q < n; ++q) total += q + 2;
      std::vector<std::int32_t> out(static_cast<std::size_t>(total), -1);
      c.all_gather(Buffer(in.data(), mine, DType::kI32), Buffer(out.data(), total, DType::kI32));
      std::size_t at = 0;
      for (int q = 0; q < n; ++q)
        for (int j = 0; j < q + 2; ++j) CHECK(out[at++] == q * 10);
    });
}

TEST_CASE("threads: broadcast and reduce from every root") {
  for (int n = 1; n <= 4; ++n)
    for (int root = 0; root < n; ++root)
      comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
        auto buf = filled<float>(c.rank(), 9);
        c.broadcast(Buffer(buf.data(), 9, DType::kF32), root);
        for (int i = 0; i < 9; ++i) CHECK(buf[i] == static_cast<float>(value(root, i)));
        auto in = filled<double>(c.rank(), 9);
        std::vector<double> out(9, -7);
        c.reduce(Buffer(in.data(), 9, DType::kF64), Buffer(out.data(), 9, DType::kF64), ReduceOp::kMax, root);
        for (int i = 0; i < 9; ++i) CHECK(out[i] == (c.rank() == root ? expected(ReduceOp::kMax, n, i) : -7.0));
      });
}

TEST_CASE("threads: all_to_all, equal and variable blocks") {
  for (int n = 1; n <= 4; ++n)
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      const int r = c.rank();
      std::vector<std::int64_t> in(static_cast<std::size_t>(2 * n)), out(in.size());
      for (int q = 0; q < n; ++q) in[2 * q] = in[2 * q + 1] = 100 * r + q;  // block q goes to rank q
      c.all_to_all(Buffer(in.data(), 2 * n, DType::kI64), Buffer(out.data(), 2 * n, DType::kI64));
      for (int q = 0; q < n; ++q) CHECK(out[2 * q] == 100 * q + r);
      // variable: rank r sends q + 1 elements to rank q, so it receives r + 1 from everyone
      std::vector<std::int64_t> send_counts, recv_counts(static_cast<std::size_t>(n), r + 1);
      std::vector<float> vin, vout(static_cast<std::size_t>(n * (r + 1)));
      for (int q = 0; q < n; ++q) {
        send_counts.push_back(q + 1);
        for (int j = 0; j <= q; ++j) vin.push_back(static_cast<float>(10 * r + q));
      }
      c.all_to_all_v(Buffer(vin.data(), static_cast<std::int64_t>(vin.size()), DType::kF32), send_counts,
                     Buffer(vout.data(), static_cast<std::int64_t>(vout.size()), DType::kF32), recv_counts);
      for (int q = 0; q < n; ++q)
        for (int j = 0; j <= r; ++j) CHECK(vout[q * (r + 1) + j] == static_cast<float>(10 * q + r));
    });
}

TEST_CASE("threads: tagged send and recv around a ring, tags kept apart") {
  for (int n = 2; n <= 4; ++n)
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      const int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      std::vector<double> a(5, r), b(5, 100 + r), got_a(5), got_b(5);
      c.send(Buffer(b.data(), 5, DType::kF64), next, 2);
      c.send(Buffer(a.data(), 5, DType::kF64), next, 1);
      c.recv(Buffer(got_a.data(), 5, DType::kF64), prev, 1);
      c.recv(Buffer(got_b.data(), 5, DType::kF64), prev, 2);
      CHECK(got_a[4] == prev);
      CHECK(got_b[0] == 100 + prev);
    });
}

TEST_CASE("threads: asynchronous send and receive: posted before the message, completed by test() or wait(), tags kept apart") {
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    const int peer = 1 - c.rank();
    std::vector<float> got1(4, -1), got2(4, -1);
    auto r2 = c.irecv(Buffer(got2.data(), 4, DType::kF32), peer, 2);  // posted before anything was sent
    auto r1 = c.irecv(Buffer(got1.data(), 4, DType::kF32), peer, 1);
    CHECK_FALSE(r1.test());  // the peer has sent nothing yet: both ranks pass the barrier below first
    c.barrier();
    std::vector<float> a(4, static_cast<float>(c.rank())), b(4, static_cast<float>(10 + c.rank()));
    auto s1 = c.isend(Buffer(a.data(), 4, DType::kF32), peer, 1);
    auto s2 = c.isend(Buffer(b.data(), 4, DType::kF32), peer, 2);
    s1.wait();
    s2.wait();
    while (!r1.test()) std::this_thread::yield();  // test() completes it once the message is there
    CHECK(got1[3] == static_cast<float>(peer));
    r2.wait();
    CHECK(got2[0] == static_cast<float>(10 + peer));
    CHECK(r1.test());
  });
}

TEST_CASE("threads: a receive of the wrong size or from a silent peer fails naming both ranks") {
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    std::vector<double> x(3);
    if (c.rank() == 0) c.isend(Buffer(x.data(), 3, DType::kF64), 1, 0).wait();
    else c.irecv(Buffer(x.data(), 2, DType::kF64), 0, 0).wait();
  }, quick()), doctest::Contains("recv on group 'world' at rank 1 from rank 0 tag 0: expected 2 f64, got 3 f64"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    std::vector<double> x(3);
    if (c.rank() == 1) c.irecv(Buffer(x.data(), 3, DType::kF64), 0, 7).wait();
    else std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // busy past the timeout, then gone
  }, quick()), doctest::Contains("rank 0 did not send a message with tag 7"), Error);
}

TEST_CASE("threads: split into data- and tensor-parallel sub-groups of a 2 x 2 mesh") {
  comm::run_threads(4, [&](comm::ThreadCommunicator& world) {
    const int r = world.rank();
    auto tp = world.split(r / 2, r);  // {0, 1}, {2, 3}
    auto dp = world.split(r % 2, -r);  // {2, 0}, {3, 1}: key orders by descending world rank
    CHECK(tp.size() == 2);
    CHECK(tp.rank() == r % 2);
    CHECK(dp.rank() == (r < 2 ? 1 : 0));
    double x = r, sum_tp = 0;
    tp.all_reduce(Buffer(&x, 1, DType::kF64), Buffer(&sum_tp, 1, DType::kF64), ReduceOp::kSum);
    CHECK(sum_tp == (r < 2 ? 1.0 : 5.0));
    double sum_dp = 0;
    dp.all_reduce(Buffer(&x, 1, DType::kF64), Buffer(&sum_dp, 1, DType::kF64), ReduceOp::kSum);
    CHECK(sum_dp == (r % 2 == 0 ? 2.0 : 4.0));
    auto again = tp.split(0, 0);  // split of a split
    CHECK(again.size() == 2);
  });
}

TEST_CASE("threads: asynchronous all_reduces complete in issue order and overlap the caller") {
  comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    std::vector<std::vector<float>> bufs;
    for (int k = 0; k < 6; ++k) bufs.push_back(std::vector<float>(1000, static_cast<float>(c.rank() + k)));
    std::vector<comm::Work> work;
    for (auto& b : bufs) work.push_back(c.all_reduce_async(Buffer(b.data(), 1000, DType::kF32), Buffer(b.data(), 1000, DType::kF32), ReduceOp::kSum));
    double busy = 0;
    for (int i = 0; i < 1000; ++i) busy += std::sqrt(static_cast<double>(i));  // the caller keeps computing
    CHECK(busy > 0);
    for (auto& w : work) w.wait();
    for (int k = 0; k < 6; ++k) CHECK(bufs[k][999] == static_cast<float>(3 + 3 * k));
    double one = 1, three = 0;  // a blocking call after async ones runs after them
    c.all_reduce(Buffer(&one, 1, DType::kF64), Buffer(&three, 1, DType::kF64), ReduceOp::kSum);
    CHECK(three == 3);
    CHECK(c.stats().operations == 7);
  });
}

TEST_CASE("threads: a rank that never arrives is named after the timeout") {
  auto start = std::chrono::steady_clock::now();
  auto late = [&](comm::ThreadCommunicator& c) {
    if (c.rank() == 1) {  // rank 1 is busy elsewhere past the timeout
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      return;
    }
    float x = 1;
    c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
  };
  CHECK_THROWS_WITH_AS(comm::run_threads(3, late, quick()),
                       doctest::Contains("all_reduce on group 'world' (size 3) timed out after 400 ms at rank"), Error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THROWS_WITH_AS(comm::run_threads(3, late, quick()), doctest::Contains("ranks 1 did not arrive"), Error);
}

TEST_CASE("threads: a timeout in a sub-group names the world ranks too") {
  // the group's own numbers named a healthy rank as the one that hung (a stranger's finding)
  std::string message;
  comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    auto group = c.split(c.rank() / 2, 0);  // world ranks {0, 1} and {2, 3}
    if (c.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(700));  // never arrives (busy past the timeout)
    if (c.rank() != 2) return;
    float x = 1;
    try {
      group.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
    } catch (const Error& e) {
      message = e.what();
    }
  }, quick(300));
  INFO(message);
  CHECK(message.find("all_reduce on group 'world/1' (size 2) timed out after 300 ms at rank 0 (world rank 2): ranks 1 (world rank 3) did "
                     "not arrive") != std::string::npos);
}

// Rank 2 arrives, then leaves (its handle cancelled, as a rank unwinding from a timeout of its
// own does); rank 0 times out later. Rank 0 names rank 1 alone: rank 2 came. Two ranks timing
// out together once named each other as missing, which sent the reader after a healthy rank.
TEST_CASE("threads: a timeout names only the ranks that never arrived, not one that arrived and left") {
  std::string message;
  comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    if (c.rank() == 1) {  // never arrives
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      return;
    }
    float x = 1;
    if (c.rank() == 2) {
      std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        c.cancel("the test leaves");
      });
      CHECK_THROWS_WITH_AS(c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum), doctest::Contains("was cancelled"), Error);
      canceller.join();
      return;
    }
    try {
      c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
    } catch (const Error& e) {
      message = e.what();
    }
  }, quick(400));
  INFO(message);
  CHECK(message.find("timed out after 400 ms at rank 0: ranks 1 did not arrive") != std::string::npos);
}

TEST_CASE("threads: a rank that returns while its peers wait for it fails them at once, named") {
  // not after the 60 s timeout: the rank's function has returned, so it can never arrive
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    if (c.rank() == 1) return;  // rank 1 skips the collective
    float x = 1;
    c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
  }, quick(60000)), doctest::Contains("ranks 1 returned from their function before arriving at it"), Error);
  // a receive from it, and a sub-group's collective that it is in
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    float x = 1;
    if (c.rank() == 0) c.recv(Buffer(&x, 1, DType::kF32), 1, 5);
  }, quick(60000)), doctest::Contains("rank 1 returned from its function without sending a message with tag 5"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {  // polled with test(), which has no timeout
    float x = 1;
    if (c.rank() == 0) {
      auto w = c.irecv(Buffer(&x, 1, DType::kF32), 1, 6);
      while (!w.test()) std::this_thread::yield();  // ends: the receive completed, failed
      w.wait();                                      // which wait() reports
    }
  }, quick(60000)), doctest::Contains("rank 1 returned from its function without sending a message with tag 6"), Error);
  comm::run_threads(2, [&](comm::ThreadCommunicator& c) {  // a message sent before returning is still received
    float x = 7;
    if (c.rank() == 1) {
      c.send(Buffer(&x, 1, DType::kF32), 0, 8);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    x = 0;
    auto w = c.irecv(Buffer(&x, 1, DType::kF32), 1, 8);
    while (!w.test()) std::this_thread::yield();
    CHECK(x == 7);
  }, quick(60000));
  CHECK_THROWS_WITH_AS(comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    auto pair = c.split(c.rank() / 2, c.rank());
    if (c.rank() == 3) return;
    float x = 1;
    pair.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
  }, quick(60000)), doctest::Contains("at rank 0 (world rank 2): ranks 1 (world rank 3) returned from their function"), Error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // a rank that returns after the others are done with it is no failure
  comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    float x = 1;
    c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
    CHECK(x == 3);
    auto two = c.split(c.rank() < 2 ? 0 : 1, c.rank());
    if (c.rank() == 2) return;
    two.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
    CHECK(x == 6);
  }, quick(60000));
}

TEST_CASE("threads: a rank that throws stops the others promptly and its error is rethrown") {
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    if (c.rank() == 2) throw Error("rank two broke", "here.cpp", 1);
    float x = 1;
    c.all_reduce(Buffer(&x, 1, DType::kF32), ReduceOp::kSum);
  }, quick(60000)), doctest::Contains("rank two broke"), Error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // not the 60 s timeout
}

// Rank 1 times out waiting for rank 0, unwinds and frees its buffer; rank 0 arrives 1.5 s
// later. Rank 0 must not pass the barrier that rank 1 was once counted in and reduce from the
// freed buffer (ASan reported a heap-use-after-free here; without it, a segfault).
TEST_CASE("threads: a rank arriving after a peer timed out fails and never reads the peer's freed buffer") {
  std::atomic<bool> rank0_reduced{false};
  try {
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      auto buf = std::make_unique<std::vector<float>>(1 << 16, 1.0f);  // freed when rank 1 unwinds
      if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      c.all_reduce(Buffer(buf->data(), static_cast<std::int64_t>(buf->size()), DType::kF32), ReduceOp::kSum);
      if (c.rank() == 0) rank0_reduced = true;
    }, quick(500));
    FAIL("a rank that timed out did not fail the run");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("timed out after 500 ms at rank 1: ranks 0 did not arrive") != std::string::npos);
    CHECK(e.rank() == 1);
  }
  CHECK_FALSE(rank0_reduced.load());
}

// A failed rank's queued asynchronous operations are cancelled, not run: they no longer count
// as arrivals, so the peer gets the real failure, not "rank 1 called barrier" (a false
// mismatch), and nobody waits one more timeout per queued operation.
TEST_CASE("threads: a failing rank's queued asynchronous operations are cancelled, not run against its peers") {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors(2);
  try {
    comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
      std::vector<float> grads(1 << 16, 1.0f);
      try {
        if (c.rank() == 1) {
          for (int b = 0; b < 3; ++b) (void)c.all_reduce_async(Buffer(grads.data(), 1 << 16, DType::kF32), Buffer(grads.data(), 1 << 16, DType::kF32), ReduceOp::kSum);
          throw Error("rank one failed in backward", "here.cpp", 1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        c.barrier();
      } catch (const std::exception& e) {
        errors[c.rank()] = e.what();
        throw;
      }
    }, quick(10000));
    FAIL("the failure was not reported");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("rank one failed in backward") != std::string::npos);
  }
  CHECK(errors[0].find("rank 1 failed") != std::string::npos);
  CHECK(errors[0].find("called") == std::string::npos);  // not a mismatch with the cancelled all_reduces
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // not the 10 s timeout, let alone 3 of them
}

// Validation judges all ranks' arguments alike, so a mismatch that only one rank's arguments
// show (its all_gather output is too small) fails every rank, before any buffer is read.
TEST_CASE("threads: a mismatch in one rank's arguments fails every rank the same way") {
  std::vector<std::string> errors(3);
  CHECK_THROWS_AS(comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
    std::vector<float> in(4, 1.0f), out(c.rank() == 2 ? 8 : 12);
    try {
      c.all_gather(Buffer(in.data(), 4, DType::kF32), Buffer(out.data(), static_cast<std::int64_t>(out.size()), DType::kF32));
    } catch (const Error& e) {
      errors[c.rank()] = e.detail();
      throw;
    }
  }, quick()), Error);
  for (const auto& e : errors) CHECK(e == "all_gather on group 'world' (size 3): the inputs hold 12 elements, rank 2's output 8");
}

TEST_CASE("threads: arguments wrong on one rank only fail every rank in step, and the group stays usable") {
  // Each case: rank 0's arguments are wrong where its peers' are fine. Every rank must throw (the
  // error caught), and the next all_reduce must pair with the peers' next one: right values.
  using Bad = std::function<void(comm::ThreadCommunicator&, bool)>;
  const std::vector<std::pair<const char*, Bad>> cases = {
      {"input 100 f32 and output 101 f32 differ", [](comm::ThreadCommunicator& c, bool bad) {
         std::vector<float> x(100, 1.0f), y(101);
         c.all_reduce(Buffer(x.data(), 100, DType::kF32), Buffer(y.data(), bad ? 101 : 100, DType::kF32), ReduceOp::kSum);
       }},
      {"broadcast root 7 is not a rank", [](comm::ThreadCommunicator& c, bool bad) {
         float x = 1;
         c.broadcast(Buffer(&x, 1, DType::kF32), bad ? 7 : 0);
       }},
      {"reduce root -1 is not a rank", [](comm::ThreadCommunicator& c, bool bad) {
         float x = 1, y = 0;
         c.reduce(Buffer(&x, 1, DType::kF32), Buffer(&y, 1, DType::kF32), ReduceOp::kSum, bad ? -1 : 0);
       }},
      {"must be equal and divisible by the group size", [](comm::ThreadCommunicator& c, bool bad) {
         std::vector<float> x(6), y(6);
         c.all_to_all(Buffer(x.data(), bad ? 5 : 6, DType::kF32), Buffer(y.data(), 6, DType::kF32));
       }},
      {"need one send and one receive count per rank", [](comm::ThreadCommunicator& c, bool bad) {
         std::vector<float> x(6), y(6);
         std::vector<std::int64_t> counts(bad ? 2 : 3, 2);
         c.all_to_all_v(Buffer(x.data(), 6, DType::kF32), counts, Buffer(y.data(), 6, DType::kF32), counts);
       }},
      {"color -2 must be non-negative", [](comm::ThreadCommunicator& c, bool bad) { (void)c.split(bad ? -2 : 0, c.rank()); }},
  };
  for (const auto& bad_case : cases) {  // no structured bindings: clang 14's CAPTURE cannot take them
    const std::string text = bad_case.first;
    const Bad& call = bad_case.second;
    CAPTURE(text);
    std::vector<std::string> errors(3);
    std::vector<float> sums(3);
    comm::run_threads(3, [&](comm::ThreadCommunicator& c) {
      try {
        call(c, c.rank() == 0);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(c.rank())] = e.detail();
      }
      float z = 100.0f * static_cast<float>(c.rank() + 1);
      c.all_reduce(Buffer(&z, 1, DType::kF32), ReduceOp::kSum);
      sums[static_cast<std::size_t>(c.rank())] = z;
    }, quick(60000));
    CHECK(errors[0].find(text) != std::string::npos);
    for (int r : {1, 2}) CHECK(errors[static_cast<std::size_t>(r)].find(std::string("rank 0's arguments are wrong: ")) != std::string::npos);
    for (float z : sums) CHECK(z == 600.0f);
  }
}

TEST_CASE("threads: different collectives, sizes or dtypes across ranks are reported, not hung") {
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    std::vector<float> x(c.rank() == 0 ? 4 : 5);
    c.all_reduce(Buffer(x.data(), static_cast<std::int64_t>(x.size()), DType::kF32), ReduceOp::kSum);
  }, quick()), doctest::Contains("sizes must match"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    double x = 0;
    if (c.rank() == 0) c.all_reduce(Buffer(&x, 1, DType::kF64), ReduceOp::kSum);
    else c.broadcast(Buffer(&x, 1, DType::kF64), 0);
  }, quick()), doctest::Contains("called broadcast"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    double x = 0;
    float y = 0;
    if (c.rank() == 0) c.all_reduce(Buffer(&x, 1, DType::kF64), ReduceOp::kSum);
    else c.all_reduce(Buffer(&y, 1, DType::kF32), ReduceOp::kSum);
  }, quick()), doctest::Contains("passes f32"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    std::vector<double> x(3);
    c.recv(Buffer(x.data(), c.rank() == 0 ? 3 : 2, DType::kF64), 1 - c.rank(), 0);
  }, quick()), doctest::Contains("did not send a message with tag 0"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) { c.broadcast(Buffer{}, 5); }, quick()),
                       doctest::Contains("broadcast root 5 is not a rank of group 'world' (size 2)"), Error);
  CHECK_THROWS_WITH_AS(comm::run_threads(0, [](comm::ThreadCommunicator&) {}), doctest::Contains("the rank count 0 must be from 1 to 4096"), Error);
}

TEST_CASE("threads: the rank count comes from EPL_NUM_RANKS when code does not give one") {
  setenv("EPL_NUM_RANKS", "3", 1);
  std::atomic<int> seen{0};
  comm::run_threads([&](comm::ThreadCommunicator& c) {
    CHECK(c.size() == 3);
    ++seen;
  });
  CHECK(seen == 3);
  setenv("EPL_NUM_RANKS", "three", 1);
  CHECK_THROWS_WITH_AS(comm::run_threads([](comm::ThreadCommunicator&) {}), doctest::Contains("EPL_NUM_RANKS=\"three\" is not a rank count"), Error);
  unsetenv("EPL_NUM_RANKS");
  CHECK(comm::rank_count_from_env(2) == 2);
}
}
