#pragma once
/// \file
/// \brief The bodies of plan::save_profile and plan::load_profile (the header declares them): included by
/// that header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/plan/profile.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

EPL_LINKED void save_profile(const Profile& p, const std::filesystem::path& path, const std::string& key) {
  EPL_CHECK(key.find_first_of("\r\n") == std::string::npos, "plan::save_profile: the key \"", detail::shown(key),
            "\" holds a line break; a profile's key is one line (its file could never be read back)");
  std::ostringstream f;
  f.precision(17);
  f << "epl-profile 7\n" << key << "\n" << p.rows << ' ' << p.tokens_per_row << ' ' << p.input_bytes << ' ' << p.tensor << ' ' << p.repeats
    << ' ' << p.spread << ' ' << p.row_multiple << ' ' << p.units.size() << ' ' << static_cast<int>(p.matmul) << '\n';
  for (const auto& u : p.units)
    f << u.name << ' ' << u.parameters << ' ' << u.macs_per_token << ' ' << u.activation_bytes << ' ' << u.output_bytes << ' '
      << u.backward_bytes << ' ' << u.weight_bytes << ' ' << u.split_backward_bytes << ' ' << u.forward_seconds << ' '
      << u.backward_seconds << ' ' << u.fixed_seconds << '\n';
  // sealed: a file cut short anywhere, even inside the last figure, or edited, fails its check line
  files::write_file(path, detail::sealed(f.str()), "planner's calibration file");  // whole or not at all: a reader sees the old or the new
}

EPL_LINKED std::optional<Profile> load_profile(const std::filesystem::path& path, const std::string& key) {
  const auto text = detail::read_calibration(path);
  if (!text) return std::nullopt;
  const std::string magic = detail::version_line(*text);
  EPL_CHECK(magic.rfind("epl-profile ", 0) == 0, "the planner's calibration file ", path, " is not one (",
            detail::first_line(magic), "); delete it to measure again");
  EPL_CHECK(magic == "epl-profile 7" || magic == "epl-profile 6" || magic == "epl-profile 5" || magic == "epl-profile 4" ||
                magic == "epl-profile 3" || magic == "epl-profile 2",
            "the planner's calibration file ", path, " was written by another version of epl (\"", detail::shown(magic),
            "\"; this one reads \"epl-profile 7\"); delete it to measure again");
  // an older probe's (split layers measured whole; no spread; no weight-pass bytes; no row
  // multiple; no check line): measure again
  if (magic != "epl-profile 7") return std::nullopt;
  auto f = detail::sealed_lines(*text, path);
  std::string saved;
  EPL_CHECK(static_cast<bool>(std::getline(f, saved)), "the planner's calibration file ", path,
            " is truncated or corrupt (no key line); delete it to measure again");
  if (saved != key) return std::nullopt;
  Profile p;
  std::size_t n = 0;
  int matmul = -1;
  f >> p.rows >> p.tokens_per_row >> p.input_bytes >> p.tensor >> p.repeats >> p.spread >> p.row_multiple >> n >> matmul;
  p.matmul = static_cast<DType>(matmul);
  EPL_CHECK(f.good() && n > 0 && n < (1u << 24) && p.tensor >= 1 && p.repeats >= 1 && p.spread >= 0 && std::isfinite(p.spread) &&
                p.row_multiple >= 1 && p.row_multiple <= p.tensor &&
                (p.matmul == DType::kF32 || p.matmul == DType::kBF16 || p.matmul == DType::kF16),
            "the planner's calibration file ", path, " is truncated or corrupt; delete it to measure again");
  p.units.resize(n);
  for (auto& u : p.units)
    f >> u.name >> u.parameters >> u.macs_per_token >> u.activation_bytes >> u.output_bytes >> u.backward_bytes >> u.weight_bytes >>
        u.split_backward_bytes >> u.forward_seconds >> u.backward_seconds >> u.fixed_seconds;
  std::string more;
  EPL_CHECK(!f.fail() && !(f >> more) && p.rows >= 1 && p.tokens_per_row >= 1 && p.input_bytes >= 0,
            "the planner's calibration file ", path, " is truncated or corrupt; delete it to measure again");
  for (const auto& u : p.units) {
    auto bytes = [](std::int64_t b, bool may_be_negative) {
      return b <= detail::kMostBytesPerRow && (may_be_negative ? b >= -detail::kMostBytesPerRow : b >= 0);
    };
    const bool sane = u.parameters >= 0 && u.macs_per_token >= 0 && bytes(u.activation_bytes, true) && bytes(u.output_bytes, false) &&
                      bytes(u.backward_bytes, false) && bytes(u.weight_bytes, false) && bytes(u.split_backward_bytes, false) &&
                      std::isfinite(u.macs_per_token) && u.forward_seconds >= 0 && u.backward_seconds >= 0 && u.fixed_seconds >= 0 &&
                      u.forward_seconds <= detail::kMostSeconds && u.backward_seconds <= detail::kMostSeconds &&
                      u.fixed_seconds <= detail::kMostSeconds;
    EPL_CHECK(sane, "the planner's calibration file ", path, " holds impossible figures for unit ", u.name,
              " (negative, not finite, a time over ", detail::kMostSeconds, " s, or bytes a row over ", detail::kMostBytesPerRow,
              "); delete it to measure again");
  }
  return p;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
