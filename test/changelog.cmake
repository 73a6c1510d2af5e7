# CHANGELOG.md's newest release heading ("## [x.y.z] - date", after [Unreleased]) names VERSION,
# the version include/epl/version.hpp gives CMake: a release does not go out unlisted.
file(STRINGS ${CHANGELOG} headings REGEX "^## \\[[0-9]+\\.[0-9]+\\.[0-9]+\\]")
list(GET headings 0 newest)
string(REGEX REPLACE "^## \\[([0-9.]+)\\].*" "\\1" listed "${newest}")
if(NOT listed STREQUAL VERSION)
  message(FATAL_ERROR "CHANGELOG.md's newest release is ${listed}, but include/epl/version.hpp says ${VERSION}: list the release")
endif()
message("CHANGELOG.md lists ${VERSION}")
