#pragma once
/// \file
/// \brief nn::Pass — one micro-batch's pass through a model: the device, the mode, where
/// its samples sit in the global batch, the random streams, the communication groups a layer
/// may use, the hooks a strategy runs around each layer, and the activations layers save for
/// their backward.
///
/// Saved activations live here and not in the layers, so several micro-batches can be in
/// flight through one layer (a pipeline) and a recompute boundary can drop and recompute them.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"
#include "epl/nn/parameter.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief What a layer saved in forward: tensors plus one integer (a dropout key, a length) and,
/// for a layer with host-side decisions to remember (an MoE's routing), an object of its own.
struct Saved {
  const void* owner = nullptr;
  std::vector<Tensor> tensors;
  std::uint64_t aux = 0;
  std::shared_ptr<const void> extra;
  const Tensor& operator[](std::size_t i) const {
    EPL_CHECK(i < tensors.size(), "backward: reads saved tensor ", i, " of a frame that holds ", tensors.size(),
              ": each ctx.restore(this) returns what one ctx.save(this, {...}) kept, the last saved first; save all the "
              "tensors backward reads in one call, or restore once for each save");
    return tensors[i];
  }
  /// \brief The saved object, as the type the layer saved.
  template <class T>
  [[nodiscard]] const T& get() const {
    EPL_CHECK(extra != nullptr, "backward: the layer saved no object in forward");
    return *static_cast<const T*>(extra.get());
  }
};

/// \brief Which activations a training pass drops and recomputes in backward
/// (gradient_checkpoint.type): none, those inside the model's nn::Recompute marks, or those of
/// the segments the library chose (strategy::Chunk's, type "auto"; the marks then keep theirs).
enum class RecomputeMode : std::uint8_t { kNone, kMarked, kSegments };

/// \brief Options of one pass: training mode, and the coordinates that seed its randomness.
struct PassOptions {
  bool training = true;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::uint64_t micro_batch = 0;
  /// Index in the global batch of this pass's first sample: random draws are made at global
  /// positions, so a rank's share, a micro-batch and the whole batch on one device agree.
  std::int64_t first_sample = 0;
  /// What backward scales the loss by (1/M with M micro-batches): a layer that adds a loss of its
  /// own (an MoE's load-balancing loss) scales its gradient alike.
  double loss_scale = 1.0;
  /// What a training pass recomputes: by default the nn::Recompute marks (kNone: every layer
  /// keeps its activations, as if not marked).
  RecomputeMode recompute = RecomputeMode::kMarked;
  /// The dtype GEMM operands are rounded to before they multiply: bf16 or f16 under AMP
  /// (amp.level "O1"); f32 multiplies them as they are. Every other operation computes in the
  /// tensors' own dtype.
  DType matmul = DType::kF32;
};

/// \brief The hooks a strategy or policy runs around each layer; this one runs nothing.
/// A hooks type has before_forward(layer, ctx) (gather or prefetch the layer's parameters) and
/// after_backward(layer, ctx) (the layer's gradients are final for this pass: reduce them); it may
/// have before_backward(layer, ctx) and after_forward(layer, ctx) (the layer's forward returned: a
/// layer may run others inside its own, so hooks nest).
/// They are compile-time types: the generic forward and backward call them directly.
struct NoHooks {
  template <class L, class Ctx> void before_forward(L&, Ctx&) {}
  template <class L, class Ctx> void after_backward(L&, Ctx&) {}
};

/// \brief The communication groups a layer may use from inside its forward or backward (a split
/// Linear all-reduces over `tensor`). Null where the strategy has no such group.
struct Groups {
  comm::Communicator* tensor = nullptr;
  comm::Communicator* data = nullptr;
};

/// \brief One micro-batch's pass on device type D.
/// \tparam D a device type (device::Cpu, device::Cuda); layers take `Ctx&` generically.
/// \tparam Hooks the hooks run around each layer (NoHooks: none)
template <class D, class Hooks = NoHooks>
class Pass {
 public:
  using device_type = D;
  using hooks_type = Hooks;
  /// Work a backward left for the weight pass W (zero-bubble schedules), in the order it was
  /// left: each layer's weight gradients, then the hooks after its backward.
  using Deferred = std::vector<std::function<void(Pass&)>>;

  /// \param hooks the strategy's hooks object (may be null for a stateless hooks type)
  explicit Pass(const D& device, PassOptions opt = {}, Hooks* hooks = nullptr, Groups groups = {})
      : device_(&device), opt_(opt), hooks_(hooks), groups_(groups) {
    if constexpr (std::is_default_constructible_v<Hooks> && std::is_empty_v<Hooks>) {
      if (!hooks_) hooks_ = &default_hooks();
    }
    EPL_CHECK(hooks_ != nullptr, "nn::Pass: the hooks object of this pass is missing");
  }

  [[nodiscard]] const D& device() const noexcept { return *device_; }
  [[nodiscard]] bool training() const noexcept { return opt_.training; }
  [[nodiscard]] const PassOptions& options() const noexcept { return opt_; }
  [[nodiscard]] Hooks& hooks() const noexcept { return *hooks_; }
  [[nodiscard]] const Groups& groups() const noexcept { return groups_; }
  /// \brief Index in the global batch of this pass's first sample.
  [[nodiscard]] std::int64_t first_sample() const noexcept { return opt_.first_sample; }
  /// \brief What a layer passes its device's gemm as `inputs`: the dtype the operands are rounded
  /// to under AMP (PassOptions::matmul).
  [[nodiscard]] DType matmul() const noexcept { return opt_.matmul; }

