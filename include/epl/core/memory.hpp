#pragma once
/// \file
/// \brief Memory accounting per device and per category, and the host caching allocator.
///
/// Every tensor's storage is charged to one (device, category) account while it lives, so
/// the savings of ZeRO, checkpointing and offload are measured in bytes, not claimed.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {

/// \brief Where memory lives: a CPU device's memory, one CUDA device, the host pool a device
/// offloads to (offload.level; on CUDA pinned memory the device's kernels can reach), or the
/// memory of device::Isolated (a CPU device whose memory host code cannot touch: the test
/// double of a GPU's memory space).
enum class DeviceKind : std::uint8_t { kCpu, kCuda, kHost, kIsolated };

/// \brief Whether host code may read and write memory of this kind through its pointer (CPU and
/// host-pool memory); a GPU's and device::Isolated's memory only moves by the device's copies.
constexpr bool host_reachable(DeviceKind k) noexcept { return k == DeviceKind::kCpu || k == DeviceKind::kHost; }

/// \brief A device by kind and index. CPU thread ranks each get their own index, so their
/// accounts are separate even though they share one host; thread ranks that share one GPU each
/// get their own `slot` (cuda:0/1), for the same reason.
struct DeviceId {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  int slot = 0;
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
  friend auto operator<=>(const DeviceId&, const DeviceId&) = default;
  [[nodiscard]] std::string str() const {
    constexpr const char* names[] = {"cpu:", "cuda:", "host:", "isolated:"};
    std::string out = names[static_cast<int>(kind)];  // appended: g++ 12's -Wstringop-overflow misreads the + chain at -O3
    out.append(std::to_string(index));
    if (slot != 0) out.append("/").append(std::to_string(slot));
    return out;
  }
};

/// \brief What a buffer is for; each category is accounted separately.
enum class MemoryCategory : std::uint8_t {
  kParameters, kGradients, kOptimizerState, kActivations, kCommunication, kWorkspace
};
inline constexpr int kMemoryCategories = 6;

constexpr const char* name_of(MemoryCategory c) {
  constexpr const char* names[] = {"parameters", "gradients", "optimizer_state",
                                   "activations", "communication", "workspace"};
  return names[static_cast<int>(c)];
}

/// \brief A snapshot of one device's accounting.
struct MemoryStats {
  std::array<std::int64_t, kMemoryCategories> current{};
  std::array<std::int64_t, kMemoryCategories> peak{};
  std::int64_t total_current = 0;
  std::int64_t total_peak = 0;
  std::int64_t reserved = 0;  ///< bytes held by the allocator (live plus cached)
  [[nodiscard]] std::int64_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  [[nodiscard]] std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
};

/// \brief The live counters of one device. Thread-safe; counters only move through charge().
class MemoryAccount {
 public:
  void charge(MemoryCategory c, std::int64_t bytes) noexcept {
    auto i = static_cast<int>(c);
    raise_peak(peak_[i], current_[i].fetch_add(bytes) + bytes);
    raise_peak(total_peak_, total_.fetch_add(bytes) + bytes);
  }
  void reserve(std::int64_t bytes) noexcept { reserved_.fetch_add(bytes); }
  [[nodiscard]] MemoryStats stats() const noexcept {
    MemoryStats s;
    for (int i = 0; i < kMemoryCategories; ++i) {
      s.current[i] = current_[i].load();
      s.peak[i] = peak_[i].load();
    }
    s.total_current = total_.load();
    s.total_peak = total_peak_.load();
    s.reserved = reserved_.load();
    return s;
  }
  /// \brief Sets every peak to the current value, so a test can measure one phase.
  void reset_peaks() noexcept {
    for (int i = 0; i < kMemoryCategories; ++i) peak_[i].store(current_[i].load());
    total_peak_.store(total_.load());
  }

 private:
  static void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t v) noexcept {
    auto p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {}
  }
  std::array<std::atomic<std::int64_t>, kMemoryCategories> current_{};
  std::array<std::atomic<std::int64_t>, kMemoryCategories> peak_{};
  std::atomic<std::int64_t> total_{0}, total_peak_{0}, reserved_{0};
};

/// \brief The account of a device. Accounts are never destroyed: a static tensor or allocator
/// may still charge them while the program's other statics are being destroyed.
inline MemoryAccount& memory_account(DeviceId d) {
  static auto* mutex = new std::mutex;
  static auto* accounts = new std::map<DeviceId, std::unique_ptr<MemoryAccount>>;
  std::lock_guard lock(*mutex);
  auto& slot = (*accounts)[d];
  if (!slot) slot = std::make_unique<MemoryAccount>();
  return *slot;
}
/// \brief The accounting of a device now: current and peak bytes per category.
inline MemoryStats memory_stats(DeviceId d) { return memory_account(d).stats(); }

