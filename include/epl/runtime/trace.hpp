#pragma once
/// \file
/// \brief write_trace — every rank's timeline in one Chrome trace JSON file (the `trace` key,
/// `--trace=FILE`): one process track per rank, its forward, backward, send, receive and
/// all-reduce spans. Perfetto (ui.perfetto.dev) and chrome://tracing open it; tools/trace_svg.py
/// draws it. runtime/trace.ipp, included at the end, defines them over the file layer (class
/// templates only so that a program linked with epl::precompiled takes them from that library).
#include <memory>
#include <string>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/timeline.hpp"

namespace epl {
inline namespace v0 {

/// \brief Gathers every rank's spans over `group` (a collective: every rank calls it) and has
/// rank 0 write them to `path`. An unwritable path is an epl::Error on rank 0 naming it.
template <class Unused = void>
void write_trace(comm::Communicator& group, const Timeline& timeline, const std::string& path);

/// \brief A run's timeline when the `trace` key names a file: opened on every rank (rank 0 checks
/// now, not at the end, that it can write the file), the ranks' clocks started together, and every
/// rank's spans written to the file when the tracer is destroyed in a run that ended normally (a
/// collective: every rank's tracer ends too, as a trainer's does). A file that cannot be written
/// then is printed and makes epl::launch return kLaunchFailed.
template <class Unused = void>
class BasicTracer {
 public:
  BasicTracer() = default;
  BasicTracer(const BasicTracer&) = delete;
  BasicTracer& operator=(const BasicTracer&) = delete;
  ~BasicTracer();
  /// \brief Starts tracing into `path` over world (nothing when path is empty). A collective.
  void open(const std::string& path, comm::Communicator& world);
  /// \brief This rank's timeline, or null when not tracing.
  [[nodiscard]] Timeline* timeline() const noexcept { return timeline_.get(); }

 private:
  std::unique_ptr<Timeline> timeline_;
  std::string path_;
  comm::Communicator group_;
};
/// \brief The tracer of a run (BasicTracer<void>).
using Tracer = BasicTracer<>;

}  // namespace v0
}  // namespace epl

// the definitions, unless epl::precompiled compiled them
#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)
extern template void epl::write_trace<void>(epl::comm::Communicator&, const epl::Timeline&, const std::string&);
extern template class epl::BasicTracer<void>;
#else
#include "epl/runtime/trace.ipp"
#endif
