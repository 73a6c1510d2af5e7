#pragma once
/// \file
/// \brief device::require_trainable<D>() — the compile-time check a Trainer makes of its device:
/// one static_assert that names the first capability the device lacks, instead of a page of
/// errors from deep inside the layers.
#include <cstdint>
#include <span>

#include "epl/device/device.hpp"

namespace epl {
inline namespace v0 {
namespace device {

namespace detail {
template <class D>
inline constexpr bool dependent_false = false;
// The capabilities a training step needs, one concept each.
template <class D>
concept has_memory = device_memory<D>;
template <class D>
concept has_blas = requires(const D& d, const Tensor& t) {
  d.gemm(t, false, t, true, t, 1.0, 0.0, DType::kBF16);
  d.gemm_batched(t, false, t, true, t, 1.0, 0.0, DType::kBF16);
};
template <class D>
concept has_elementwise = requires(const D& d, const Tensor& t) {
  d.add(t, t, t);
  d.mul(t, t, t);
  d.axpy(1.0, t, t);
  d.scale(t, 1.0);
  d.add_row_vector(t, t);
  d.map(t, ops::Add{}, t, t);
};
template <class D>
concept has_activations = requires(const D& d, const Tensor& t) {
  d.gelu(t, t);
  d.gelu_backward(t, t, t);
  d.relu(t, t);
  d.relu_backward(t, t, t);
};
template <class D>
concept has_reductions = requires(const D& d, const Tensor& t) {
  d.sum_rows(t, t, 0.0);
  { d.sum_squares(t) } -> std::convertible_to<double>;
};
template <class D>
concept has_norms = requires(const D& d, const Tensor& t) {
  d.layer_norm(t, t, t, t, t, t, 1e-5);
  d.layer_norm_backward(t, t, t, t, t, t, t, t);
};
template <class D>
concept has_attention = requires(const D& d, const Tensor& t) {
  d.softmax_causal(t, t, 1.0);
  d.softmax_causal_backward(t, t, t, 1.0);
  d.permute_heads(t, t, std::int64_t{0}, true);
};
template <class D>
concept has_embedding = requires(const D& d, const Tensor& t) {
  d.embedding(t, t, t);
  d.embedding_backward(t, t, t);
};
template <class D>
concept has_loss = requires(const D& d, const Tensor& t) {
  { d.cross_entropy(t, t) } -> std::convertible_to<double>;
  d.cross_entropy_backward(t, t, t, 1.0);
};
template <class D>
concept has_dropout = requires(const D& d, const Tensor& t) { d.dropout(t, t, 0.1, std::uint64_t{1}, std::int64_t{0}); };
template <class D>
concept has_updates = requires(const D& d, const Tensor& t) {
  d.sgd_update(t, t, 0.1, 0.0, 1.0);  // the last: the factor the gradient is read with
  d.momentum_update(t, t, t, 0.1, 0.9, 0.0, false, 1.0);
  d.adamw_update(t, t, t, t, 1e-3, 0.9, 0.999, 1e-8, 0.0, std::int64_t{1}, 1.0);
};
}  // namespace detail

/// \brief D satisfies trainable if it has every capability require_trainable checks.
template <class D>
concept trainable = detail::has_memory<D> && detail::has_blas<D> && detail::has_elementwise<D> &&
                    detail::has_activations<D> && detail::has_reductions<D> && detail::has_norms<D> &&
                    detail::has_attention<D> && detail::has_embedding<D> && detail::has_loss<D> &&
                    detail::has_dropout<D> && detail::has_updates<D>;

/// \brief Fails to compile, naming what is missing, unless D can train every built-in layer with
/// every built-in optimizer (device_for_layers and the operations a training step needs).
template <class D>
consteval void require_trainable() {
  if constexpr (!detail::has_memory<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks memory operations "
                                              "(id, empty, zeros, copy, upload, download, fill, cast, synchronize): device_memory");
  else if constexpr (!detail::has_blas<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks GEMM (gemm, gemm_batched, "
                                              "each with alpha, beta and the dtype AMP rounds the operands to)");
  else if constexpr (!detail::has_elementwise<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks element-wise operations "
                                              "(add, mul, axpy, scale, add_row_vector, map)");
  else if constexpr (!detail::has_activations<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the activation kernels "
                                              "(gelu, gelu_backward, relu, relu_backward)");
  else if constexpr (!detail::has_reductions<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks reductions (sum_rows, sum_squares)");
  else if constexpr (!detail::has_norms<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the layer-norm kernels "
                                              "(layer_norm, layer_norm_backward)");
  else if constexpr (!detail::has_attention<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the attention kernels "
                                              "(softmax_causal, softmax_causal_backward, permute_heads)");
  else if constexpr (!detail::has_embedding<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the embedding kernels "
                                              "(embedding, embedding_backward)");
  else if constexpr (!detail::has_loss<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the loss kernels "
                                              "(cross_entropy, cross_entropy_backward)");
  else if constexpr (!detail::has_dropout<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the dropout kernel");
  else if constexpr (!detail::has_updates<D>)
    static_assert(detail::dependent_false<D>, "epl: this device type cannot train: it lacks the optimizer updates "
                                              "(sgd_update, momentum_update, adamw_update, each with the gradient's factor last)");
}

}  // namespace device
}  // namespace v0
}  // namespace epl
