#pragma once
/// \file
/// \brief policy::ZeroSharder — ZeRO stages 1 to 3 over the data-parallel group, on the blocks of a
/// flat arena.
///
/// The arena is laid out in blocks (param::MaterializeOptions::block_elements), each padded so the
/// group's N ranks own equal, aligned slices of it: rank r owns slice r of every block, and its
/// optimizer state covers those slices only.
///   stage 1  gradients all-reduce as without ZeRO (policy::AllReduceReducer); the update runs on
///            the owned slices; each block's values are then all-gathered in place.
///   stage 2  no full gradient buffer: a block's gradient buffer exists from the backward of its
///            first layer until its reduce_scatter, which starts (asynchronously) the moment its
///            last gradient of the micro-batch is final, into this rank's shard; the shards add up
///            over the micro-batches. Values as stage 1.
///   stage 3  values too live as shards: a block is all-gathered before the forward or backward of
///            a layer that holds parameters in it, and the next block's gather starts then too (in
///            forward or backward order); a block is freed when a gather starts and no running
///            layer uses it. So a step holds the running layer's blocks and the next one.
/// Every rank of the group issues the same collectives in the same order (the hooks fire in the
/// schedule's order), so asynchronous gathers and reductions queue up alike everywhere.
///
/// Offload (offload.level "v0", with stage 3): the shards — values, gradients and, in the
/// Trainer's updater, the optimizer state — live in the device's host pool (device.host_empty).
/// A gather first copies the host shard to the device (straight into the block on a group of one,
/// else into a staging buffer that is all-gathered); a block's reduced gradient lands in a
/// device staging buffer and is added to the host shard when the reduction completes.
#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/timeline.hpp"
#include "epl/nn/layer.hpp"
#include "epl/param/arena.hpp"

