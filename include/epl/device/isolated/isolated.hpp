#pragma once
/// \file
/// \brief device::Isolated — a CPU device whose memory lives in a space of its own that host code
/// cannot touch, as a GPU's cannot: the test double that runs the multi-rank GPU code paths in CI.
///
/// Its tensors hold addresses in a reserved range mapped PROT_NONE: host code that reads or
/// writes one (a loop over `data<T>()`, a `memcpy` where the device's copy belongs) faults at
/// once, and the fault is reported as a wrong-space access naming the address (a SIGSEGV handler
/// that recognises the range). The same bytes are mapped a second time, readable, at a fixed
/// distance: the device's own operations, and its communication lane, translate each tensor to
/// that second mapping and run device::Cpu's kernels on it. Kernels also refuse tensors in a CPU
/// device's memory (a GPU cannot read pageable host memory); the host pool it offloads to
/// (host_empty, a GPU's pinned memory) is reachable, as on CUDA.
///
/// Operations run at once, in the calling thread: the lane's ready() and after() order nothing
/// here, so stream-ordering is proven on a GPU only (tools/gpu_check.sh).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "epl/device/cpu/cpu.hpp"
#include "epl/device/cpu/reduce.hpp"
#include "epl/device/lane.hpp"

namespace epl {
inline namespace v0 {
namespace device {

namespace detail {

/// The process's isolated memory space: the range tensors point into (PROT_NONE, never
/// touchable) and its readable twin, `kBytes` each, reserved once; blocks are handed out by a
/// bump pointer and reused by size.
class IsolatedSpace {
 public:
  static constexpr std::size_t kBytes = std::size_t{8} << 30;

  static IsolatedSpace& get() {
    static auto* space = new IsolatedSpace;  // never destroyed: a static tensor may outlive main
    return *space;
  }
  /// Whether p points into the untouchable range.
  [[nodiscard]] bool holds(const void* p) const noexcept { return in_range(reinterpret_cast<std::uintptr_t>(p)); }
  /// Where the device's kernels read and write p (p itself when it is not in the range).
  [[nodiscard]] void* open(const void* p) const noexcept {
    if (!holds(p)) return const_cast<void*>(p);
    return static_cast<char*>(twin_) + (static_cast<const char*>(p) - static_cast<const char*>(fenced_));
  }
  void* allocate(std::size_t n, DeviceId d) {
    n = (std::max<std::size_t>(n, 1) + 255) / 256 * 256;  // 256-byte aligned, as cudaMalloc's
    std::lock_guard lock(mutex_);
    auto& reuse = free_[n];
    if (!reuse.empty()) {
      void* p = reuse.back();
      reuse.pop_back();
      return p;
    }
    EPL_CHECK(next_ + n <= kBytes, d.str(), ": device::Isolated's memory space of ", kBytes >> 30, " GiB is full (", n,
              " bytes more asked); device::Isolated is for tests: use a smaller model or batch");
    void* p = static_cast<char*>(fenced_) + next_;
    sizes_[p] = n;
    next_ += n;
    return p;
  }
  /// Whether [p, p + n) lies inside one block handed out (a buffer's count past its tensor's end
  /// is a wrong size, which a GPU would not report either).
  [[nodiscard]] bool spans(const void* p, std::size_t n) const {
    std::lock_guard lock(mutex_);
    auto it = sizes_.upper_bound(const_cast<void*>(p));
    if (it == sizes_.begin()) return false;
    --it;
    const auto* begin = static_cast<const char*>(it->first);
    return static_cast<const char*>(p) + n <= begin + it->second;
  }
  void release(void* p) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    // the whole pages inside the block go back (they read as zeros next time); a page it shares
    // with a neighbour stays, or that neighbour's bytes would be lost
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(open(p)) + page - 1) / page * page,
               end = (reinterpret_cast<std::uintptr_t>(open(p)) + it->second) / page * page;
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    try { free_[it->second].push_back(p); } catch (...) {}
  }

 private:
  IsolatedSpace() {
    fenced_ = mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    twin_ = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    EPL_CHECK(fenced_ != MAP_FAILED && twin_ != MAP_FAILED, "device::Isolated could not reserve ", 2 * (kBytes >> 30),
              " GiB of address space (mmap); it needs 64-bit addressing and overcommit of unused pages");
    fenced_begin_.store(reinterpret_cast<std::uintptr_t>(fenced_));
    install_handler();
  }
  // A fault in the untouchable range: host code touched device memory. Says so (async-signal-safe
  // writes only), then lets the signal take its default course.
  static void on_fault(int sig, siginfo_t* info, void* context) {
    const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
    if (in_range(a)) {
      char hex[2 + 16 + 1];
      hex[0] = '0', hex[1] = 'x';
      for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(a >> (60 - 4 * i)) & 0xf];
      hex[18] = '\n';
      constexpr char what[] =
          "epl: wrong memory space: host code read or wrote device::Isolated memory, which host code cannot touch (a GPU's "
          "memory the same way): move it with the device's copy, upload or download, or through a communicator's device "
          "lane. Address ";
      (void)!write(STDERR_FILENO, what, sizeof what - 1);
      (void)!write(STDERR_FILENO, hex, sizeof hex);
      signal(SIGSEGV, SIG_DFL);  // the access runs again and ends the process with SIGSEGV
      return;
    }
    const struct sigaction& before = previous();
    if (before.sa_flags & SA_SIGINFO) {
      if (before.sa_sigaction) before.sa_sigaction(sig, info, context);
    } else if (before.sa_handler != SIG_IGN && before.sa_handler != SIG_DFL && before.sa_handler) {
      before.sa_handler(sig);
    } else {
      signal(SIGSEGV, SIG_DFL);
    }
  }
  // Whether address a is in the untouchable range (async-signal-safe: one atomic load).
  static bool in_range(std::uintptr_t a) noexcept {
    const auto b = fenced_begin_.load();
    return b != 0 && a >= b && a < b + kBytes;
  }
  static struct sigaction& previous() {
    static struct sigaction before {};
    return before;
  }
  static void install_handler() {
    struct sigaction sa {};
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous());
  }

