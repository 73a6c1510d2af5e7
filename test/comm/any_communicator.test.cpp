// comm::Communicator: any backend behind one type, owned or borrowed; splits; memory spaces.
#include <cstring>

#include "../helpers.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace {
// A backend whose buffers live in device memory (as NCCL's do), for the memory-space check.
struct DeviceSpaceComm : comm::ThreadCommunicator {
  static constexpr bool kChecksSpacesInStep = false;  // the handle checks them, as for NCCL and MPI
  explicit DeviceSpaceComm(comm::ThreadCommunicator c) : comm::ThreadCommunicator(std::move(c)) {}
  [[nodiscard]] bool reaches(comm::MemorySpace s) const noexcept { return s == comm::MemorySpace::kDevice; }
  DeviceSpaceComm split(int color, int key) { return DeviceSpaceComm(comm::ThreadCommunicator::split(color, key)); }
};
}  // namespace
template <>
struct epl::comm::space_of<DeviceSpaceComm> : std::integral_constant<comm::MemorySpace, comm::MemorySpace::kDevice> {};

TEST_SUITE("cpu") {
TEST_CASE("any communicator: borrowed and owned handles run the backend's collectives; splits are owned") {
  comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    auto world = comm::Communicator::borrow(c);
    CHECK(world.rank() == c.rank());
    CHECK(world.size() == 4);
    CHECK(world.space() == comm::MemorySpace::kHost);
    float x = static_cast<float>(c.rank());
    world.all_reduce(comm::Buffer(&x, 1, DType::kF32), comm::ReduceOp::kSum);
    CHECK(x == 6.0f);
    comm::Communicator half = world.split(c.rank() % 2, c.rank());
    CHECK(half.size() == 2);
    float y = 1;
    auto work = half.all_reduce_async(comm::Buffer(&y, 1, DType::kF32), comm::Buffer(&y, 1, DType::kF32), comm::ReduceOp::kSum);
    work.wait();
    CHECK(y == 2.0f);
    CHECK(c.stats().operations >= 2);
  });
  comm::Communicator owned(comm::ThreadCommunicator::solo());
  CHECK(owned.size() == 1);
  CHECK_THROWS_WITH_AS(comm::Communicator{}.barrier(), doctest::Contains("use of an empty comm::Communicator"), Error);
}

TEST_CASE("any communicator: a host buffer given to a device-memory backend is an error naming both") {
  comm::Communicator device_comm{DeviceSpaceComm(comm::ThreadCommunicator::solo())};
  CHECK(device_comm.space() == comm::MemorySpace::kDevice);
  float x = 1;
  CHECK_THROWS_WITH_AS(device_comm.all_reduce(comm::Buffer(&x, 1, DType::kF32), comm::ReduceOp::kSum),
                       doctest::Contains("a buffer in host memory passed to a communicator of device memory"), Error);
}
TEST_CASE("any communicator: a world of one moves device buffers through the copy it was made with, and refuses them without one") {
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  const comm::Buffer dx(x, 4, DType::kF32, comm::MemorySpace::kDevice), dy(y, 4, DType::kF32, comm::MemorySpace::kDevice);
  comm::Communicator host_only = comm::Communicator::solo();
  CHECK_FALSE(host_only.reaches(comm::MemorySpace::kDevice));
  CHECK_THROWS_WITH_AS(host_only.all_gather(dx, dy), doctest::Contains("make it with the device's copy, Communicator::solo(copy)"), Error);
  std::size_t copied = 0;
  comm::Communicator gpu_world = comm::Communicator::solo([&](void* dst, const void* src, std::size_t n) {
    std::memcpy(dst, src, n);  // a device's copy, played by memcpy
    copied += n;
  });
  CHECK(gpu_world.reaches(comm::MemorySpace::kDevice));
  gpu_world.all_gather(dx, dy);
  CHECK(copied == 16);
  CHECK(y[3] == 4);
  gpu_world.all_reduce(dx, comm::ReduceOp::kSum);  // in place: nothing to move
  CHECK(copied == 16);
  gpu_world.send(dx, 0, 7);  // to itself: through the copy both ways
  gpu_world.recv(dy, 0, 7);
  CHECK(copied == 48);
  float h = 5;
  gpu_world.all_reduce(comm::Buffer(&h, 1, DType::kF32), comm::ReduceOp::kSum);  // host values still by memcpy
  CHECK(copied == 48);
  auto sub = gpu_world.split(0, 0);
  sub.all_gather(dx, dy);
  CHECK(copied == 64);
}
TEST_CASE("any communicator: a negative element count is an error naming the operation") {
  float a[2] = {}, b[2] = {};
  comm::Communicator solo = comm::Communicator::solo();
  CHECK_THROWS_WITH_AS(solo.send(comm::Buffer(a, -1, DType::kF32), 0, 9), doctest::Contains("send on group 'solo': a buffer of -1 elements"), Error);
  CHECK_THROWS_WITH_AS(solo.all_reduce(comm::Buffer(a, -1, DType::kF32), comm::Buffer(b, -1, DType::kF32), comm::ReduceOp::kSum),
                       doctest::Contains("never negative"), Error);
}
}
