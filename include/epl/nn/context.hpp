#pragma once
/// \file
/// \brief nn::Context — one micro-batch's pass through a model: the device, the mode, the
/// random stream and the activations layers save for their backward.
///
/// Saved activations live here and not in the layers, so several micro-batches can be in
/// flight through one layer (a pipeline) and a checkpoint can drop and recompute them.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief What a layer saved in forward: tensors plus one integer (a dropout key, a length).
struct Saved {
  const void* owner = nullptr;
  std::vector<Tensor> tensors;
  std::uint64_t aux = 0;
  const Tensor& operator[](std::size_t i) const { return tensors.at(i); }
};

/// \brief Options of one pass: training mode, and the coordinates that seed its randomness.
struct Parameter;

struct PassOptions {
  bool training = true;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::uint64_t micro_batch = 0;
};

/// \brief One micro-batch's pass on device type D.
/// \tparam D a device type (device::Cpu, device::Cuda); layers take `Ctx&` generically.
template <class D>
class Context {
 public:
  using device_type = D;

  explicit Context(const D& device, PassOptions opt = {}) : device_(&device), opt_(opt) {}

  [[nodiscard]] const D& device() const noexcept { return *device_; }
  [[nodiscard]] bool training() const noexcept { return opt_.training; }
  [[nodiscard]] const PassOptions& options() const noexcept { return opt_; }

  /// \brief An activation tensor on this pass's device.
  [[nodiscard]] Tensor empty(Shape s, DType t) const { return device_->empty(s, t, MemoryCategory::kActivations); }
  [[nodiscard]] Tensor empty_like(const Tensor& x) const { return empty(x.shape(), x.dtype()); }

  /// \brief Saves tensors for owner's backward (a stack: backward pops in reverse order).
  void save(const void* owner, std::initializer_list<Tensor> tensors, std::uint64_t aux = 0) {
    stack_.push_back(Saved{owner, std::vector<Tensor>(tensors), aux});
  }
  /// \brief Takes back what owner saved; fails if backward runs out of forward's order.
  [[nodiscard]] Saved restore(const void* owner) {
    EPL_CHECK(!stack_.empty(), "backward of a layer with no saved activations: run forward on this context first");
    EPL_CHECK(stack_.back().owner == owner,
              "backward called out of order: the last activations saved belong to another layer; "
              "call backward in the reverse order of forward");
    Saved s = std::move(stack_.back());
    stack_.pop_back();
    return s;
  }
  [[nodiscard]] std::size_t saved_count() const noexcept { return stack_.size(); }
  /// \brief Bytes held by saved activations (views of one storage may be counted twice).
  [[nodiscard]] std::int64_t saved_bytes() const {
    std::int64_t n = 0;
    for (const auto& s : stack_) for (const auto& t : s.tensors) n += t.defined() ? static_cast<std::int64_t>(t.bytes()) : 0;
    return n;
  }

  /// \brief Asks to be told, during backward, when a parameter's gradient is final for this
  /// pass (data parallelism starts reducing it then). Called possibly more than once per
  /// parameter; the listener ignores repeats.
  void on_gradient_ready(std::function<void(Parameter&)> fn) { grad_ready_ = std::move(fn); }
  [[nodiscard]] bool wants_gradients() const noexcept { return static_cast<bool>(grad_ready_); }
  void gradient_ready(Parameter& p) const {
    if (grad_ready_) grad_ready_(p);
  }

  /// \brief A fresh random key for this pass: a function of (seed, step, micro-batch, call).
  [[nodiscard]] std::uint64_t next_random_key() {
    return stream_key(opt_.seed, mix64(opt_.step * 0x10001ull + opt_.micro_batch) ^ random_calls_++);
  }

 private:
  const D* device_;
  PassOptions opt_;
  std::vector<Saved> stack_;
  std::uint64_t random_calls_ = 0;
  std::function<void(Parameter&)> grad_ready_;
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
