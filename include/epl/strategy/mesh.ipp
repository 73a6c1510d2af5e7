#pragma once
/// \file
/// \brief The body of the mesh's constructor (the header declares it): included by that header in a
/// header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/strategy/mesh.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

EPL_LINKED Mesh::Mesh(comm::Communicator& world, MeshShape shape)
    : world_(&world), shape_(shape) {
  EPL_CHECK(shape.pipeline >= 1 && shape.tensor >= 1, "mesh: pipeline ", shape.pipeline, " and tensor ", shape.tensor,
            " sizes must be at least 1");
  const int per_replica = shape.pipeline * shape.tensor;
  EPL_CHECK(world.size() % per_replica == 0, "world size ", world.size(), " cannot hold model replicas of ", per_replica,
            " devices each (pipeline ", shape.pipeline, " x tensor ", shape.tensor, "); use a world size that is a multiple of ",
            per_replica);
  data_size_ = world.size() / per_replica;
  coord_ = coord_of(world.rank());
  // Each axis' group: the ranks that share the other two coordinates (colour), ordered along it.
  pipeline_ = world.split(coord_.data * shape.tensor + coord_.tensor, coord_.pipeline);
  data_ = world.split(coord_.pipeline * shape.tensor + coord_.tensor, coord_.data);
  tensor_ = world.split(coord_.pipeline * data_size_ + coord_.data, coord_.tensor);
}
}  // namespace strategy
}  // namespace v0
}  // namespace epl
