#pragma once
/// \file
/// \brief FNV-1a, 64-bit: the hash the ranks compare their facts with (runtime/agreement.hpp) and
/// the planner's calibration files seal their text with (plan/calibration_file.hpp). Not a
/// cryptographic hash: it tells a changed byte, not a forged file.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace epl {
inline namespace v0 {
namespace detail {
inline constexpr std::uint64_t kFnvBasis = 1469598103934665603ull;
inline std::uint64_t hash_bytes(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;  // FNV-1a
  return h;
}
inline std::uint64_t hash_text(std::uint64_t h, std::string_view s) { return hash_bytes(h, s.data(), s.size()); }
template <class T>
std::uint64_t hash_value(std::uint64_t h, const T& v) {
  return hash_bytes(h, &v, sizeof v);
}
}  // namespace detail
}  // namespace v0
}  // namespace epl
