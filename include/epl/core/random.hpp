#pragma once
/// \file
/// \brief Counter-based random numbers: value i of stream s is a pure function of (seed, s, i).
///
/// Counter-based (not sequential) generation is what lets a shard of a parameter, a rank's
/// dropout mask or a recomputed activation reproduce exactly the values the single-device run
/// drew, without replaying a generator.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "epl/core/host_device.hpp"

namespace epl {
inline namespace v0 {

/// \brief SplitMix64 finaliser: a bijective mix of 64 bits.
EPL_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// \brief A stream key from a seed and a stream id (parameter ordinal, dropout call, ...).
EPL_HOST_DEVICE constexpr std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream) noexcept {
  return mix64(mix64(seed) ^ (stream * 0xd1b54a32d192ed03ull));
}
/// \brief Uniform in [0, 1) with 53 random bits.
EPL_HOST_DEVICE constexpr double uniform01(std::uint64_t key, std::uint64_t i) noexcept {
  return static_cast<double>(mix64(key ^ mix64(i)) >> 11) * 0x1.0p-53;
}
/// \brief Standard normal by Box-Muller over two counter draws.
inline double normal01(std::uint64_t key, std::uint64_t i) noexcept {
  double u1 = uniform01(key, 2 * i), u2 = uniform01(key, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace v0
}  // namespace epl
