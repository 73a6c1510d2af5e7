// device::Isolated, the CPU device whose memory host code cannot touch: its kernels equal the
// CPU's, host access to its memory is caught, and thread ranks move its buffers through their
// lanes: every collective and transfer equal to the same on host memory.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>

#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/device/isolated/isolated.hpp"

using namespace epl;

namespace {
std::vector<float> down(const device::Isolated& d, const Tensor& t) {
  std::vector<float> h(static_cast<std::size_t>(t.numel()));
  d.download(t, h.data());
  return h;
}
Tensor up(const device::Isolated& d, const std::vector<float>& h) {
  Tensor t = d.empty({static_cast<std::int64_t>(h.size())}, DType::kF32);
  d.upload(h.data(), t);
  return t;
}
// Runs fn in a child process; returns its status and what it wrote to stderr.
template <class Fn>
std::pair<int, std::string> in_child(Fn&& fn) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    fn();
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string err;
  std::array<char, 512> buf{};
  for (ssize_t n; (n = read(pipe_fds[0], buf.data(), buf.size())) > 0;) err.append(buf.data(), static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {status, err};
}
}  // namespace

TEST_SUITE("cpu") {
TEST_CASE("isolated: host code that reads or writes its memory dies at once, naming the wrong space") {
  const auto first = in_child([] {
    device::Isolated d(40);
    Tensor t = d.zeros({16}, DType::kF32);
    volatile float x = t.data<float>()[3];  // the planted wrong-space access: a host loop over a device tensor
    (void)x;
  });
  const int status = first.first;
  const std::string err = first.second;  // not a binding: clang 14's CAPTURE cannot take one
  CAPTURE(err);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  CHECK(err.find("epl: wrong memory space: host code read or wrote device::Isolated memory") != std::string::npos);
  // the same through memcpy, a write this time
  const auto second = in_child([] {
    device::Isolated d(41);
    Tensor t = d.empty({16}, DType::kF32);
    const std::array<float, 16> h{};
    std::memcpy(t.raw(), h.data(), sizeof h);
  });
  CHECK(WIFSIGNALED(second.first));
  CHECK(second.second.find("wrong memory space") != std::string::npos);
  // a span is refused before any access
  device::Isolated d(42);
  CHECK_THROWS_WITH_AS((void)d.zeros({4}, DType::kF32).span<float>(), doctest::Contains("whose memory host code cannot read"), Error);
}

TEST_CASE("isolated: kernels equal the CPU's; a CPU tensor handed to them is refused, the host pool is reached") {
  device::Isolated d(43);
  auto& cpu = test::cpu();
  const Tensor a = test::random({6, 5}, 1), b = test::random({5, 4}, 2);
  Tensor c = cpu.zeros({6, 4}, DType::kF32);
  cpu.gemm(a, false, b, false, c);
  const Tensor da = d.empty({6, 5}, DType::kF32), db = d.empty({5, 4}, DType::kF32), dc = d.zeros({6, 4}, DType::kF32);
  d.upload(a.raw(), da);
  d.upload(b.raw(), db);
  d.gemm(da, false, db, false, dc);
  d.gelu(dc, dc);
  cpu.gelu(c, c);
  const auto got = down(d, dc);
  CHECK(test::max_rel_diff(std::vector<double>(got.begin(), got.end()), test::values(c)) == 0);
  CHECK(d.sum_squares(dc) == doctest::Approx(cpu.sum_squares(c)).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(d.gelu(c, dc), doctest::Contains("device::Isolated's gelu was given a tensor in cpu:0 memory"), Error);
  const Tensor pool = d.host_zeros({6, 4}, DType::kF32, MemoryCategory::kParameters);
  d.copy(dc, pool);  // device -> host pool, read on the host as a GPU's pinned memory is
  CHECK(pool.span<float>()[5] == down(d, dc)[5]);
  CHECK(memory_stats(d.id()).current_of(MemoryCategory::kActivations) >= 3 * 24 * 4);
}

TEST_CASE("isolated thread ranks: every collective and transfer on device buffers equals the host's, through the lanes") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
      const int r = c.rank();
      device::Isolated d(50 + r);
      c.attach(d.lane());
      auto values = [&](int len, int salt, int of = -1) {  // rank `of`'s (this rank's by default)
        std::vector<float> v(static_cast<std::size_t>(len));
        const int k = of < 0 ? r : of;
        for (int i = 0; i < len; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + salt * 13 + k * 5) % 11) - 5.0f;
        return v;
      };
      // all_reduce, sum, mean and max, in place and not: the host's result on host buffers
      for (auto op : {comm::ReduceOp::kSum, comm::ReduceOp::kMean, comm::ReduceOp::kMax}) {
        auto h = values(1000, 1);
        Tensor x = up(d, h), y = d.empty({1000}, DType::kF32);
        c.all_reduce(x, y, op);
        c.all_reduce(comm::Buffer(h.data(), 1000, DType::kF32), op);
        CHECK(down(d, y) == h);
        c.all_reduce(x, op);
        CHECK(down(d, x) == h);
      }
      {  // reduce_scatter into shares, all_gather back
        auto h = values(12 * n, 2);
        Tensor x = up(d, h), part = d.empty({12}, DType::kF32), whole = d.empty({12 * n}, DType::kF32);
        std::vector<float> hpart(12), hwhole(static_cast<std::size_t>(12 * n));
        c.reduce_scatter(x, part, comm::ReduceOp::kSum);
        c.reduce_scatter(comm::Buffer(h.data(), 12 * n, DType::kF32), comm::Buffer(hpart.data(), 12, DType::kF32), comm::ReduceOp::kSum);
        CHECK(down(d, part) == hpart);
        c.all_gather(part, whole);
        c.all_gather(comm::Buffer(hpart.data(), 12, DType::kF32), comm::Buffer(hwhole.data(), 12 * n, DType::kF32));
        CHECK(down(d, whole) == hwhole);
      }
      {  // broadcast and reduce to a root
        auto h = values(33, 3);
        Tensor x = up(d, h), out = d.zeros({33}, DType::kF32);
        c.broadcast(x, n - 1);
        c.broadcast(comm::Buffer(h.data(), 33, DType::kF32), n - 1);
        CHECK(down(d, x) == h);
        std::vector<float> hout(33, 0.0f);
        c.reduce(x, out, comm::ReduceOp::kSum, 0);
        c.reduce(comm::Buffer(h.data(), 33, DType::kF32), comm::Buffer(hout.data(), 33, DType::kF32), comm::ReduceOp::kSum, 0);
        if (r == 0) CHECK(down(d, out) == hout);
      }
      {  // all_to_all (MoE's dispatch)
        auto h = values(4 * n, 4);
        Tensor x = up(d, h), y = d.empty({4 * n}, DType::kF32);
        std::vector<float> hy(static_cast<std::size_t>(4 * n));
        c.all_to_all(x, y);
        c.all_to_all(comm::Buffer(h.data(), 4 * n, DType::kF32), comm::Buffer(hy.data(), 4 * n, DType::kF32));
        CHECK(down(d, y) == hy);
      }
      {  // tagged transfers around the ring, two tags in flight out of order, and an asynchronous all_reduce
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        Tensor a = up(d, values(8, 5)), b = up(d, values(8, 6)), ra = d.empty({8}, DType::kF32), rb = d.empty({8}, DType::kF32);
        c.send(a, next, 1);
        c.send(b, next, 2);
        auto wb = c.irecv(rb, prev, 2);
        c.recv(ra, prev, 1);
        wb.wait();
        CHECK(down(d, ra) == values(8, 5, prev));
        CHECK(down(d, rb) == values(8, 6, prev));
        auto h = values(64, 7);
        Tensor x = up(d, h);
        auto w = c.all_reduce_async(x, x, comm::ReduceOp::kSum);
        c.all_reduce(comm::Buffer(h.data(), 64, DType::kF32), comm::ReduceOp::kSum);
        w.wait();
        CHECK(down(d, x) == h);
      }
      {  // sub-groups moved through the same lane
        auto sub = c.split(r % 2, r);
        Tensor x = up(d, {1.0f, 2.0f});
        sub.all_reduce(x, comm::ReduceOp::kSum);
        const float k = static_cast<float>(sub.size());
        CHECK(down(d, x) == std::vector<float>{k, 2 * k});
      }
    });
  }
}

