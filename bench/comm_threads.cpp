// all_reduce bandwidth of the thread backend, 4 KiB to 256 MiB, with the machine's memcpy
// bandwidth as the physical limit. One JSON line.   bench_comm_threads [--ranks=2]
// Rank r runs on core r mod cores, as the MPI benchmark binds its processes: left unbound, the
// scheduler sometimes starts both new threads of a size on one core, and that size then costs
// ~100 us a barrier (the other size's figures are unchanged).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "epl/comm/threads/run_threads.hpp"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int iterations(std::size_t bytes) { return static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / (bytes + 1), 5, 200)); }
}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--ranks=", 0) == 0) ranks = std::stoi(std::string(argv[i]).substr(8));
  // physical limit: one thread's memcpy of 256 MiB (read + write), median of 5
  std::vector<char> a(256 << 20, 1), b(256 << 20, 2);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    double t0 = now();
    std::memcpy(b.data(), a.data(), a.size());
    t.push_back(now() - t0);
  }
  const double memcpy_gbs = static_cast<double>(a.size()) / median(t) / 1e9;
  std::printf("{\"impl\": \"epl threads\", \"ranks\": %d, \"memcpy_gbs\": %.2f, \"rows\": [", ranks, memcpy_gbs);
  bool first = true;
  for (std::size_t bytes = 4096; bytes <= (std::size_t{256} << 20); bytes *= 4) {
    std::vector<double> times(static_cast<std::size_t>(ranks));
    epl::comm::run_threads(ranks, [&](epl::comm::ThreadCommunicator& c) {
      cpu_set_t core;
      CPU_ZERO(&core);
      CPU_SET(c.rank() % static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), &core);
      pthread_setaffinity_np(pthread_self(), sizeof(core), &core);
      std::vector<float> buf(bytes / 4, 1.0f);
      epl::comm::Buffer x(buf.data(), static_cast<std::int64_t>(buf.size()), epl::DType::kF32);
      c.all_reduce(x, epl::comm::ReduceOp::kSum);  // warm-up: first touch, staging
      std::vector<double> its;
      for (int i = 0; i < iterations(bytes); ++i) {
        c.barrier();
        double t0 = now();
        c.all_reduce(x, epl::comm::ReduceOp::kSum);
        its.push_back(now() - t0);
      }
      times[c.rank()] = median(its);
    });
    const double s = *std::max_element(times.begin(), times.end());
    const double algbw = static_cast<double>(bytes) / s / 1e9, busbw = algbw * 2 * (ranks - 1) / ranks;
    std::printf("%s{\"bytes\": %zu, \"us\": %.1f, \"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f}", first ? "" : ", ", bytes, s * 1e6, algbw, busbw);
    first = false;
  }
  std::printf("]}\n");
}