  void* fenced_ = nullptr;
  void* twin_ = nullptr;
  static inline std::atomic<std::uintptr_t> fenced_begin_{0};
  mutable std::mutex mutex_;
  std::size_t next_ = 0;
  std::map<void*, std::size_t> sizes_;
  std::map<std::size_t, std::vector<void*>> free_;
};

/// Raw memory of an isolated device, for CachingAllocator.
struct IsolatedMemory {
  static void* allocate(DeviceId d, std::size_t size) { return IsolatedSpace::get().allocate(size, d); }
  static void release(void* p) noexcept { IsolatedSpace::get().release(p); }
};

/// The lane of an isolated device: copies and reductions on the readable twin, at once.
class IsolatedLane final : public Lane {
 public:
  explicit IsolatedLane(DeviceId d) : id_(d) {}
  [[nodiscard]] DeviceId device() const override { return id_; }
  [[nodiscard]] std::shared_ptr<void> ready() const override { return nullptr; }
  void after(const std::shared_ptr<void>&) const override {}
  void copy(void* dst, const void* src, std::size_t n) const override {
    check(dst, n, "copy"), check(src, n, "copy");
    if (n) std::memmove(space().open(dst), space().open(src), n);
  }
  void reduce(void* dst, std::span<const void* const> srcs, std::int64_t count, DType t, Reduction r, int divisor) const override {
    const auto bytes = static_cast<std::size_t>(count) * size_of(t);
    check(dst, bytes, "reduce");
    for (const void* s : srcs) check(s, bytes, "reduce");
    if (count == 0 || srcs.empty()) return;
    thread_local std::vector<char> staging(std::size_t{256} << 10);  // the rank's thread and its communicator's worker
    thread_local std::vector<const void*> open;
    open.resize(srcs.size());
    std::transform(srcs.begin(), srcs.end(), open.begin(), [](const void* s) { return space().open(s); });
    detail::reduce_in_order(space().open(dst), open, count, t, r, divisor, staging);
  }
  [[nodiscard]] std::shared_ptr<void> allocate(std::size_t n) const override {
    return {space().allocate(n, id_), [](void* p) { IsolatedSpace::get().release(p); }};
  }
  void complete() const override {}

