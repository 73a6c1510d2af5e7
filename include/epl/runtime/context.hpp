#pragma once
/// \file
/// \brief epl::Context — what one rank of a run works with: its world communicator (any
/// backend, chosen by epl::launch) and its devices. A Trainer is built from it.
#include <optional>

#include "epl/comm/any_communicator.hpp"
#include "epl/device/cpu/cpu.hpp"

namespace epl {
inline namespace v0 {

/// \brief One rank's view of a run: rank, world size, the world communicator and the CPU
/// device whose memory this rank's tensors are accounted to.
class Context {
 public:
  /// \brief A rank over a backend communicator that outlives the context (a thread rank, an MPI
  /// process). \param cpu_index the CPU device's accounting index (-1: the world rank, so thread
  /// ranks of one process are accounted apart); \param threads OpenMP threads (0: keep).
  template <comm::communicator C>
  explicit Context(C& world, int cpu_index = -1, int threads = 0)
      : world_(comm::Communicator::borrow(world)), cpu_(cpu_index >= 0 ? cpu_index : world.rank(), threads) {}
  /// \brief A rank over a communicator handle it takes over.
  explicit Context(comm::Communicator world, int cpu_index = -1, int threads = 0)
      : world_(std::move(world)), cpu_(cpu_index >= 0 ? cpu_index : world_.rank(), threads) {}

  /// \brief The context of a single-device run: a world of one.
  static Context solo(int cpu_index = 0, int threads = 0) { return Context(comm::Communicator::solo(), cpu_index, threads); }

  Context(Context&&) = default;
  Context& operator=(Context&&) = default;

  [[nodiscard]] int rank() const { return world_.rank(); }
  [[nodiscard]] int size() const { return world_.size(); }
  [[nodiscard]] comm::Communicator& world() noexcept { return world_; }
  [[nodiscard]] const device::Cpu& cpu() const noexcept { return cpu_; }
  /// \brief The device of type D this rank trains on (device::Cpu here; the CUDA device in a
  /// CUDA build's context).
  template <class D>
  [[nodiscard]] const D& device() const {
    static_assert(std::is_same_v<D, device::Cpu>, "epl::Context holds a device::Cpu; other devices are constructed by the program");
    return cpu_;
  }

 private:
  comm::Communicator world_;
  device::Cpu cpu_;
};

}  // namespace v0
}  // namespace epl
