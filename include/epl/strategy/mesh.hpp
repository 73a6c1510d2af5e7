#pragma once
/// \file
/// \brief strategy::Mesh — the world as (pipeline, data, tensor) coordinates, with a
/// communicator for each axis split from the world.
///
/// Placement: the tensor axis is innermost (a tensor-parallel group is neighbouring ranks, on one
/// node when nodes hold consecutive ranks: EPL's cluster.device_place_prefer_intra_node), then
/// data, then pipeline: rank = t + T (d + D p). With prefer_intra_node false, data is innermost
/// instead. One device is a world of one: every axis of size 1, the same code.
#include <string>

#include "epl/core/linked.hpp"
#include "epl/comm/any_communicator.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

/// \brief The sizes of a mesh's pipeline and tensor axes; the data axis is what the world size
/// leaves: world / (pipeline x tensor).
struct MeshShape {
  int pipeline = 1;
  int tensor = 1;
  bool prefer_intra_node = true;  ///< tensor groups on neighbouring ranks (else data groups)
};

/// \brief A rank's coordinates on the mesh.
struct MeshCoord {
  int pipeline = 0, data = 0, tensor = 0;
  friend bool operator==(const MeshCoord&, const MeshCoord&) = default;
};

/// \brief The coordinate of world rank `rank` on a mesh of `shape` with `data_size` replicas:
/// the pipeline axis outermost; within a stage, tensor groups on neighbouring ranks when
/// shape.prefer_intra_node (else data groups).
constexpr MeshCoord coord_of(MeshShape shape, int data_size, int rank) {
  const int T = shape.tensor, D = data_size;
  MeshCoord c;
  c.pipeline = rank / (T * D);
  const int in_stage = rank % (T * D);
  if (shape.prefer_intra_node) {
    c.tensor = in_stage % T;
    c.data = in_stage / T;
  } else {
    c.data = in_stage % D;
    c.tensor = in_stage / D;
  }
  return c;
}

class Mesh {
 public:
  /// \brief Splits world into the groups of shape; fails, naming both numbers, when the world
  /// size is not a multiple of the devices one replica spans (pipeline x tensor).
  EPL_LINKED Mesh(comm::Communicator& world, MeshShape shape);


  [[nodiscard]] comm::Communicator& world() const noexcept { return *world_; }
  [[nodiscard]] comm::Communicator& pipeline() noexcept { return pipeline_; }
  [[nodiscard]] comm::Communicator& data() noexcept { return data_; }
  [[nodiscard]] comm::Communicator& tensor() noexcept { return tensor_; }
  [[nodiscard]] const comm::Communicator& pipeline() const noexcept { return pipeline_; }
  [[nodiscard]] const comm::Communicator& data() const noexcept { return data_; }
  [[nodiscard]] const comm::Communicator& tensor() const noexcept { return tensor_; }
  /// \brief Records the axes' blocking collectives on t (comm::Communicator::set_timeline).
  void set_timeline(Timeline* t) {
    pipeline_.set_timeline(t, "pipeline");
    data_.set_timeline(t, "data");
    tensor_.set_timeline(t, "tensor");
  }
  [[nodiscard]] const MeshShape& shape() const noexcept { return shape_; }
  [[nodiscard]] int pipeline_size() const noexcept { return shape_.pipeline; }
  [[nodiscard]] int data_size() const noexcept { return data_size_; }
  [[nodiscard]] int tensor_size() const noexcept { return shape_.tensor; }
  [[nodiscard]] const MeshCoord& coord() const noexcept { return coord_; }

  /// \brief The world rank at a coordinate.
  [[nodiscard]] int rank_of(MeshCoord c) const {
    const int T = shape_.tensor, D = data_size_;
    return shape_.prefer_intra_node ? c.tensor + T * (c.data + D * c.pipeline) : c.data + D * (c.tensor + T * c.pipeline);
  }
  /// \brief The coordinate of a world rank.
  [[nodiscard]] MeshCoord coord_of(int rank) const { return strategy::coord_of(shape_, data_size_, rank); }

 private:
  comm::Communicator* world_;
  MeshShape shape_;
  int data_size_ = 1;
  MeshCoord coord_;
  comm::Communicator pipeline_, data_, tensor_;
};

}  // namespace strategy
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/strategy/mesh.ipp"
#endif