TEST_CASE("isolated thread ranks: device buffers without a lane, mixed spaces across ranks and a host send into device memory are errors") {
  // no lane attached: every rank fails in step, before any reads a peer's buffer
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(60 + c.rank());
    Tensor x = d.zeros({4}, DType::kF32);
    auto world = comm::Communicator::borrow(c);
    world.all_reduce(x, comm::ReduceOp::kSum);
  }, {.report = false}), doctest::Contains("a buffer in device memory and no device lane; attach the device's lane"), Error);
  // one rank on the device, its peer on the host: mixed devices in one group
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(62 + c.rank());
    c.attach(d.lane());
    Tensor x = c.rank() == 0 ? d.zeros({4}, DType::kF32) : test::cpu().zeros({4}, DType::kF32);
    c.all_reduce(x, comm::ReduceOp::kSum);
  }, {.report = false}), doctest::Contains("rank 1 passes host memory, rank 0 device memory; the ranks of a group move buffers of one memory space"), Error);
  // a host message received into device memory
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(64 + c.rank());
    c.attach(d.lane());
    if (c.rank() == 0) c.send(test::cpu().zeros({4}, DType::kF32), 1, 0);
    else c.recv(d.zeros({4}, DType::kF32), 0, 0);
  }, {.report = false}), doctest::Contains("rank 0 sent host memory into a buffer in device memory"), Error);
  // input and output in different spaces
  CHECK_THROWS_WITH_AS(comm::run_threads(2, [&](comm::ThreadCommunicator& c) {
    device::Isolated d(66 + c.rank());
    c.attach(d.lane());
    c.all_reduce(d.zeros({4}, DType::kF32), test::cpu().zeros({4}, DType::kF32), comm::ReduceOp::kSum);
  }, {.report = false}), doctest::Contains("input in device memory and output in host memory"), Error);
}
}
