// comm::Communicator: any backend behind one type, owned or borrowed; splits; memory spaces.
#include "../helpers.hpp"
#include "epl/comm/any_communicator.hpp"
#include "epl/comm/threads/run_threads.hpp"

using namespace epl;

namespace {
// A backend whose buffers live in device memory (as NCCL's do), for the memory-space check.
struct DeviceSpaceComm : comm::ThreadCommunicator {
  explicit DeviceSpaceComm(comm::ThreadCommunicator c) : comm::ThreadCommunicator(std::move(c)) {}
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
}