  /// \brief An activation tensor on this pass's device.
  [[nodiscard]] Tensor empty(Shape s, DType t) const { return device_->empty(s, t, MemoryCategory::kActivations); }
  [[nodiscard]] Tensor empty_like(const Tensor& x) const { return empty(x.shape(), x.dtype()); }

  /// \brief Saves tensors for owner's backward (a stack: backward pops in reverse order).
  void save(const void* owner, std::initializer_list<Tensor> tensors, std::uint64_t aux = 0) {
    stack_.push_back(Saved{owner, std::vector<Tensor>(tensors), aux, nullptr});
  }
  /// \brief As above, with an object of the layer's own for its backward.
  template <class T>
  void save(const void* owner, std::initializer_list<Tensor> tensors, std::shared_ptr<const T> extra) {
    stack_.push_back(Saved{owner, std::vector<Tensor>(tensors), 0, std::move(extra)});
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

  /// \brief What nn::forward records of a leaf layer's forward in a training pass, for
  /// nn::backward to hold the leaf's backward to: its input's shape, and how many
  /// activation frames were saved before it ran (its backward takes back all it saved).
  struct Frame {
    const void* layer = nullptr;
    Shape input;
    std::size_t saved = 0;
  };
  void open_frame(const void* layer, const Tensor& x) {
    if (opt_.training) frames_.push_back(Frame{layer, x.shape(), stack_.size()});
  }
  /// \brief Takes back the latest frame layer opened, if any (none: forward ran in another pass,
  /// or not in training). `last` says whether it was the latest frame of all: only then were the
  /// activations saved since it all its layer's (sub-layers run backward out of forward's order
  /// when they save nothing).
  [[nodiscard]] std::optional<Frame> close_frame(const void* layer, bool& last) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (it->layer != layer) continue;
      last = it == frames_.rbegin();
      Frame f = *it;
      frames_.erase(std::next(it).base());
      return f;
    }
    return std::nullopt;
  }

  /// \brief Backward as a zero-bubble schedule's B pass: while `to` is set, weight_gradient(fn)
  /// and the hooks after each layer's backward go to it, to run in W (run_deferred), and backward
  /// computes only the input gradients. Null: they run at once (the whole backward).
  void defer_into(Deferred* to) noexcept { deferred_ = to; }
  [[nodiscard]] Deferred* deferred() const noexcept { return deferred_; }
  /// \brief A layer's weight-gradient work (dW += dy^T x): now, or in the W pass. fn must own
  /// what it reads (tensors by value), as it may run after the layer's backward returned.
  template <class Fn>
  void weight_gradient(Fn&& fn) {
    if (deferred_) deferred_->emplace_back([f = std::forward<Fn>(fn)](Pass&) mutable { f(); });
    else fn();
  }
  /// \brief Layer l's gradients are final for this pass: the hooks are told now, or in W.
  template <class L>
  void backward_done(L& l) {
    if (deferred_) deferred_->emplace_back([&l](Pass& p) { p.hooks().after_backward(l, p); });
    else hooks_->after_backward(l, *this);
  }
  /// \brief The W pass: runs what backward left in d, in order.
  void run_deferred(Deferred& d) {
    for (auto& f : d) f(*this);
    d.clear();
  }

  /// \brief A layer's own term of the loss (an auxiliary loss), added to the pass's loss; the
  /// layer's backward adds its gradient, scaled by options().loss_scale.
  void add_loss(double value) noexcept { extra_loss_ += value; }
  [[nodiscard]] double extra_loss() const noexcept { return extra_loss_; }
  /// \brief Bytes held by saved activations (views of one storage may be counted twice).
  [[nodiscard]] std::int64_t saved_bytes() const {
    std::int64_t n = 0;
    for (const auto& s : stack_) for (const auto& t : s.tensors) n += t.defined() ? static_cast<std::int64_t>(t.bytes()) : 0;
    return n;
  }

  /// \brief The key of a random stream for this pass: a function of (seed, step, stream), never
  /// 0. Draw element e of a tensor whose first sample is first_sample() at position
  /// first_sample() * (elements per sample) + e, so every split of the batch draws alike.
  [[nodiscard]] std::uint64_t random_key(const RandomStream& stream) const {
    EPL_CHECK(stream.ordinal >= 0, "a random stream that was never numbered: materialize the model (param::materialize) first");
    return stream_key(opt_.seed, mix64(opt_.step) ^ (static_cast<std::uint64_t>(stream.ordinal) * 0x9e3779b97f4a7c15ull)) | 1;
  }

 private:
  static Hooks& default_hooks() {
    static Hooks h;  // stateless hooks only (NoHooks); a stateful type is always passed in
    return h;
  }
  const D* device_;
  PassOptions opt_;
  Hooks* hooks_;
  Groups groups_;
  std::vector<Saved> stack_;
  std::vector<Frame> frames_;
  double extra_loss_ = 0;
  Deferred* deferred_ = nullptr;
};

/// \brief A layer's weight-gradient work through its pass context: deferred to the W pass when
/// the pass defers it (Pass::weight_gradient), else run now.
template <class Ctx, class Fn>
void weight_gradient(Ctx& ctx, Fn&& fn) {
  if constexpr (requires { ctx.weight_gradient(fn); }) ctx.weight_gradient(std::forward<Fn>(fn));
  else fn();
}

/// \brief The name nn::Pass had before 0.2 (kept for 0.2.x, removed in 0.3).
template <class D, class Hooks = NoHooks>
using Context [[deprecated("renamed epl::nn::Pass (epl::Context is the run's context); see CHANGELOG.md")]] = Pass<D, Hooks>;

}  // namespace nn
}  // namespace v0
}  // namespace epl
