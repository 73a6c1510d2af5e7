#pragma once
/// \file
/// \brief device::Lane — how a communicator moves one rank's device buffers: copies and
/// reductions queued on a stream of the lane's own, ordered after the work the device had queued
/// when each operation began. A device that has one returns it from `lane()`; the thread
/// communicator then moves that device's memory without a trip through the host.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "epl/core/dtype.hpp"
#include "epl/core/memory.hpp"

namespace epl {
inline namespace v0 {
namespace device {

/// \brief How a lane's reduction combines its sources, element by element (a mean is a sum
/// with a divisor).
enum class Reduction : std::uint8_t { kSum, kMax, kMin };

/// \brief One rank's device operations for communication. Every call may come from the rank's
/// thread or from its communicator's worker thread. Pointers are the device's (what its tensors
/// hold); the lane alone turns them into memory it may touch.
class Lane {
 public:
  virtual ~Lane() = default;
  /// \brief The device whose memory this lane moves.
  [[nodiscard]] virtual DeviceId device() const = 0;
  /// \brief A mark after the work queued on the device's compute stream so far (the producer of
  /// a buffer about to be moved): a peer's lane waits for it with after().
  [[nodiscard]] virtual std::shared_ptr<void> ready() const = 0;
  /// \brief The lane's later operations wait for `mark` (any lane's ready() on the same device);
  /// a null mark is no wait.
  virtual void after(const std::shared_ptr<void>& mark) const = 0;
  /// \brief n bytes from src to dst, both device memory of this device or of one it can reach.
  virtual void copy(void* dst, const void* src, std::size_t n) const = 0;
  /// \brief dst[i] = reduction over sources k in order of srcs[k][i] for i < count, divided by
  /// `divisor` when it is above 1; dst may be one of the sources (each element is read before it
  /// is written). Half types combine in f32 and round once, as NCCL does.
  virtual void reduce(void* dst, std::span<const void* const> srcs, std::int64_t count, DType t, Reduction r,
                      int divisor) const = 0;
  /// \brief Device memory of n bytes that lives while the pointer is held, whichever thread lets
  /// it go (a message between ranks in flight).
  [[nodiscard]] virtual std::shared_ptr<void> allocate(std::size_t n) const = 0;
  /// \brief Waits (on the host) until the lane's queued operations have completed: their
  /// buffers may then be reused, by any rank.
  virtual void complete() const = 0;

  /// \brief A copy after the work this device has queued so far, done when this returns (a
  /// message into or out of a rank's buffer).
  void copy_now(void* dst, const void* src, std::size_t n) const {
    after(ready());
    copy(dst, src, n);
    complete();
  }
};

}  // namespace device
}  // namespace v0
}  // namespace epl
