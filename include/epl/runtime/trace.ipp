#pragma once
/// \file
/// \brief The definitions of write_trace and BasicTracer's members (an .ipp: included only at the
/// end of runtime/trace.hpp, unless the program links epl::precompiled, which compiles them once).
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "epl/comm/outcome.hpp"
#include "epl/core/files.hpp"

namespace epl {
inline namespace v0 {

template <class Unused>
void write_trace(comm::Communicator& group, const Timeline& timeline, const std::string& path) {
  // The text travels as 64-bit words (zero-padded): every backend moves them.
  const std::string mine = timeline.serialize();
  std::vector<std::int64_t> words((mine.size() + 7) / 8, 0);
  if (!mine.empty()) std::memcpy(words.data(), mine.data(), mine.size());
  std::int64_t count = static_cast<std::int64_t>(words.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(group.size()));
  group.all_gather(comm::Buffer(&count, 1, DType::kI64), comm::Buffer(counts.data(), group.size(), DType::kI64));
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  std::vector<std::int64_t> all(static_cast<std::size_t>(total));
  group.all_gather(comm::Buffer(words.data(), count, DType::kI64), comm::Buffer(all.data(), total, DType::kI64));
  if (group.rank() != 0) return;
  std::vector<std::vector<Span>> ranks;
  std::int64_t at = 0;
  for (auto c : counts) {
    std::string text(reinterpret_cast<const char*>(all.data() + at), static_cast<std::size_t>(c) * 8);
    text.resize(std::strlen(text.c_str()));  // drop the padding
    ranks.push_back(Timeline::deserialize(text));
    at += c;
  }
  files::write_file(path, Timeline::chrome_json(ranks), "trace file");
}

template <class Unused>
BasicTracer<Unused>::~BasicTracer() {
  if (!timeline_ || std::uncaught_exceptions() > 0) return;
  try {
    write_trace(group_, *timeline_, path_);
  } catch (const std::exception& e) {  // a destructor must not throw: epl::launch ends the run with status 2 for it
    std::fprintf(stderr, "%s\n", e.what());
    ++epl::detail::unthrown_failures();
  }
}

template <class Unused>
void BasicTracer<Unused>::open(const std::string& path, comm::Communicator& world) {
  if (path.empty()) return;
  path_ = path;
  group_ = world.split(0, world.rank());
  // rank 0 checks now, writing nothing, that the file can be written at the end
  epl::detail::on_every_rank(group_, "the trace key", [&] {
    if (group_.rank() != 0) return;
    try {
      files::check_writable(path_, "trace file");
    } catch (const Error& e) {
      EPL_FAIL(e.detail(), " (the trace key: give it, as --trace=FILE or EPL_TRACE=FILE, a path in a writable directory)");
    }
  });
  timeline_ = std::make_unique<Timeline>();
  // One origin for every rank: rank 0's, in each rank's clock. Setting each rank's own clock after a
  // barrier put a rank that was descheduled as it left 1.7 ms late, and drew receives before their
  // sends (a stranger's finding); processes on other machines do not even share a clock.
  using namespace std::chrono;
  const auto ns = [] { return duration_cast<nanoseconds>(Timeline::Clock::now().time_since_epoch()).count(); };
  constexpr int kRounds = 16;
  const auto n = static_cast<std::size_t>(group_.size());
  std::vector<std::int64_t> mine(2 * kRounds), starts(n), all(2 * kRounds * n);
  group_.barrier();
  for (int k = 0; k < kRounds; ++k) {
    std::int64_t start = ns();
    group_.all_gather(comm::Buffer(&start, 1, DType::kI64), comm::Buffer(starts.data(), group_.size(), DType::kI64));
    mine[static_cast<std::size_t>(2 * k)] = start;
    mine[static_cast<std::size_t>(2 * k + 1)] = ns();
  }
  group_.all_gather(comm::Buffer(mine.data(), 2 * kRounds, DType::kI64),
                    comm::Buffer(all.data(), 2 * kRounds * group_.size(), DType::kI64));
  std::vector<ClockRound> rounds(kRounds, ClockRound{std::vector<std::int64_t>(n), std::vector<std::int64_t>(n)});
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < kRounds; ++k) {
      rounds[k].start[q] = all[q * 2 * kRounds + 2 * k];
      rounds[k].end[q] = all[q * 2 * kRounds + 2 * k + 1];
    }
  const std::int64_t origin = rounds.back().end[0] + clock_offset(rounds, static_cast<std::size_t>(group_.rank()));
  timeline_->set_origin(Timeline::Clock::time_point(duration_cast<Timeline::Clock::duration>(nanoseconds(origin))));
}

}  // namespace v0
}  // namespace epl
