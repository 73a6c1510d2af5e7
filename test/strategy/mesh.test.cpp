// The device mesh: coordinates, the groups of each axis, placement, and world sizes that do not fit.
#include "../helpers.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/strategy/mesh.hpp"

using namespace epl;

namespace test_strategy_mesh {

TEST_SUITE("cpu") {
TEST_CASE("mesh: 8 ranks as pipeline 2 x data 2 x tensor 2, tensor groups on neighbouring ranks") {
  comm::run_threads(8, [&](comm::ThreadCommunicator& c) {
    auto world = comm::Communicator::borrow(c);
    strategy::Mesh mesh(world, {.pipeline = 2, .tensor = 2});
    CHECK(mesh.data_size() == 2);
    const auto coord = mesh.coord();
    CHECK(mesh.rank_of(coord) == c.rank());
    CHECK(coord.tensor == c.rank() % 2);
    CHECK(coord.data == (c.rank() / 2) % 2);
    CHECK(coord.pipeline == c.rank() / 4);
    CHECK(mesh.tensor().size() == 2);
    CHECK(mesh.tensor().rank() == coord.tensor);
    CHECK(mesh.data().rank() == coord.data);
    CHECK(mesh.pipeline().rank() == coord.pipeline);
    // each group sums the world ranks it holds: tensor {0,1}, data {0,2}, pipeline {0,4} for rank 0
    for (auto* group : {&mesh.tensor(), &mesh.data(), &mesh.pipeline()}) {
      double r = c.rank();
      group->all_reduce(comm::Buffer(&r, 1, DType::kF64), comm::ReduceOp::kSum);
      const int stride = group == &mesh.tensor() ? 1 : group == &mesh.data() ? 2 : 4;
      const int first = c.rank() - (group == &mesh.tensor() ? coord.tensor : group == &mesh.data() ? 2 * coord.data : 4 * coord.pipeline);
      CHECK(r == first + first + stride);
    }
  });
}

TEST_CASE("mesh: without prefer_intra_node the data groups are the neighbouring ranks") {
  comm::run_threads(4, [&](comm::ThreadCommunicator& c) {
    auto world = comm::Communicator::borrow(c);
    strategy::Mesh mesh(world, {.pipeline = 1, .tensor = 2, .prefer_intra_node = false});
    CHECK(mesh.coord().data == c.rank() % 2);
    CHECK(mesh.coord().tensor == c.rank() / 2);
    CHECK(mesh.rank_of(mesh.coord()) == c.rank());
  });
}

TEST_CASE("mesh: one device is a world of one, every axis of size 1") {
  auto solo = comm::ThreadCommunicator::solo();
  auto world = comm::Communicator::borrow(solo);
  strategy::Mesh mesh(world, {});
  CHECK(mesh.data_size() == 1);
  CHECK(mesh.data().size() == 1);
  CHECK(mesh.tensor().size() == 1);
}

TEST_CASE("mesh: a world size that cannot hold the replicas names both numbers") {
  CHECK_THROWS_WITH_AS(comm::run_threads(6, [&](comm::ThreadCommunicator& c) {
    auto world = comm::Communicator::borrow(c);
    strategy::Mesh mesh(world, {.pipeline = 2, .tensor = 2});
  }, {.report = false}), doctest::Contains("world size 6 cannot hold model replicas of 4 devices each (pipeline 2 x tensor 2)"), Error);
}
}
}  // namespace test_strategy_mesh