 private:
  static IsolatedSpace& space() { return IsolatedSpace::get(); }
  // A lane moves device memory only: a host pointer here is a wrong-space bug of its caller, and
  // bytes past the end of the block a pointer is in are a wrong size.
  void check(const void* p, std::size_t n, const char* op) const {
    EPL_CHECK(p == nullptr || space().holds(p), "the lane of ", id_.str(), " was given host memory to ", op,
              " (a GPU's lane would read it as a device address): pass device buffers, or move host values with the host "
              "backend");
    EPL_CHECK(p == nullptr || n == 0 || space().spans(p, n), "the lane of ", id_.str(), " was asked to ", op, " ", n,
              " bytes at a device address whose allocation ends sooner: a Buffer's count is larger than its memory");
  }
  DeviceId id_;
};

}  // namespace detail

/// \brief A CPU device whose memory host code cannot touch (see the file's brief). Models
/// device::trainable with device::Cpu's kernels, f32 compute.
class Isolated {
 public:
  static constexpr DeviceKind kind = DeviceKind::kIsolated;
  static constexpr std::string_view kName = "device::Isolated";
  template <class T>
  static constexpr bool kComputes = Cpu::kComputes<T>;

  /// \param index the device's accounting index (one per thread rank, as device::Cpu's)
  explicit Isolated(int index = 0)
      : cpu_(checked(index)), alloc_(&device_pool<detail::IsolatedMemory>(DeviceId{DeviceKind::kIsolated, index})),
        lane_(std::make_shared<detail::IsolatedLane>(DeviceId{DeviceKind::kIsolated, index})) {}

  [[nodiscard]] DeviceId id() const noexcept { return alloc_->device(); }
  [[nodiscard]] Allocator& allocator() const noexcept { return *alloc_; }
  [[nodiscard]] int threads() const { return cpu_.threads(); }
  void synchronize() const noexcept {}
  /// \brief As device::Cpu's: this device's cached blocks no allocation since the last trim
  /// needed, and its host pool's, go back; the bytes.
  std::size_t trim_cache(bool all = false) const noexcept { return (all ? alloc_->release_cached() : alloc_->trim()) + cpu_.trim_cache(all); }
  /// \brief The lane a thread communicator moves this device's buffers with.
  [[nodiscard]] std::shared_ptr<Lane> lane() const { return lane_; }

