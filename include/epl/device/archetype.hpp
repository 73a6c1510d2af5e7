#pragma once
/// \file
/// \brief device::Archetype — the device the concepts above device/ check their models against:
/// a type with a device's memory interface, declared and never defined. A layer's forward and
/// backward, or an optimizer's update, is a template over the pass or the device, so checking its
/// signature against the archetype instantiates nothing of a real device (the CPU device's
/// kernels and Eigen stay out of a program that names only layers).
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace device {

struct Archetype {
  static constexpr DeviceKind kind = DeviceKind::kCpu;
  [[nodiscard]] DeviceId id() const;
  [[nodiscard]] Tensor empty(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const;
  [[nodiscard]] Tensor zeros(Shape s, DType t, MemoryCategory c = MemoryCategory::kActivations) const;
  void copy(const Tensor& src, const Tensor& dst) const;
  void upload(const void* host, const Tensor& dst) const;
  void download(const Tensor& src, void* host) const;
  void fill(const Tensor& x, double v) const;
  void cast(const Tensor& src, const Tensor& dst) const;
  void synchronize() const;
};

}  // namespace device
}  // namespace v0
}  // namespace epl