namespace epl {
inline namespace v0 {
namespace policy {
namespace detail {
template <class D, bool kHas>
struct copy_ticket {
  using type = std::monostate;
};
template <class D>
struct copy_ticket<D, true> {
  using type = typename D::CopyTicket;
};
}  // namespace detail

/// \brief The arena's layout under ZeRO over `ranks` ranks: blocks of about total / max_splits
/// elements (whole parameters), never two chunks in one (`chunk_of` numbers each owned
/// parameter's chunk), each padded so the ranks own equal, aligned slices.
inline void zero_layout(param::MaterializeOptions& mo, int ranks, std::int64_t max_splits,
                        std::unordered_map<const nn::Parameter*, int> chunk_of) {
  std::int64_t total = 0;
  for (const auto& [p, c] : chunk_of) total += p->numel();
  mo.block_elements = (total + max_splits - 1) / max_splits;
  mo.shards = ranks;
  mo.segment = [chunks = std::move(chunk_of)](const nn::Parameter& q) { return chunks.at(&q); };
}

/// \brief ZeRO stages 1, 2 and 3 over one group, on an arena cut into blocks of group.size() shards.
template <class D>
class ZeroSharder {
 public:
  /// \param stage 1, 2 or 3
  /// \param op how gradients meet (mean or sum: communication.gradients_reduce_method)
  /// \param offload keep the shards in the host pool (stage 3 only)
  ZeroSharder(const D& device, comm::Communicator& group, param::Arena& arena, int stage, comm::ReduceOp op, bool offload = false)
      : device_(&device), group_(&group), arena_(&arena), stage_(stage), op_(op), offload_(offload), blocks_(arena.blocks().size()) {
    EPL_CHECK(stage >= 1 && stage <= 3, "ZeRO stage ", stage, " is not 1, 2 or 3");
    EPL_CHECK(!offload || stage == 3, "offload keeps the weights in host memory and gathers them per layer, which needs ZeRO "
              "stage 3, not ", stage);
    EPL_CHECK(arena.shards() == group.size(), "the arena is cut into ", arena.shards(), " shards for a group of ", group.size(),
              " ranks; materialize it with shards = the data-parallel size");
    const int r = group.rank();
    std::int64_t at = 0;
    for (std::size_t u = 0; u < blocks_.size(); ++u) {
      blocks_[u].owned = arena.shard(u, r);
      blocks_[u].at = at;
      at += blocks_[u].owned.size();
    }
    shard_size_ = at;
    for (auto* p : arena.parameters()) {
      auto& block = blocks_[arena.block_of(p->offset)];
      index_[p] = {arena.block_of(p->offset), block.members.size()};
      block.members.push_back(p);
    }
    for (auto& u : blocks_) u.marked.assign(u.members.size(), 0);
    if (stage_ >= 2) {
      grad_shard_ = offload_ ? host_zeros(shard_size_, MemoryCategory::kGradients)
                             : device.zeros({shard_size_}, arena.dtype(), MemoryCategory::kGradients);
      arena.drop_grads();
    }
    if (stage_ == 3) {
      value_shard_ = offload_ ? host_zeros(shard_size_, MemoryCategory::kParameters)
                              : device.empty({shard_size_}, arena.dtype(), MemoryCategory::kParameters);
      for (std::size_t u = 0; u < blocks_.size(); ++u) device.copy(arena.values(blocks_[u].owned), own_values(u));
      shapes_.reserve(arena.parameters().size());
      for (auto* p : arena.parameters()) shapes_[p] = p->value.shape();
      arena.drop_values();
    }
  }
  ZeroSharder(const ZeroSharder&) = delete;
  ZeroSharder& operator=(const ZeroSharder&) = delete;
  /// Destroyed in the middle of a step (its rank is unwinding), it cancels the group's
  /// outstanding gathers and reductions and waits for them, as the all-reduce reducer does.
  ~ZeroSharder() {
    bool outstanding = false;
    for (auto& p : pending_) outstanding |= !p.work.test();
    for (auto& u : blocks_) outstanding |= !u.gather.test();
    if (!outstanding) return;
    group_->cancel("the ZeRO sharder was destroyed in the middle of a step");
    auto quietly = [](comm::Work& w) {
      try {
        w.wait();
      } catch (...) {  // the step failed; its error is already on its way up
      }
    };
    for (auto& p : pending_) quietly(p.work);
    for (auto& u : blocks_) quietly(u.gather);
  }

  [[nodiscard]] int stage() const noexcept { return stage_; }
  /// \brief Whether the shards live in the host pool (offload.level "v0").
  [[nodiscard]] bool offloaded() const noexcept { return offload_; }
  /// \brief Each reduce_scatter and all_gather becomes a span of t (null: none).
  void set_timeline(Timeline* t) noexcept { timeline_ = t; }
  /// \brief Elements this rank owns (the sum of its slices of every block, padding included).
  [[nodiscard]] std::int64_t shard_size() const noexcept { return shard_size_; }
  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_.size(); }
  /// \brief This rank's slice of each block, in arena offsets (owned_values()[u] holds slice u).
  [[nodiscard]] std::vector<param::Range> owned_ranges() const {
    std::vector<param::Range> r;
    for (const auto& u : blocks_) r.push_back(u.owned);
    return r;
  }

  // ---- the hooks: called around each leaf layer, with the parameters it holds itself ------
  /// \brief Stage 3: the layer's blocks are gathered before its forward; the next block's gather
  /// (in forward order) starts.
  template <class L>
  void before_forward(L& l) {
    if (stage_ < 3) return;
    ++clock_;  // a new layer: the blocks it uses are not evicted while it runs
    std::size_t last = kNone;
    running_.emplace_back();
    nn::for_each_own_parameter(l, [&](nn::Parameter& p) {
      require(last = at(p).block);
      running_.back().push_back(last);
    });
    if (last != kNone && last > 0) prefetch(last - 1);  // the layout is in backward order
  }
  /// \brief Stage 3: the layer's forward returned; a layer that ran it inside its own may evict
  /// its blocks now, and its own are evictable once it returns too.
  template <class L>
  void after_forward(L&) {
    if (stage_ == 3 && !running_.empty()) running_.pop_back();
  }
  /// \brief Stages 2 and 3: the layer's blocks get their gradient buffers; stage 3 gathers them
  /// and starts the next block's gather (in backward order).
  template <class L>
  void before_backward(L& l) {
    if (stage_ < 2) return;
    ++clock_;
    std::size_t last = kNone;
    if (stage_ == 3) running_.emplace_back();
    nn::for_each_own_parameter(l, [&](nn::Parameter& p) {
      last = at(p).block;
      if (stage_ == 3) {
        require(last);
        running_.back().push_back(last);
      }
      open_gradients(last);
    });
    if (stage_ == 3 && last != kNone && last + 1 < blocks_.size()) prefetch(last + 1);
  }
  /// \brief Stages 2 and 3: the layer's gradients are final for this micro-batch; a block whose
  /// gradients all are starts its reduce_scatter.
  template <class L>
  void after_backward(L& l) {
    if (stage_ < 2) return;
    // (never deferred at stage 3, which refuses a schedule that splits backward: its layer's
    // backward has just returned)
    if (stage_ == 3 && !running_.empty()) running_.pop_back();
    nn::for_each_own_parameter(l, [&](nn::Parameter& p) {
      const auto [u, i] = at(p);
      auto& block = blocks_[u];
      if (block.marked[i]) return;
      block.marked[i] = 1;
      if (++block.ready == static_cast<int>(block.members.size())) launch(u);
    });
  }

  // ---- the step around the hooks -------------------------------------------------------
  /// \brief Before a step's first micro-batch: gradients start at zero (stage 1: the arena's).
  /// What a step that failed part-way (its error caught) left open is dropped first.
  void zero_grads() {
    while (!pending_.empty()) complete_front();
    if (stage_ >= 2) device_->fill(grad_shard_, 0.0);
    else device_->fill(arena_->grads(), 0.0);
    for (auto& u : blocks_) {
      u.reduced = false;
      u.ready = 0;
      std::fill(u.marked.begin(), u.marked.end(), 0);
      if (u.grads.defined())
        for (auto* p : u.members) p->grad = {};
      u.grads = {};
    }
    release_all();
  }
  /// \brief After the last micro-batch: waits for every reduction. A block with gradients never
  /// marked final is an error (a layer's backward ran without the hooks).
  void finish() {
    if (stage_ < 2) return;
    for (std::size_t u = 0; u < blocks_.size(); ++u)
      EPL_CHECK(blocks_[u].ready == 0 && blocks_[u].reduced, "ZeRO block ", u, " has ", blocks_[u].ready, " of ",
                blocks_[u].members.size(), " gradients final at the end of the step: a layer's backward ran without the hooks "
                "(call nn::backward, not layer.backward, on sub-layers) or a parameter took no part in this step");
    while (!pending_.empty()) complete_front();
  }
  /// \brief The values this rank updates: its slice of each block (stage 3: of its shard).
  [[nodiscard]] std::vector<Tensor> owned_values() const {
    std::vector<Tensor> v;
    for (std::size_t u = 0; u < blocks_.size(); ++u) v.push_back(stage_ == 3 ? own_values(u) : arena_->values(blocks_[u].owned));
    return v;
  }
  /// \brief The gradients of those values, reduced over the group.
  [[nodiscard]] std::vector<Tensor> owned_grads() const {
    std::vector<Tensor> v;
    for (std::size_t u = 0; u < blocks_.size(); ++u) v.push_back(stage_ >= 2 ? own_grads(u) : arena_->grads(blocks_[u].owned));
    return v;
  }
  /// \brief After the update: every rank's updated slices meet again (stages 1 and 2: each
  /// block all-gathered in place; stage 3: gathered copies are dropped, now stale).
  void after_update() {
    if (stage_ == 3) return release_all();
    std::vector<comm::Work> works;
    for (std::size_t u = 0; u < blocks_.size(); ++u)
      works.push_back(group_->all_gather_async(arena_->values(blocks_[u].owned), arena_->values(arena_->blocks()[u])));
    for (std::size_t u = 0; u < works.size(); ++u) {
      works[u].wait();
      span("all_gather", u, works[u]);
    }
  }
  /// \brief Stage 3: gathers every block so the model's parameters can be read or written (a
  /// collective over the group); they stay until the next step or the end of an evaluation, when
  /// each rank copies its slice of them back into its shard (so writes made on every rank alike
  /// are kept, as under the other stages).
  void gather_all() {
    if (stage_ < 3) return;
    pinned_ = true;
    for (std::size_t u = 0; u < blocks_.size(); ++u) require(u);
  }
  /// \brief Stage 3, the parameters gathered for the user (gather_all): each rank copies its
  /// slice of them back into its shard, where a checkpoint reads them; they stay gathered.
  void write_back() {
    if (stage_ < 3 || !pinned_) return;
    for (std::size_t u = 0; u < blocks_.size(); ++u)
      if (blocks_[u].values.defined()) {
        blocks_[u].gather.wait();
        const std::int64_t b = blocks_[u].owned.begin - arena_->blocks()[u].begin;
        device_->copy(blocks_[u].values.slice(b, b + blocks_[u].owned.size()), own_values(u));
      }
  }
  /// \brief Stage 3, the parameters gathered for the user (gather_all): each block whole, its
  /// gather completed; empty when none are.
  [[nodiscard]] std::vector<Tensor> gathered() {
    std::vector<Tensor> v;
    if (stage_ < 3 || !pinned_) return v;
    for (auto& b : blocks_)
      if (b.values.defined()) {
        b.gather.wait();
        v.push_back(b.values);
      }
    return v;
  }
  /// \brief Stage 3: drops every gathered block (after an evaluation); what the user wrote into
  /// them goes back into the shard first (write_back).
  void release_all() {
    if (stage_ < 3) return;
    running_.clear();  // no layer runs now (what a failed pass left)
    write_back();
    pinned_ = false;
    for (std::size_t u = 0; u < blocks_.size(); ++u) release(u);
  }
  /// \brief This rank's part of p's reduced gradient (stages 2 and 3: from its shard; empty when
  /// it owns none of p), as a flat view with its first element's index in p.
  [[nodiscard]] std::pair<Tensor, std::int64_t> owned_grad_of(const nn::Parameter& p) const {
    const auto& block = blocks_[at(p).block];
    const std::int64_t b = std::max(p.offset, block.owned.begin), e = std::min(p.offset + p.numel(), block.owned.end);
    if (b >= e) return {Tensor{}, 0};
    const Tensor all = stage_ >= 2 ? own_grads(at(p).block) : arena_->grads(block.owned);
    return {all.slice(b - block.owned.begin, e - block.owned.begin), b - p.offset};
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  // A device's copy_ahead() ticket (a copy on its copy stream), or nothing for a device that
  // copies only in order.
  static constexpr bool kCopyAhead = requires(const D& d, const Tensor& t) { d.await(d.copy_ahead(t, t)); };
  using Ticket = typename detail::copy_ticket<D, kCopyAhead>::type;
  struct Block {
    param::Range owned;             // this rank's slice, in arena offsets
    std::int64_t at = 0;            // its offset in the shard buffers
    std::vector<nn::Parameter*> members;
    std::vector<char> marked;       // final in this micro-batch
    int ready = 0;
    bool reduced = false;           // reduced at least once this step
    Tensor grads;                   // stages 2 and 3: the block's gradient buffer, while open
    Tensor values;                  // stage 3: the gathered block, while resident
    Tensor staging;                 // offload: the host shard copied to the device, while it is gathered
    comm::Work gather;
    std::optional<Ticket> copied;   // offload on one rank: the copy from the host pool, until awaited
    bool gather_seen = false;       // waited for, its span recorded
    std::uint64_t used = 0;         // last use, for eviction
  };
  struct Where {
    std::size_t block, index;
  };
  struct Pending {
    std::size_t block;
    comm::Work work;
    Tensor buffer, staging;         // kept alive until the reduction completes
    bool first = false;             // staging replaces the shard (offload's first reduction) rather than adding to it
  };

  [[nodiscard]] Where at(const nn::Parameter& p) const {
    auto it = index_.find(&p);
    EPL_CHECK(it != index_.end(), "a parameter the ZeRO sharder does not hold reached its hooks (materialize the model with "
              "this trainer's arena)");
    return it->second;
  }
  [[nodiscard]] Tensor own_values(std::size_t u) const {
    return value_shard_.slice(blocks_[u].at, blocks_[u].at + blocks_[u].owned.size());
  }
  [[nodiscard]] Tensor own_grads(std::size_t u) const {
    return grad_shard_.slice(blocks_[u].at, blocks_[u].at + blocks_[u].owned.size());
  }
  // A view of block-local range r of buffer (a block's gradients or gathered values) shaped as p.
  [[nodiscard]] Tensor view(const Tensor& buffer, std::size_t u, const nn::Parameter& p, const Shape& s) const {
    const std::int64_t b = p.offset - arena_->blocks()[u].begin;
    return buffer.slice(b, b + p.numel()).view(s);
  }

  // Stage 2 and 3: the block's gradient buffer, zero, with its members' grad views in it.
  void open_gradients(std::size_t u) {
    auto& block = blocks_[u];
    if (block.grads.defined()) return;
    block.grads = device_->zeros({arena_->blocks()[u].size()}, arena_->dtype(), MemoryCategory::kGradients);
    for (auto* p : block.members) p->grad = view(block.grads, u, *p, shape_of(*p));
  }
  [[nodiscard]] Shape shape_of(const nn::Parameter& p) const {
    if (stage_ < 3) return p.value.shape();
    return shapes_.at(&p);
  }
  // The block's gradients are final for this micro-batch: reduce-scatter them into the shard
  // (the first time this step) or into a staging slice added to it when the reduction completes.
  void launch(std::size_t u) {
    auto& block = blocks_[u];
    EPL_CHECK(block.grads.defined(), "ZeRO block ", u, ": gradients final before its backward began");
    Pending job{u, {}, std::move(block.grads), {}};
    for (auto* p : block.members) p->grad = {};
    Tensor out = own_grads(u);
    if (block.reduced || offload_) {  // offload: the reduction runs on the device, then goes to the host shard
      out = job.staging = device_->empty({block.owned.size()}, arena_->dtype(), MemoryCategory::kGradients);
      job.first = !block.reduced;
    }
    job.work = group_->reduce_scatter_async(job.buffer, out, op_);
    block.reduced = true;
    block.ready = 0;
    std::fill(block.marked.begin(), block.marked.end(), 0);
    pending_.push_back(std::move(job));
    while (pending_.size() > 2) complete_front();  // at most two gradient buffers in flight
  }
  void complete_front() {
    Pending job = std::move(pending_.front());
    pending_.pop_front();
    job.work.wait();
    span("reduce_scatter", job.block, job.work);
    if (job.first) device_->copy(job.staging, own_grads(job.block));
    else if (job.staging.defined()) device_->axpy(1.0, job.staging, own_grads(job.block));
  }

  // Stage 3: the block gathered and its members' value views in it.
  void require(std::size_t u) {
    auto& block = blocks_[u];
    block.used = clock_;
    if (!block.values.defined()) start_gather(u);
    if (!block.gather_seen) {
      block.gather.wait();
      settle(block);
      span("all_gather", u, block.gather);
      block.gather_seen = true;
      block.staging = {};
    }
    if (!block.members.empty() && !block.members.front()->value.defined())
      for (auto* p : block.members) p->value = view(block.values, u, *p, shapes_.at(p));
  }
  void prefetch(std::size_t u) {
    if (!blocks_[u].values.defined()) {
      start_gather(u);
      blocks_[u].used = clock_ - 1;  // not used yet: it goes before the running layer's blocks
    }
  }
  void start_gather(std::size_t u) {
    evict_for_one_more(u);
    auto& block = blocks_[u];
    block.values = device_->empty({arena_->blocks()[u].size()}, arena_->dtype(), MemoryCategory::kParameters);
    block.gather_seen = false;
    if (!offload_) {
      block.gather = group_->all_gather_async(own_values(u), block.values);
    } else if (group_->size() == 1) {  // host to device: the whole block is this rank's
      if constexpr (kCopyAhead) block.copied = device_->copy_ahead(own_values(u), block.values);  // beside the compute
      else device_->copy(own_values(u), block.values);
      block.gather = {};
    } else {
      block.staging = device_->empty({blocks_[u].owned.size()}, arena_->dtype(), MemoryCategory::kParameters);
      device_->copy(own_values(u), block.staging);
      block.gather = group_->all_gather_async(block.staging, block.values);
    }
  }
  void span(const char* what, std::size_t u, const comm::Work& w) {
    if (auto [start, end] = w.interval(); timeline_ && start != Timeline::Clock::time_point{})
      timeline_->add(std::string(what) + " " + std::to_string(u), what, Span::Lane::kCommunication, start, end);
  }
  // Makes room for gathering u: frees every other resident block but those of the running layer,
  // so what stage 3 holds gathered is the running layer's blocks and the next one (never while
  // pinned by gather_all). Each rank of the group frees alike: the same uses in the same order.
  void evict_for_one_more(std::size_t u) {
    if (pinned_) return;
    auto running = [&](std::size_t k) {
      return std::any_of(running_.begin(), running_.end(), [&](const std::vector<std::size_t>& blocks) {
        return std::find(blocks.begin(), blocks.end(), k) != blocks.end();
      });
    };
    for (std::size_t k = 0; k < blocks_.size(); ++k)
      if (blocks_[k].values.defined() && k != u && blocks_[k].used != clock_ && !running(k)) release(k);
  }
  void release(std::size_t u) {
    auto& block = blocks_[u];
    if (!block.values.defined()) return;
    block.gather.wait();
    settle(block);  // a prefetch evicted unused: its memory is reused after the copy, not before
    for (auto* p : block.members) p->value = {};
    block.values = {};
    block.staging = {};
    block.gather = {};
  }
  // The device's later work sees the block's copy from the host pool (offload on one rank).
  void settle(Block& block) {
    if constexpr (kCopyAhead)
      if (block.copied) device_->await(*std::exchange(block.copied, std::nullopt));
  }
  [[nodiscard]] Tensor host_zeros(std::int64_t n, MemoryCategory c) const {
    return device_->host_zeros({n}, arena_->dtype(), c);
  }

  const D* device_;
  comm::Communicator* group_;
  param::Arena* arena_;
  int stage_;
  comm::ReduceOp op_;
  bool offload_ = false;
  std::vector<Block> blocks_;
  std::unordered_map<const nn::Parameter*, Where> index_;
  std::unordered_map<const nn::Parameter*, Shape> shapes_;
  std::int64_t shard_size_ = 0;
  Tensor grad_shard_, value_shard_;
  std::deque<Pending> pending_;
  std::uint64_t clock_ = 0;
  // The blocks of each layer running now, outermost first: a layer may run another inside its
  // forward or backward (nn::MoE its gate, a user's layer its sub-layer), and that one's gathers
  // must not evict what the outer layer reads after it returns. Empty between layers; a pass that
  // failed part-way is cleared at the next step (zero_grads) or release.
  std::vector<std::vector<std::size_t>> running_;
  bool pinned_ = false;
  Timeline* timeline_ = nullptr;
};

}  // namespace policy
}  // namespace v0
}  // namespace epl
