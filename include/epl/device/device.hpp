#pragma once
/// \file
/// \brief The device concepts: what a backend must offer for layers, optimizers and
/// communication to run on it. Backends are types (device::Cpu, device::Cuda), never macros.
///
/// The concepts refine in small steps, so a backend can be brought up one step at a time:
///   device_memory  -> allocation, copies, host transfers, fill, cast, synchronize
///   device_blas    -> + gemm, gemm_batched
///   device_math    -> + element-wise arithmetic, bias broadcast, activations, norms
///   device_for_layers -> + the kernels of the built-in layers and the optimizer updates
/// Work is ordered per device object: the CPU runs in program order; CUDA enqueues on the
/// device's stream, and host reads of results go through download() (which synchronizes).
#include <algorithm>
#include <cmath>
#include <concepts>
#include <type_traits>
#include <vector>

#include "epl/core/tensor.hpp"
#include "epl/device/functors.hpp"

namespace epl {
inline namespace v0 {

/// T satisfies device_memory if 1. it names its DeviceId and allocator, 2. allocates tensors
/// by shape, dtype and memory category, 3. copies device<->device and host<->device, and
/// 4. fills and casts.
template <class D>
concept device_memory = requires(const D& d, const Tensor& t, void* host, const void* chost) {
  { D::kind } -> std::convertible_to<DeviceKind>;
  { d.id() } -> std::same_as<DeviceId>;
  { d.empty(Shape{}, DType::kF32, MemoryCategory::kActivations) } -> std::same_as<Tensor>;
  { d.zeros(Shape{}, DType::kF32, MemoryCategory::kActivations) } -> std::same_as<Tensor>;
  d.copy(t, t);
  d.upload(chost, t);
  d.download(t, host);
  d.fill(t, 0.0);
  d.cast(t, t);
  d.synchronize();
};

/// T satisfies device_blas if it is device_memory and 1. runs c = alpha op(a) op(b) + beta c
/// on 2-D views, 2. and on each block of rank-3 tensors.
template <class D>
concept device_blas = device_memory<D> && requires(const D& d, const Tensor& t) {
  d.gemm(t, false, t, true, t, 1.0, 0.0);
  d.gemm_batched(t, false, t, true, t, 1.0, 0.0);
};

/// T satisfies device_math if it is device_blas and has the element-wise operations, map (any
/// element-wise function of up to four tensors, device/functors.hpp) among them.
template <class D>
concept device_math = device_blas<D> && requires(const D& d, const Tensor& t) {
  d.add(t, t, t);
  d.mul(t, t, t);
  d.axpy(1.0, t, t);
  d.scale(t, 1.0);
  d.add_row_vector(t, t);
  d.gelu(t, t);
  d.gelu_backward(t, t, t);
  d.relu(t, t);
  d.relu_backward(t, t, t);
  d.map(t, ops::Add{}, t, t);
};

/// T satisfies device_for_layers if it is device_math and runs every kernel the built-in
/// layers and optimizers need.
template <class D>
concept device_for_layers = device_math<D> && requires(const D& d, const Tensor& t) {
  d.sum_rows(t, t, 0.0);
  { d.sum_squares(t) } -> std::convertible_to<double>;
  d.layer_norm(t, t, t, t, t, t, 1e-5);
  d.layer_norm_backward(t, t, t, t, t, t, t, t);
  d.softmax_causal(t, t, 1.0);
  d.softmax_causal_backward(t, t, t, 1.0);
  d.embedding(t, t, t);
  d.embedding_backward(t, t, t);
  { d.cross_entropy(t, t) } -> std::convertible_to<double>;
  d.cross_entropy_backward(t, t, t, 1.0);
  d.dropout(t, t, 0.1, std::uint64_t{1}, std::int64_t{0});
  d.permute_heads(t, t, std::int64_t{0}, true);
  d.sgd_update(t, t, 0.1, 0.0, 1.0);  // the last: the factor the gradient is read with
  d.momentum_update(t, t, t, 0.1, 0.9, 0.0, false, 1.0);
  d.adamw_update(t, t, t, t, 1e-3, 0.9, 0.999, 1e-8, 0.0, std::int64_t{1}, 1.0);
};

namespace device {
/// \brief Whether device type D computes in T (device::CpuF64 computes f64; device::Cpu f32 only).
template <class D, class T>
constexpr bool computes() {
  if constexpr (requires { D::template kComputes<T>; }) return D::template kComputes<T>;
  else return std::is_same_v<T, float>;
}

/// \brief The largest absolute value of an f32 or f64 tensor on device d (read back to the host).
template <class D>
double max_abs(const D& d, const Tensor& t) {
  if (t.numel() == 0) return 0;
  EPL_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF64, "max_abs: a ", name_of(t.dtype()), " tensor; expected f32 or f64");
  double most = 0;
  auto scan = [&]<class T>() {
    std::vector<T> host(static_cast<std::size_t>(t.numel()));
    d.download(t, host.data());
    for (T v : host) most = std::max(most, std::abs(static_cast<double>(v)));
  };
  if (t.dtype() == DType::kF64) scan.template operator()<double>();
  else scan.template operator()<float>();
  return most;
}
}  // namespace device

}  // namespace v0
}  // namespace epl
