#pragma once
/// \file
/// \brief param::Arena and param::materialize — a model's parameters and gradients in two flat
/// buffers, each parameter a view of its range, drawn from the single-device initialisation by
/// global ordinal.
///
/// The flat layout is in backward order (the last layer's parameters first, at offset 0), so the
/// gradients of a bucket that backward completes are one contiguous range: a bucket all-reduces
/// in place, with no copy in or out, and a ZeRO partition is a range too.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epl/core/random.hpp"
#include "epl/core/tensor.hpp"
#include "epl/nn/walk.hpp"

namespace epl {
inline namespace v0 {
namespace param {

/// \brief Options of materialize.
struct MaterializeOptions {
  DType dtype = DType::kF32;  ///< element type of values and gradients
  std::uint64_t seed = 0;     ///< the init streams: parameter k draws from (seed, k)
  std::int64_t align = 16;    ///< each parameter starts at a multiple of this many elements
  /// Parameters to allocate on this rank (a pipeline stage's, say); null: all. Every parameter
  /// is numbered, allocated or not, so ordinals and draws are the whole model's.
  std::function<bool(const nn::Parameter&)> owned = nullptr;
  /// ZeRO: the layout is cut into blocks of about this many elements (0: one block), a parameter
  /// never split; each block is padded to a multiple of shards x align, so `shards` ranks own
  /// equal, aligned slices of it (what reduce_scatter and all_gather exchange).
  std::int64_t block_elements = 0;
  int shards = 1;
  /// Parameters of different segments (a pipeline rank's chunks) never share a block; null: one.
  std::function<int(const nn::Parameter&)> segment = nullptr;
};

/// \brief A contiguous range [begin, end) of an arena's flat buffers.
struct Range {
  std::int64_t begin = 0, end = 0;
  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
};

/// \brief Where an arena puts its parameters: each one's offset, the padded size and the blocks.
struct Layout {
  std::vector<std::int64_t> offsets;  ///< of order[i]
  std::int64_t size = 0;              ///< elements of the value (and gradient) buffer
  std::vector<Range> blocks;          ///< ZeRO's blocks (one when not cut), each divisible by shards
};

/// \brief The layout materialize gives parameters `order` (backward order) under opt: what the
/// planner reads to predict an arena's bytes without drawing it.
inline Layout layout(const std::vector<nn::Parameter*>& order, const MaterializeOptions& opt) {
  Layout out;
  out.offsets.reserve(order.size());
  const std::int64_t quantum = opt.align * opt.shards;  // a block's size divides by this
  auto close_block = [&] {
    out.size = (out.size + quantum - 1) / quantum * quantum;
    const std::int64_t begin = out.blocks.empty() ? 0 : out.blocks.back().end;
    if (out.size > begin) out.blocks.push_back({begin, out.size});
  };
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto* p = order[i];
    const std::int64_t block_begin = out.blocks.empty() ? 0 : out.blocks.back().end;
    const bool new_segment = i > 0 && opt.segment && opt.segment(*p) != opt.segment(*order[i - 1]);
    if (i > 0 && (new_segment || (opt.block_elements > 0 && out.size - block_begin >= opt.block_elements))) close_block();
    out.offsets.push_back(out.size);
    out.size += (p->numel() + opt.align - 1) / opt.align * opt.align;
  }
  close_block();
  return out;
}

class Arena;
template <class L, class D>
Arena materialize(L& l, const D& d, MaterializeOptions opt = {});
namespace detail {
template <class D>
Arena lay_out(const std::vector<nn::Parameter*>& visiting, const D& d, const MaterializeOptions& opt);
}  // namespace detail


/// \brief The flat buffers of a model's (owned) parameters: values (kParameters) and
/// gradients (kGradients), and the parameters in layout order.
class Arena {
 public:
  Arena() = default;
  /// \brief All values, [size()] (alignment padding included, kept zero).
  [[nodiscard]] const Tensor& values() const noexcept { return values_; }
  /// \brief All gradients, [size()].
  [[nodiscard]] const Tensor& grads() const noexcept { return grads_; }
  [[nodiscard]] std::int64_t size() const noexcept { return size_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  /// \brief The parameters in layout (backward) order.
  [[nodiscard]] const std::vector<nn::Parameter*>& parameters() const noexcept { return order_; }
  /// \brief A parameter's range in the flat buffers.
  [[nodiscard]] static Range range_of(const nn::Parameter& p) { return {p.offset, p.offset + p.numel()}; }
  /// \brief The values or gradients of a range, as a 1-D view.
  [[nodiscard]] Tensor values(Range r) const { return values_.slice(r.begin, r.end); }
  [[nodiscard]] Tensor grads(Range r) const { return grads_.slice(r.begin, r.end); }
  /// \brief The blocks of the layout (what one ZeRO reduce-scatter or all-gather moves), in layout order; one block when the arena
  /// was not cut. Each parameter lies in one block; each block's size divides by shards().
  [[nodiscard]] const std::vector<Range>& blocks() const noexcept { return blocks_; }
  [[nodiscard]] int shards() const noexcept { return shards_; }
  /// \brief Shard k of block u: the k-th of shards() equal slices.
  [[nodiscard]] Range shard(std::size_t u, int k) const {
    const Range r = blocks_.at(u);
    const std::int64_t len = r.size() / shards_;
    return {r.begin + k * len, r.begin + (k + 1) * len};
  }
  /// \brief The block holding arena offset o.
  [[nodiscard]] std::size_t block_of(std::int64_t o) const {
    auto it = std::upper_bound(blocks_.begin(), blocks_.end(), o, [](std::int64_t x, const Range& r) { return x < r.end; });
    EPL_CHECK(it != blocks_.end() && o >= it->begin, "arena offset ", o, " lies in no block");
    return static_cast<std::size_t>(it - blocks_.begin());
  }
  /// \brief Frees the full gradient buffer (ZeRO 2 and 3 keep shards of it elsewhere): the
  /// parameters' grad views are reset, and grads() is empty.
  void drop_grads() {
    for (auto* p : order_) p->grad = {};
    grads_ = {};
  }
  /// \brief Frees the full value buffer (ZeRO 3): the parameters' value views are reset until a
  /// block is gathered again, and values() is empty.
  void drop_values() {
    for (auto* p : order_) p->value = {};
    values_ = {};
  }

 private:
  template <class D>
  friend Arena detail::lay_out(const std::vector<nn::Parameter*>&, const D&, const MaterializeOptions&);
  Tensor values_, grads_;
  std::int64_t size_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<nn::Parameter*> order_;
  std::vector<Range> blocks_;
  int shards_ = 1;
};

namespace detail {
// materialize's model-free part: lays out the owned parameters `visiting` (in visiting order,
// numbered) and draws their values; compiled once per device type, not once per model.
template <class D>
Arena lay_out(const std::vector<nn::Parameter*>& visiting, const D& d, const MaterializeOptions& opt) {
  Arena a;
  a.dtype_ = opt.dtype;
  a.order_.assign(visiting.rbegin(), visiting.rend());  // backward order
  a.shards_ = opt.shards;
  const Layout lay = layout(a.order_, opt);
  for (std::size_t i = 0; i < a.order_.size(); ++i) a.order_[i]->offset = lay.offsets[i];
  a.size_ = lay.size;
  a.blocks_ = lay.blocks;
  a.values_ = d.zeros({a.size_}, opt.dtype, MemoryCategory::kParameters);
  a.grads_ = d.zeros({a.size_}, opt.dtype, MemoryCategory::kGradients);

  // Values are drawn on the host in double, in chunks (staging stays small however large a
  // parameter is), narrowed to the arena's dtype and uploaded. The staging is host memory on the
  // account of d's own index: thread ranks materialize at once, and each one's is its own rank's.
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  auto& staging = host_allocator(d.id().index);
  for (auto* p : a.order_) {
    p->value = a.values(Arena::range_of(*p)).view(p->shape);
    p->grad = a.grads(Arena::range_of(*p)).view(p->shape);
    const auto key = stream_key(opt.seed, static_cast<std::uint64_t>(p->ordinal));
    const std::int64_t n = p->numel();
    Tensor drawn(staging, {std::min(n, kChunk)}, DType::kF64, MemoryCategory::kWorkspace);
    Tensor narrowed = opt.dtype == DType::kF64 ? drawn : Tensor(staging, {std::min(n, kChunk)}, opt.dtype, MemoryCategory::kWorkspace);
    for (std::int64_t begin = 0; begin < n; begin += kChunk) {
      const std::int64_t len = std::min(kChunk, n - begin);
      auto* out = drawn.data<double>();
      for (std::int64_t i = 0; i < len; ++i) out[i] = p->init.value(key, p->global_index(begin + i));
      if (opt.dtype == DType::kF32) std::copy(out, out + len, narrowed.data<float>());  // rounds to nearest, as a cast does
      d.upload(narrowed.raw(), a.values({p->offset + begin, p->offset + begin + len}));
    }
  }
  return a;
}
inline void check(const MaterializeOptions& opt) {
  EPL_CHECK(opt.align >= 1, "materialize: align ", opt.align, " must be at least 1");
  EPL_CHECK(opt.shards >= 1, "materialize: shards ", opt.shards, " must be at least 1");
  EPL_CHECK(opt.dtype == DType::kF32 || opt.dtype == DType::kF64, "materialize: parameters of dtype ", name_of(opt.dtype),
            "; they are f32 or f64 (half precision is mixed precision's: its master weights stay f32)");
}
}  // namespace detail

/// \brief Numbers l's parameters and random streams in visiting order, lays the owned
/// parameters out in one flat value buffer and one flat gradient buffer on device d, points
/// each parameter's value and grad at its range, and draws the values: element i of parameter
/// k is init(seed, k, its index in the whole parameter), so every rank, every shard and every
/// run agree with the single-device model. Gradients start at zero.
template <class L, class D>
Arena materialize(L& l, const D& d, MaterializeOptions opt) {
  detail::check(opt);
  std::int64_t ordinal = 0;
  std::vector<nn::Parameter*> visiting;
  // A parameter listed twice (a visit(v) that names one member under two names) was laid out twice:
  // 228 parameters counted for 164, a checkpoint that could not be read back, and on 2 ranks an
  // error about the reducer's arena (a stranger's finding).
  std::map<const nn::Parameter*, std::string> named;
  nn::visit_parameters(l, [&](std::string_view name, nn::Parameter& p) {
    const auto [first, fresh] = named.emplace(&p, std::string(name));
    EPL_CHECK(fresh, "the model lists one parameter twice, as ", first->second, " and ", name, " (", p.shape,
              "): a layer's visit(v) names a member twice; name each parameter once (a weight shared by two layers is "
              "not supported: give each layer its own)");
    // A parameter of no elements shares its offset with the next one: a data-parallel reducer
    // then never saw that one ready, and a checkpoint left it out and could not be resumed from
    // (a stranger's finding).
    EPL_CHECK(p.shape.numel() > 0, "parameter ", name, " has shape ", p.shape, ", no elements: every parameter holds at least "
              "one value (a scalar is Shape{}); leave an unused one out of the layer's visit(v), or give it a size");
    p.ordinal = ordinal++;
    p.offset = -1;
    p.value = {};
    p.grad = {};
    if (!opt.owned || opt.owned(p)) visiting.push_back(&p);
  });
  std::int64_t streams = 0;
  nn::for_each_stream(l, [&](nn::RandomStream& s) { s.ordinal = streams++; });
  try {
    return detail::lay_out(visiting, d, opt);
  } catch (const Error& e) {
    // an arena too large to allocate: its largest parameter says why (one stray token id of 2^31 - 1
    // made a vocabulary of 2^31 and was reported as "reduce the batch or the model", a stranger's finding)
    const nn::Parameter* largest = nullptr;
    for (const nn::Parameter* p : visiting)
      if (!largest || p->numel() > largest->numel()) largest = p;
    const bool memory = e.detail().find("allocation") != std::string::npos || e.detail().find("out of memory") != std::string::npos;
    if (!largest || !memory) throw;
    EPL_FAIL(e.detail(), "; the largest of the ", visiting.size(), " parameters is ", named.at(largest), " ", largest->shape);
  }
}

}  // namespace param
}  // namespace v0
}  // namespace epl
