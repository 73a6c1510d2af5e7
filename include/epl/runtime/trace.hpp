#pragma once
/// \file
/// \brief write_trace — every rank's timeline in one Chrome trace JSON file (the `trace` key,
/// `--trace=FILE`): one process track per rank, its forward, backward, send, receive and
/// all-reduce spans. Perfetto (ui.perfetto.dev) and chrome://tracing open it; tools/trace_svg.py
/// draws it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/comm/outcome.hpp"
#include "epl/core/files.hpp"
#include "epl/core/timeline.hpp"

namespace epl {
inline namespace v0 {

/// \brief Gathers every rank's spans over `group` (a collective: every rank calls it) and has
/// rank 0 write them to `path`. An unwritable path is an epl::Error on rank 0 naming it.
inline void write_trace(comm::Communicator& group, const Timeline& timeline, const std::string& path) {
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

/// \brief A run's timeline when the `trace` key names a file: opened on every rank (rank 0 checks
/// now, not at the end, that it can write the file), the ranks' clocks started together, and every
/// rank's spans written to the file when the tracer is destroyed in a run that ended normally (a
/// collective: every rank's tracer ends too, as a trainer's does). A file that cannot be written
/// then is printed and makes epl::launch return kLaunchFailed.
class Tracer {
 public:
  Tracer() = default;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  ~Tracer() {
    if (!timeline_ || std::uncaught_exceptions() > 0) return;
    try {
      write_trace(group_, *timeline_, path_);
    } catch (const std::exception& e) {  // a destructor must not throw: epl::launch ends the run with status 2 for it
      std::fprintf(stderr, "%s\n", e.what());
      ++epl::detail::unthrown_failures();
    }
  }
  /// \brief Starts tracing into `path` over world (nothing when path is empty). A collective.
  void open(const std::string& path, comm::Communicator& world) {
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
    group_.barrier();  // the ranks' clocks start together
    timeline_->set_origin();
  }
  /// \brief This rank's timeline, or null when not tracing.
  [[nodiscard]] Timeline* timeline() const noexcept { return timeline_.get(); }

 private:
  std::unique_ptr<Timeline> timeline_;
  std::string path_;
  comm::Communicator group_;
};

}  // namespace v0
}  // namespace epl
