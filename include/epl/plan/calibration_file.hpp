#pragma once
/// \file
/// \brief What the planner's calibration files (a profile, a cluster's speed and links) share:
/// opening one, showing a first line that is not one, and the check line that seals its text.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include "epl/core/error.hpp"
#include "epl/core/hash.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
// A calibration file's first line as a message may show it: at most 40 characters, each byte that
// is not printable ASCII as '?'.
inline std::string shown(const std::string& line) {
  std::string out = line.substr(0, 40);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}
// Why a file is not a calibration file, from its first line: what that line says, or that it is not
// text (a binary file's bytes shown as '?' told nothing; a stranger's finding).
inline std::string first_line(const std::string& line) {
  const bool text = std::all_of(line.begin(), line.end(), [](char c) { return c == '\t' || (c >= 0x20 && c <= 0x7e); });
  return text ? "its first line is \"" + shown(line) + "\"" : "it does not begin with a line of text";
}
// A calibration file's whole text; nullopt when there is none. A folder or other non-file at the
// path, or one that cannot be read, is an error naming it.
inline std::optional<std::string> read_calibration(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return std::nullopt;
  EPL_CHECK(std::filesystem::is_regular_file(st), "the planner's calibration file ", path, " is ",
            std::filesystem::is_directory(st) ? "a folder" : "not a regular file", "; give the path of a file (it is written there)");
  std::ifstream f(path);
  EPL_CHECK(static_cast<bool>(f), "the planner's calibration file ", path, " cannot be read; check its permissions or delete it");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
// A calibration file's first line: its format and version.
inline std::string version_line(const std::string& text) { return text.substr(0, text.find('\n')); }
// `body` (whole lines) with its check line: "end" and the FNV-1a hash of everything before it. A
// file whose digits were edited or damaged then fails to load, where its figures, still numbers,
// would have been read (a stranger changed one digit of a profile and auto_plan used it).
inline std::string sealed(const std::string& body) {
  char end[32];
  std::snprintf(end, sizeof end, "end %016llx\n", static_cast<unsigned long long>(epl::detail::hash_text(epl::detail::kFnvBasis, body)));
  return body + end;
}
// The lines of a sealed file's text after its version line and before its check line, when the
// check line's hash is that text's; an error naming the file otherwise (cut short, edited, or damaged).
inline std::istringstream sealed_lines(const std::string& text, const std::filesystem::path& path) {
  const std::size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  const std::string body = last == std::string::npos ? std::string() : text.substr(0, last + 1);
  EPL_CHECK(last != std::string::npos && sealed(body) == text, "the planner's calibration file ", path,
            " is truncated, edited or damaged (its last line does not check its contents); delete it to measure again");
  std::istringstream lines(body);
  std::string version;
  std::getline(lines, version);
  return lines;
}
// The most a unit's time may be, in seconds per row or per call, in a calibration file: past it the
// file is not a measurement.
inline constexpr double kMostSeconds = 1e4;
// The most a unit's bytes per row may be, either way, in a calibration file (1 TiB): past it the
// file is not a measurement, and the estimate's sums could overflow.
inline constexpr std::int64_t kMostBytesPerRow = std::int64_t{1} << 40;
}  // namespace detail

}  // namespace plan
}  // namespace v0
}  // namespace epl
