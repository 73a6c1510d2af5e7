#pragma once
/// \file
/// \brief The body of host_bytes (the header declares it): included by that header in a
/// header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include <sys/mman.h>

#include <cstdlib>

#include "epl/core/memory.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

EPL_LINKED void* host_bytes(std::size_t size) noexcept {
  const bool huge = size >= kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePage : 64, size) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  // Only whole huge pages: a tail marked too would be backed by a whole 2 MiB page when touched.
  // A system without THP (or with it off) refuses or ignores the advice; 4 KiB pages still work.
  if (huge) (void)madvise(p, size / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace detail
}  // namespace v0
}  // namespace epl
