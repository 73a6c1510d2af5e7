#pragma once
/// \file
/// \brief epl's version, the one place it is written: CMake's project version and the installed
/// package's (find_package(epl 0.2)) are read from here. A release that changes what a user's
/// program writes raises the minor version (0.x) and lists the change in CHANGELOG.md.
#define EPL_VERSION_MAJOR 0
#define EPL_VERSION_MINOR 2
#define EPL_VERSION_PATCH 0
#define EPL_VERSION_STRING "0.2.0"

namespace epl {
inline namespace v0 {
/// \brief The version this header belongs to, as numbers.
struct Version {
  int major, minor, patch;
};
inline constexpr Version kVersion{EPL_VERSION_MAJOR, EPL_VERSION_MINOR, EPL_VERSION_PATCH};
}  // namespace v0
}  // namespace epl
