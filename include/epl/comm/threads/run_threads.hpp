#pragma once
/// \file
/// \brief comm::run_threads — starts N thread ranks of this process, each with a
/// ThreadCommunicator on one world, and ends loudly when one of them fails.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "epl/comm/threads/threads.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief Options of run_threads.
struct ThreadLaunchOptions {
  CommOptions comm = {};
  int threads_per_rank = 1;  ///< OpenMP threads each rank's kernels use
  /// Print a failing rank's error to stderr the moment it fails ("[rank r] epl error ..."): the
  /// first failure only, the cause; the others' "stopped: rank r failed" follow from it.
  bool report = true;
  /// After the first failure, how long the other ranks get to stop (those waiting in a collective
  /// stop within 20 ms). A rank still running then is stuck in code that never reaches a
  /// collective: the process prints which ranks and exits with status 2, since a thread cannot
  /// be stopped and waiting for it would hang the program.
  std::chrono::milliseconds grace{3000};
};

namespace detail {
inline std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}
}  // namespace detail

/// \brief The most thread ranks one process starts: each rank is a thread that holds its own copy
/// of what it trains, and more than this is a mistake rather than a plan.
inline constexpr int kMaxThreadRanks = 4096;

/// \brief Runs fn(ThreadCommunicator&) on n thread ranks and joins them. If a rank throws, its
/// error is printed at once (ThreadLaunchOptions::report), the others' pending and later
/// operations fail within 20 ms, and the first failure is rethrown here. A rank whose fn returns
/// while peers wait for it in a collective or a receive fails them the same way, naming it. A
/// rank that does not stop within ThreadLaunchOptions::grace of the first failure ends the
/// process (status 2).
template <class Fn>
void run_threads(int n, Fn&& fn, ThreadLaunchOptions opt = {}) {
  EPL_CHECK(n >= 1 && n <= kMaxThreadRanks, "run_threads: the rank count ", n, " must be from 1 to ", kMaxThreadRanks);
  auto abort = std::make_shared<detail::AbortFlag>();
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[r] = r;
  auto world = std::make_shared<detail::ThreadGroup>(ranks, abort, "world", opt.comm);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<char> finished(static_cast<std::size_t>(n), 0);
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      RankScope scope(r);
      epl::detail::cpu::set_threads(opt.threads_per_rank);
      try {
        ThreadCommunicator comm(world, r);
        fn(comm);
        abort->mark_returned(r);  // a peer waiting for it in a collective fails now, not at its timeout
      } catch (...) {
        errors[r] = std::current_exception();
        const std::string what = epl::detail::with_rank(r, detail::describe(errors[r]));
        // the cause is this rank's if it raised the flag now, or earlier from inside a
        // collective (a timeout raises it at once, to stop the others)
        const bool cause = abort->raise(r, what) || abort->rank() == r;
        if (cause && opt.report) std::fprintf(stderr, "%s\n", what.c_str());
      }
      std::lock_guard lock(mutex);
      finished[r] = 1;
      cv.notify_all();
    });
  {
    std::unique_lock lock(mutex);
    auto all_done = [&] { return std::count(finished.begin(), finished.end(), 1) == n; };
    while (!all_done()) {
      cv.wait_for(lock, std::chrono::milliseconds(20));
      if (!all_done() && abort->raised() && std::chrono::steady_clock::now() - abort->when() > opt.grace) {
        std::string stuck;
        for (int r = 0; r < n; ++r)
          if (!finished[r]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(r);
        std::fprintf(stderr, "epl: ranks %s did not stop within %lld ms of the failure of rank %d; ending the process\n",
                     stuck.c_str(), static_cast<long long>(opt.grace.count()), abort->rank());
        std::fflush(stderr);
        std::_Exit(2);
      }
    }
  }
  for (auto& t : threads) t.join();
  if (abort->raised()) {
    int first = abort->rank();
    if (first >= 0 && first < n && errors[first]) std::rethrow_exception(errors[first]);
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
}

/// \brief The rank count from EPL_NUM_RANKS, or `fallback` when it is unset. Only a plain whole
/// number from 1 to 4096 is a rank count (" 2", "+2" and "2x" are errors, not 2).
inline int rank_count_from_env(int fallback = 1) {
  const char* s = std::getenv("EPL_NUM_RANKS");
  if (!s) return fallback;
  std::string_view text(s);
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  EPL_CHECK(!text.empty() && ec == std::errc{} && end == text.data() + text.size() && n >= 1 && n <= kMaxThreadRanks,
            "EPL_NUM_RANKS=", epl::detail::quoted(text), " is not a rank count; set a whole number from 1 to ", kMaxThreadRanks,
            " (digits only)");
  return n;
}

/// \brief run_threads on EPL_NUM_RANKS ranks (1 when unset).
template <class Fn>
void run_threads(Fn&& fn, ThreadLaunchOptions opt = {}) {
  run_threads(rank_count_from_env(1), std::forward<Fn>(fn), opt);
}

}  // namespace comm
}  // namespace v0
}  // namespace epl
