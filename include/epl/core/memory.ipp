#pragma once
/// \file
/// \brief The bodies of host_bytes, available_host_bytes and large_host_block (the header declares
/// them): included by that header in a header-only program, or compiled once into
/// epl::precompiled (core/linked.hpp).
#include <sys/mman.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

// The number after `key` in a /proc or /sys file of "key value" lines (or of one value, key ""), or -1.
EPL_LINKED std::int64_t file_number(const char* path, const char* key) noexcept {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  char line[256];
  std::int64_t found = -1;
  const std::size_t n = std::strlen(key);
  while (found < 0 && std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) != 0) continue;
    char* end = nullptr;
    const long long v = std::strtoll(line + n, &end, 10);
    if (end != line + n) found = v;
  }
  std::fclose(f);
  return found;
}

EPL_LINKED std::int64_t available_host_bytes() noexcept {
  std::int64_t left = -1;
  if (const std::int64_t avail = file_number("/proc/meminfo", "MemAvailable:"); avail >= 0)
    left = (avail + std::max<std::int64_t>(0, file_number("/proc/meminfo", "SwapFree:"))) * 1024;
  // cgroup v2: "max" (no limit) reads as no number
  const std::int64_t limit = file_number("/sys/fs/cgroup/memory.max", ""), used = file_number("/sys/fs/cgroup/memory.current", "");
  if (limit >= 0 && used >= 0) left = left < 0 ? std::max<std::int64_t>(0, limit - used) : std::min(left, std::max<std::int64_t>(0, limit - used));
  return left;
}

// A sanitizer's allocator (ASan, TSan, MSan) replaces malloc and leaves glibc's heap unused, so
// there is nothing of glibc's to trim; and glibc's malloc_trim then sets that heap up on its first
// call, unguarded, from whichever thread ranks call it at once: SEGV in mtrim under ASan, one run
// in three of auto_plan's test, its trials building Trainers on two thread ranks together.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EPL_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define EPL_SANITIZER_ALLOCATOR 1
#endif
#endif

EPL_LINKED void return_freed_host_memory() noexcept {
#if defined(__GLIBC__) && !defined(EPL_SANITIZER_ALLOCATOR)
  (void)malloc_trim(0);
#endif
}

EPL_LINKED void* large_host_block(DeviceId d, std::size_t size) {
  static std::mutex one_at_a_time;
  const std::lock_guard lock(one_at_a_time);
  const std::int64_t left = available_host_bytes();
  EPL_CHECK(leaves_reserve(static_cast<double>(size), left), "host allocation of ", mib(static_cast<double>(size)),
            " on ", d.str(), " would leave less than ", mib(kHostReserve), " of this machine's memory (", mib(static_cast<double>(left)),
            " available); reduce the batch or the model, the thread ranks that share this memory, or each rank's state "
            "(zero.level shards it across the ranks)");
  void* p = host_bytes(size);
  if (p) std::memset(p, 0, size);
  return p;
}

}  // namespace detail
}  // namespace v0
}  // namespace epl