  // ---- memory ------------------------------------------------------------------------
  [[nodiscard]] Tensor empty(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    return Tensor(*alloc_, s, t, c);
  }
  [[nodiscard]] Tensor zeros(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const {
    Tensor x = empty(s, t, c);
    std::memset(space().open(x.raw()), 0, x.bytes());
    return x;
  }
  /// \brief A tensor in the host pool this device offloads to (a GPU's pinned memory): host code
  /// and this device's kernels both reach it.
  [[nodiscard]] Tensor host_empty(Shape s, DType t, MemoryCategory c) const { return cpu_.host_empty(s, t, c); }
  [[nodiscard]] Tensor host_zeros(Shape s, DType t, MemoryCategory c) const { return cpu_.host_zeros(s, t, c); }
  /// dst = src, between this device's memory and its host pool in either direction too.
  void copy(const Tensor& src, const Tensor& dst) const {
    detail::same(src, dst, "copy");
    std::memmove(reached(dst, "copy").raw(), reached(src, "copy").raw(), src.bytes());
  }
  /// n bytes from src to dst, wherever either lives (device or host memory): the copy a world of
  /// one rank moves buffers with (comm::Communicator::solo), as device::Cuda::copy_bytes.
  void copy_bytes(void* dst, const void* src, std::size_t n) const {
    if (n) std::memmove(space().open(dst), space().open(src), n);
  }
  struct CopyTicket {};
  CopyTicket copy_ahead(const Tensor& src, const Tensor& dst) const {
    copy(src, dst);
    return {};
  }
  void await(const CopyTicket&) const {}
  /// Host -> device.
  void upload(const void* host, const Tensor& dst) const {
    EPL_CHECK(!space().holds(host), "upload to ", dst.device().str(), " from device memory: use copy between device tensors");
    std::memcpy(reached(dst, "upload").raw(), host, dst.bytes());
  }
  /// Device -> host.
  void download(const Tensor& src, void* host) const {
    EPL_CHECK(!space().holds(host), "download from ", src.device().str(), " into device memory: use copy between device tensors");
    std::memcpy(host, reached(src, "download").raw(), src.bytes());
  }

  // ---- every kernel: device::Cpu's on the readable twin -------------------------------
#define EPL_ISOLATED_OPERATION(op)                                                \
  template <class... A>                                                           \
  decltype(auto) op(const A&... a) const {                                        \
    return cpu_.op(pass(a, #op)...);                                              \
  }
  EPL_ISOLATED_OPERATION(fill)
  EPL_ISOLATED_OPERATION(cast)
  EPL_ISOLATED_OPERATION(gemm)
  EPL_ISOLATED_OPERATION(gemm_batched)
  EPL_ISOLATED_OPERATION(add)
  EPL_ISOLATED_OPERATION(mul)
  EPL_ISOLATED_OPERATION(axpy)
  EPL_ISOLATED_OPERATION(scale)
  EPL_ISOLATED_OPERATION(add_row_vector)
  EPL_ISOLATED_OPERATION(sum_rows)
  EPL_ISOLATED_OPERATION(sum_squares)
  EPL_ISOLATED_OPERATION(gelu)
  EPL_ISOLATED_OPERATION(relu)
  EPL_ISOLATED_OPERATION(gelu_backward)
  EPL_ISOLATED_OPERATION(relu_backward)
  EPL_ISOLATED_OPERATION(map)
  EPL_ISOLATED_OPERATION(layer_norm)
  EPL_ISOLATED_OPERATION(layer_norm_backward)
  EPL_ISOLATED_OPERATION(softmax_causal)
  EPL_ISOLATED_OPERATION(softmax_causal_backward)
  EPL_ISOLATED_OPERATION(embedding)
  EPL_ISOLATED_OPERATION(embedding_backward)
  EPL_ISOLATED_OPERATION(softmax_rows)
  EPL_ISOLATED_OPERATION(softmax_rows_backward)
  EPL_ISOLATED_OPERATION(gather_rows)
  EPL_ISOLATED_OPERATION(scatter_add_rows)
  EPL_ISOLATED_OPERATION(row_dot)
  EPL_ISOLATED_OPERATION(row_max)
  EPL_ISOLATED_OPERATION(cross_entropy_stats)
  EPL_ISOLATED_OPERATION(cross_entropy_part_backward)
  EPL_ISOLATED_OPERATION(cross_entropy)
  EPL_ISOLATED_OPERATION(cross_entropy_backward)
  EPL_ISOLATED_OPERATION(dropout)
  EPL_ISOLATED_OPERATION(dropout_columns)
  EPL_ISOLATED_OPERATION(permute_heads)
  EPL_ISOLATED_OPERATION(sgd_update)
  EPL_ISOLATED_OPERATION(momentum_update)
  EPL_ISOLATED_OPERATION(adamw_update)
#undef EPL_ISOLATED_OPERATION

 private:
  static detail::IsolatedSpace& space() { return detail::IsolatedSpace::get(); }
  // A kernel's argument as the kernel may read it: this space's tensors through the readable twin,
  // host-pool tensors as they are; a CPU device's tensor is refused, as a GPU's kernel could not
  // read it. Arguments that are not tensors pass unchanged.
  template <class A>
  static const A& pass(const A& a, const char*) { return a; }
  Tensor pass(const Tensor& t, const char* op) const { return t.defined() ? reached(t, op) : t; }
  Tensor reached(const Tensor& t, const char* op) const {
    const DeviceId d = t.device();
    if (d.kind == DeviceKind::kHost) return t;
    EPL_CHECK(d.kind == DeviceKind::kIsolated, "device::Isolated's ", op, " was given a tensor in ", d.str(),
              " memory, which a device's kernels cannot read (as a GPU's cannot read pageable host memory): upload it to the "
              "device first (device.upload, or the loader's next(device))");
    EPL_CHECK(d == id(), id().str(), "'s ", op, " was given a tensor of ", d.str(), ": a device's operations take its own "
              "tensors (on GPUs another GPU's memory, or another rank's on a shared GPU, is not ordered with this stream); move "
              "it with a communicator, or make it on this device");
    return Tensor::borrowed(space().open(t.raw()), t.shape(), t.dtype(), cpu_.id(), t.category());
  }

  static int checked(int index) {
    EPL_CHECK(index >= 0, "device::Isolated(", index, "): the index must be non-negative (one per rank: its memory account)");
    return index;
  }

  Cpu cpu_;
  CachingAllocator<detail::IsolatedMemory>* alloc_;  // the process's pool of this id: tensors may outlive the device object
  std::shared_ptr<detail::IsolatedLane> lane_;
};

}  // namespace device
}  // namespace v0
}  // namespace epl
