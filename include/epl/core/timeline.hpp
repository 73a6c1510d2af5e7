#pragma once
/// \file
/// \brief epl::Timeline — a rank's record of what it did when: forward, backward, send, receive
/// and all-reduce spans, written as Chrome trace JSON (Perfetto and chrome://tracing open it),
/// one process track per rank with a compute and a communication lane.
///
/// Times are microseconds since the timeline's origin, one moment for every rank of a run (the
/// tracer measures each rank's clock against rank 0's), so the ranks' tracks line up.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {

/// \brief One span of a rank's timeline.
struct Span {
  enum class Lane : std::uint8_t { kCompute, kCommunication };
  std::string name;      ///< "F3" (forward of micro-batch 3), "B3.1" (backward, chunk 1), "recv", "all_reduce"
  std::string category;  ///< "forward", "backward", "send", "recv", "all_reduce", ...
  Lane lane = Lane::kCompute;
  double start_us = 0, duration_us = 0;
};

/// \brief One round of a collective that completes on no rank before every rank has started it
/// (an all-gather): each rank's clock, in nanoseconds, read just before it (`start[q]`) and just
/// after it (`end[q]`).
struct ClockRound {
  std::vector<std::int64_t> start, end;
};
/// \brief Rank r's clock minus rank 0's, from rounds of such a collective. The moment the last
/// rank started it lies inside every rank's [start, end], so the midpoints of rank r's and rank 0's
/// intervals differ from the offset by at most half their widths together; the round where they
/// are narrowest is taken (a rank descheduled around one round widens only that round's). Thread
/// ranks share one clock and get about 0; processes on other machines their clocks' offset.
inline std::int64_t clock_offset(const std::vector<ClockRound>& rounds, std::size_t r) {
  std::int64_t best = 0, narrowest = -1;
  for (const auto& k : rounds) {
    const std::int64_t width = (k.end.at(r) - k.start.at(r)) + (k.end.at(0) - k.start.at(0));
    if (narrowest >= 0 && width >= narrowest) continue;
    narrowest = width;
    best = ((k.start[r] + k.end[r]) - (k.start[0] + k.end[0])) / 2;
  }
  return best;
}

/// \brief A rank's spans (thread-safe: the communication worker adds to it too).
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  /// \brief Spans start counting from t (every rank of a run the same moment: BasicTracer::open
  /// maps rank 0's origin to each rank's clock with clock_offset).
  void set_origin(Clock::time_point t = Clock::now()) {
    std::lock_guard lock(mutex_);
    origin_ = t;
  }
  /// \brief Records a span [start, end).
  void add(std::string name, std::string category, Span::Lane lane, Clock::time_point start, Clock::time_point end) {
    std::lock_guard lock(mutex_);
    spans_.push_back({std::move(name), std::move(category), lane, micros(start - origin_), micros(end - start)});
  }
  [[nodiscard]] std::vector<Span> spans() const {
    std::lock_guard lock(mutex_);
    return spans_;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    spans_.clear();
  }

  /// \brief The spans as newline-separated records ("lane category start duration name"), the
  /// form ranks exchange before one of them writes the file.
  [[nodiscard]] std::string serialize() const {
    std::lock_guard lock(mutex_);
    std::string out;
    char line[96];
    for (const auto& s : spans_) {
      std::snprintf(line, sizeof line, "%d %.3f %.3f ", static_cast<int>(s.lane), s.start_us, s.duration_us);
      out += line + s.category + ' ' + s.name + '\n';
    }
    return out;
  }
  /// \brief Parses what serialize() wrote.
  static std::vector<Span> deserialize(const std::string& text) {
    std::vector<Span> out;
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t end = text.find('\n', at);
      EPL_CHECK(end != std::string::npos, "timeline: a record without its end of line");
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      int lane = 0, used = 0;
      Span s;
      EPL_CHECK(std::sscanf(line.c_str(), "%d %lf %lf %n", &lane, &s.start_us, &s.duration_us, &used) == 3 && used > 0,
                "timeline: a malformed record ", detail::quoted(line));
      const std::string rest = line.substr(static_cast<std::size_t>(used));
      const std::size_t space = rest.find(' ');
      s.lane = static_cast<Span::Lane>(lane);
      s.category = rest.substr(0, space);
      s.name = space == std::string::npos ? std::string() : rest.substr(space + 1);
      out.push_back(std::move(s));
    }
    return out;
  }

  /// \brief Chrome trace JSON of every rank's spans (ranks[r] are rank r's): process r is
  /// "rank r", thread 0 its compute lane, thread 1 its communication lane.
  static std::string chrome_json(const std::vector<std::vector<Span>>& ranks) {
    std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    bool first = true;
    auto event = [&](const std::string& e) {
      out += (first ? "" : ",\n") + e;
      first = false;
    };
    char buf[160];
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      std::snprintf(buf, sizeof buf, R"({"ph":"M","pid":%zu,"name":"process_name","args":{"name":"rank %zu"}})", r, r);
      event(buf);
      std::snprintf(buf, sizeof buf, R"({"ph":"M","pid":%zu,"name":"process_sort_index","args":{"sort_index":%zu}})", r, r);
      event(buf);
      for (int lane = 0; lane < 2; ++lane) {
        std::snprintf(buf, sizeof buf, R"({"ph":"M","pid":%zu,"tid":%d,"name":"thread_name","args":{"name":"%s"}})", r, lane,
                      lane == 0 ? "compute" : "communication");
        event(buf);
      }
      for (const auto& s : ranks[r]) {
        std::snprintf(buf, sizeof buf, R"({"ph":"X","pid":%zu,"tid":%d,"ts":%.3f,"dur":%.3f,"cat":")", r, static_cast<int>(s.lane),
                      s.start_us, s.duration_us);
        event(std::string(buf) + escaped(s.category) + R"(","name":")" + escaped(s.name) + "\"}");
      }
    }
    return out + "\n]}\n";
  }

 private:
  static double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
  static std::string escaped(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  }
  mutable std::mutex mutex_;
  Clock::time_point origin_ = Clock::now();
  std::vector<Span> spans_;
};

/// \brief Records a span from its construction to its destruction (or to end()); with a null
/// timeline it does nothing, so tracing off costs one branch.
class SpanScope {
 public:
  SpanScope(Timeline* t, std::string name, const char* category, Span::Lane lane = Span::Lane::kCompute)
      : t_(t), lane_(lane), category_(category) {
    if (t_) {
      name_ = std::move(name);
      start_ = Timeline::Clock::now();
    }
  }
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;
  ~SpanScope() { end(); }
  void end() {
    if (!t_) return;
    t_->add(std::move(name_), category_, lane_, start_, Timeline::Clock::now());
    t_ = nullptr;
  }

 private:
  Timeline* t_;
  Span::Lane lane_;
  const char* category_;
  std::string name_;
  Timeline::Clock::time_point start_{};
};

}  // namespace v0
}  // namespace epl