/// \brief Something that hands out raw bytes on one device. Implementations: HostAllocator,
/// the CUDA device allocator (device/cuda).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  [[nodiscard]] virtual DeviceId device() const noexcept = 0;
};

/// \brief An Allocator that caches freed blocks by rounded size and hands them out again, over
/// raw allocate/release functions of one device. Caching matters: a training step frees and
/// reallocates the same sizes every step; host memory returned to the system is page-faulted
/// anew, and cudaMalloc synchronises the device. What a step does not reuse goes back: trim()
/// (the Trainer's, after each step, evaluation and prediction) returns the blocks of each size
/// that stayed cached through the whole time since the last trim (start-up's whole-model
/// buffers under ZeRO-3, another batch's activations), so a run's memory follows what it uses,
/// not every size it ever drew. A Raw that declares kRetryAfterRelease gets its failed
/// allocation tried once more after every cached block is returned.
/// \tparam Raw has static void* allocate(DeviceId, std::size_t) and void release(void*) noexcept;
/// optionally static void released() noexcept, called after a trim released blocks
template <class Raw>
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(DeviceId d) : device_(d) {}
  ~CachingAllocator() override { release_cached(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(std::size_t bytes) override {
    auto size = round(bytes);
    {
      std::lock_guard lock(mutex_);
      auto& cls = free_[size];
      if (!cls.blocks.empty()) {
        void* p = cls.blocks.back();
        cls.blocks.pop_back();
        cls.idle = std::min(cls.idle, cls.blocks.size());
        return p;
      }
      cls.idle = 0;
    }
    void* p = nullptr;
    if constexpr (requires { Raw::kRetryAfterRelease; }) {
      try {
        p = Raw::allocate(device_, size);
      } catch (const Error&) {  // the cache's other sizes may hold what this one needs
        if (release_cached() == 0) throw;
        p = Raw::allocate(device_, size);
      }
    } else {
      p = Raw::allocate(device_, size);
    }
    memory_account(device_).reserve(static_cast<std::int64_t>(size));
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (!p) return;
    std::lock_guard lock(mutex_);
    try { free_[round(bytes)].blocks.push_back(p); } catch (...) { release_one(p, round(bytes)); }
  }
  [[nodiscard]] DeviceId device() const noexcept override { return device_; }
  /// \brief Returns every cached block to the device; the bytes returned.
  std::size_t release_cached() noexcept { return release(true); }
  /// \brief Returns, of each size, the cached blocks that none of the allocations since the last
  /// trim needed (the fewest the size held free in that time), and starts that count anew; the
  /// bytes returned. A size a step draws each step keeps its blocks.
  std::size_t trim() noexcept { return release(false); }

 private:
  struct Blocks {
    std::vector<void*> blocks;
    std::size_t idle = 0;  // the fewest blocks cached at once since the last trim: none of them was needed
  };
  static std::size_t round(std::size_t bytes) {
    std::size_t step = bytes < (1u << 20) ? 256 : (1u << 16);
    return std::max<std::size_t>(step, (bytes + step - 1) / step * step);
  }
  void release_one(void* p, std::size_t size) noexcept {
    Raw::release(p);
    memory_account(device_).reserve(-static_cast<std::int64_t>(size));
  }
  std::size_t release(bool all) noexcept {
    std::vector<std::pair<void*, std::size_t>> gone;
    {
      std::lock_guard lock(mutex_);
      for (auto it = free_.begin(); it != free_.end();) {
        auto& cls = it->second;
        const std::size_t n = all ? cls.blocks.size() : std::min(cls.idle, cls.blocks.size());
        for (std::size_t i = 0; i < n; ++i) {
          try { gone.emplace_back(cls.blocks.back(), it->first); } catch (...) { release_one(cls.blocks.back(), it->first); }
          cls.blocks.pop_back();
        }
        cls.idle = cls.blocks.size();
        it = cls.blocks.empty() ? free_.erase(it) : std::next(it);
      }
    }
    std::size_t bytes = 0;
    for (const auto& [p, size] : gone) {
      release_one(p, size);
      bytes += size;
    }
    if constexpr (requires { Raw::released(); }) {
      if (bytes > 0) Raw::released();
    }
    return bytes;
  }
  DeviceId device_;
  std::mutex mutex_;
  std::map<std::size_t, Blocks> free_;
};

namespace detail {
/// Bytes of host memory at least kHugePage long start on a huge-page boundary.
inline constexpr std::size_t kHugePage = std::size_t{2} << 20;
/// Host bytes for tensors and kernel workspaces, released with std::free; nullptr if the system
/// has none. 64-byte aligned. A block of kHugePage bytes or more starts on a kHugePage boundary,
/// and its whole huge pages are marked for Linux's transparent huge pages (madvise
/// MADV_HUGEPAGE; this is what Debian's default THP mode, `madvise`, waits for). A GEMM over
/// operands in 4 KiB pages misses the TLB at every row of a tile: in a virtual machine each miss
/// walks two page tables (bench_gemm, docs/benchmarks.md).
EPL_LINKED void* host_bytes(std::size_t size) noexcept;

/// Bytes of memory this process may still fill: Linux's MemAvailable plus free swap
/// (/proc/meminfo), and no more than its cgroup's limit less its usage (cgroup v2's memory.max
/// and memory.current); -1 where neither can be read.
EPL_LINKED std::int64_t available_host_bytes() noexcept;

/// What a large host block must leave of the machine's memory (available_host_bytes): room for
/// the small blocks, the stacks and the libraries.
inline constexpr std::int64_t kHostReserve = std::int64_t{256} << 20;
/// Whether taking `bytes` more leaves kHostReserve of `left` (available_host_bytes; -1, not known: yes).
[[nodiscard]] constexpr bool leaves_reserve(double bytes, std::int64_t left) noexcept {
  return left < 0 || bytes + static_cast<double>(kHostReserve) <= static_cast<double>(left);
}
/// Bytes as whole MiB, for messages.
[[nodiscard]] inline std::string mib(double bytes) { return std::to_string(static_cast<std::int64_t>(bytes / (1 << 20))) + " MiB"; }

/// Hands the C library's freed host memory back to the system (glibc's malloc_trim: blocks below
/// its mmap threshold stay in its heap when freed); nothing elsewhere.
EPL_LINKED void return_freed_host_memory() noexcept;

/// A large host block (kHugePage bytes or more) for `d`, from host_bytes (nullptr as it gives),
/// taken and filled while no other thread takes one, and refused if it would not leave
/// kHostReserve of the memory available. Thread ranks share one machine's memory: unchecked, each
/// took what fitted when it looked, together they exhausted it, and the kernel killed the process
/// without a message (a stranger's 5000 ranks). Filled at once, the block is in memory before the
/// next one is weighed.
EPL_LINKED void* large_host_block(DeviceId d, std::size_t size);

/// Host memory, from host_bytes; a large block through large_host_block.
struct HostMemory {
  static constexpr bool kRetryAfterRelease = true;  // a cached block of another size is host memory too
  static void* allocate(DeviceId d, std::size_t size) {
    void* p = size >= kHugePage ? large_host_block(d, size) : host_bytes(size);
    EPL_CHECK(p != nullptr, "host allocation of ", size, " bytes failed on ", d.str(), "; reduce the batch or model size");
    return p;
  }
  static void release(void* p) noexcept { std::free(p); }
  static void released() noexcept { return_freed_host_memory(); }
};
}  // namespace detail

/// \brief Host memory, 64-byte aligned, freed blocks cached by rounded size.
using HostAllocator = CachingAllocator<detail::HostMemory>;

/// \brief The caching allocator of device `id` over Raw: one per process, kind of memory and id,
/// never destroyed, so a tensor may outlive the device object that made it (its bytes go back to
/// this cache, for the next device object of that id) and static tensors may be freed at exit.
template <class Raw>
CachingAllocator<Raw>& device_pool(DeviceId id) {
  static auto* mutex = new std::mutex;
  static auto* pools = new std::map<DeviceId, std::unique_ptr<CachingAllocator<Raw>>>;
  std::lock_guard lock(*mutex);
  auto& slot = (*pools)[id];
  if (!slot) slot = std::make_unique<CachingAllocator<Raw>>(id);
  return *slot;
}

namespace detail {
inline HostAllocator& host_pool(DeviceId id) { return device_pool<HostMemory>(id); }
}  // namespace detail

/// \brief The process-wide host allocator of a CPU device index (never destroyed, like the
/// accounts: static tensors may be freed into it at exit).
inline HostAllocator& host_allocator(int index = 0) {
  return detail::host_pool(DeviceId{DeviceKind::kCpu, index});
}
/// \brief The host pool CPU device `index` offloads to (offload.level): host memory too, on an
/// account of its own (host:index), so what offload moves off the device is measured.
inline HostAllocator& offload_allocator(int index = 0) {
  return detail::host_pool(DeviceId{DeviceKind::kHost, index});
}

}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/core/memory.ipp"
#endif
