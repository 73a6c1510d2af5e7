#pragma once
/// \file
/// \brief How a step's gradients meet across the data-parallel group: the gradient_sync concept
/// and its two models, policy::AllReduceSync (epl::Zero<0>: every rank holds every gradient,
/// all-reduced in buckets) and policy::ZeroSync (epl::Zero<1..3>: ZeRO's shards, any stage up to
/// the compiled one). A sync is also the hooks of a training pass: nn::forward and nn::backward
/// call it around each leaf layer, where the reductions start and ZeRO-3 gathers.
///
/// A step, for either:
///   begin_step()            gradients to zero
///   backward_of(m, M)       before micro-batch m's backward (the last one's gradients are final)
///   ... the schedule's forwards and backwards: the hooks start the reductions ...
///   finish()                every gradient this rank holds is reduced
///   owned_grads()           what the optimizer updates (the whole arena, or this rank's ZeRO slices)
///   sum_squares()           this rank's part of the squared global norm (clipping)
///   after_update()          ZeRO: the updated slices meet again
#include <memory>
#include <type_traits>
#include <vector>

#include "epl/policy/reducer.hpp"
#include "epl/policy/setup.hpp"
#include "epl/policy/zero.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

/// \brief A rank's part of the squared L2 norm of the reduced gradients: of the parameters every
/// rank of a split group holds alike (`whole`, counted once) and of the parts a split group shards
/// (`sharded`, summed over the tensor axis). Over the data axis it is already the group's.
struct SquaredNorms {
  double whole = 0, sharded = 0;
};

/// \brief S satisfies gradient_sync if 1. begin_step() zeroes the gradients, 2. backward_of(m, M)
/// is told each micro-batch's backward before it runs, 3. its hooks (before_forward,
/// before_backward, after_backward of a leaf layer and a pass) start the reductions, 4. finish()
/// returns when every gradient this rank holds is reduced, 5. owned_values() and owned_grads()
/// are the flat ranges this rank updates, 6. sum_squares() is its part of the global norm, and
/// 7. after_update() follows the update.
template <class S>
concept gradient_sync = requires(S& s, const S& cs, int m) {
  s.begin_step();
  s.backward_of(m, m);
  s.finish();
  { cs.owned_values() } -> std::same_as<std::vector<Tensor>>;
  { cs.owned_grads() } -> std::same_as<std::vector<Tensor>>;
  { cs.sum_squares() } -> std::same_as<SquaredNorms>;
  s.after_update();
};

/// \brief How a sync reduces: the communication keys, and where the arena's gradients meet.
struct SyncOptions {
  BucketOptions buckets;
  /// Start each bucket's all-reduce as backward completes it (false: EPL's per-replica clipping,
  /// communication.clip_after_allreduce=false: reduce after the local gradient was clipped).
  bool overlap = true;
  /// The arena offset from which parameters meet over the stage group instead of the data group
  /// (a colocated split's replicated part: summed over the tensor axis, averaged over replicas);
  /// -1: none.
  std::int64_t replicated_from = -1;
  bool tensor_parallel = false;  ///< the arena holds parts of split parameters
  int zero_stage = 0;            ///< ZeroSync: the stage this run uses, up to the compiled one
  bool offload = false;          ///< ZeroSync: the shards in the host pool (stage 3)

  /// \brief What the run's policies ask of the sync; replicated_from and tensor_parallel come
  /// from the strategy's plan.
  static SyncOptions of(const Setup& s, std::int64_t replicated_from, bool tensor_parallel) {
    const BucketOptions buckets{.max_splits = s.max_splits, .fp16 = s.fp16, .fp16_scale = s.fp16_scale,
                                .op = s.mean ? comm::ReduceOp::kMean : comm::ReduceOp::kSum};
    return {buckets, s.clip_after_reduce, replicated_from, tensor_parallel, s.zero_stage, s.offload};
  }
};

namespace detail {
// The squared norms of gradients per parameter, each the part `grad_of(p)` this rank holds.
template <class D, class GradOf>
SquaredNorms per_parameter(const D& d, const param::Arena& arena, GradOf&& grad_of) {
  SquaredNorms sq;
  for (auto* p : arena.parameters()) {
    const Tensor g = grad_of(*p);
    if (g.defined() && g.numel() > 0) (p->shard.whole() ? sq.whole : sq.sharded) += d.sum_squares(g);
  }
  return sq;
}
}  // namespace detail

/// \brief Every rank holds every gradient, all-reduced in buckets over the data group as backward
/// completes them (epl::Zero<0>). Models gradient_sync.
template <class D>
class AllReduceSync {
 public:
  AllReduceSync(const D& device, comm::Communicator& data, comm::Communicator* stage_group, param::Arena& arena, const SyncOptions& o)
      : device_(&device), arena_(&arena), overlap_(o.overlap), tensor_parallel_(o.tensor_parallel) {
    const std::int64_t split = o.replicated_from < 0 ? arena.size() : o.replicated_from;
    // ZeRO stages 2 and 3 reduce every gradient into shards: no bucket here
    reducers_.add(device, data, arena, o.buckets, {0, o.zero_stage >= 2 ? 0 : split});
    if (split < arena.size()) {  // each rank holds its rows' share of a replica's gradient: summed over the tensor axis
      EPL_CHECK(stage_group != nullptr, "a colocated split's replicated part needs its stage group");
      auto b = o.buckets;
      b.mean_over = data.size();
      reducers_.add(device, *stage_group, arena, b, {split, arena.size()});
    }
  }
  AllReduceSync(const AllReduceSync&) = delete;
  AllReduceSync& operator=(const AllReduceSync&) = delete;

  template <class L, class Pass> void before_forward(L&, Pass&) {}
  template <class L, class Pass> void before_backward(L&, Pass&) {}
  /// A leaf layer's gradients are final (in the last micro-batch): its buckets may start.
  template <class L, class Pass>
  void after_backward(L& l, Pass&) {
    if (active_) nn::for_each_parameter(l, [&](nn::Parameter& p) { reducers_.ready(p); });
  }

  void begin_step() { device_->fill(arena_->grads(), 0.0); }
  void backward_of(int m, int count) { active_ = overlap_ && m + 1 == count && reducers_.buckets() > 0; }
  void finish() {
    active_ = false;
    if (!overlap_) reducers_.ready_all();
    reducers_.finish();
  }
  [[nodiscard]] std::vector<Tensor> owned_values() const { return {arena_->values()}; }
  [[nodiscard]] std::vector<Tensor> owned_grads() const { return {arena_->grads()}; }
  [[nodiscard]] SquaredNorms sum_squares() const {
    if (!tensor_parallel_) return {device_->sum_squares(arena_->grads()), 0};
    return detail::per_parameter(*device_, *arena_, [](const nn::Parameter& p) { return p.grad; });
  }
  void after_update() {}

  [[nodiscard]] int stage() const noexcept { return 0; }
  [[nodiscard]] Tensor grad_of(const nn::Parameter& p) const { return p.grad; }
  void gather_all() {}
  [[nodiscard]] std::vector<Tensor> gathered() const { return {arena_->values()}; }
  void write_back() {}
  void release_all() {}
  [[nodiscard]] std::vector<param::Range> owned_ranges() const { return {{0, arena_->size()}}; }
  [[nodiscard]] std::size_t buckets() const noexcept { return reducers_.buckets(); }
  [[nodiscard]] double last_overlap() const noexcept { return reducers_.last_overlap(); }
  void set_timeline(Timeline* t) noexcept { reducers_.set_timeline(t); }

 private:
  const D* device_;
  param::Arena* arena_;
  ReducerSet<D> reducers_;
  bool overlap_, tensor_parallel_;
  bool active_ = false;
};

/// \brief ZeRO over the data group at a run-time stage up to the compiled one (epl::Zero<k>):
/// stage 0 is AllReduceSync; stage 1 all-reduces gradients as it does and updates owned slices;
/// stages 2 and 3 reduce-scatter into shards (policy::ZeroSharder). Models gradient_sync.
template <class D>
class ZeroSync {
 public:
  ZeroSync(const D& device, comm::Communicator& data, comm::Communicator* stage_group, param::Arena& arena, const SyncOptions& o)
      : device_(&device), arena_(&arena), reduce_(device, data, stage_group, arena, o), stage_(o.zero_stage),
        tensor_parallel_(o.tensor_parallel) {
    if (stage_ == 0) return;
    sharder_ = std::make_unique<ZeroSharder<D>>(device, data, arena, stage_, o.buckets.op, o.offload);
    if (data.size() > 1) scalars_ = data.split(0, 0);  // each rank's norm is over the slices it owns: they sum
  }
  ZeroSync(const ZeroSync&) = delete;
  ZeroSync& operator=(const ZeroSync&) = delete;

  template <class L, class Pass>
  void before_forward(L& l, Pass&) {
    if (sharder_) sharder_->before_forward(l);
  }
  template <class L, class Pass>
  void after_forward(L& l, Pass&) {
    if (sharder_) sharder_->after_forward(l);
  }
  template <class L, class Pass>
  void before_backward(L& l, Pass&) {
    if (sharder_) sharder_->before_backward(l);
  }
  template <class L, class Pass>
  void after_backward(L& l, Pass& pass) {
    if (sharder_) sharder_->after_backward(l);
    reduce_.after_backward(l, pass);
  }

  void begin_step() {
    if (sharder_) sharder_->zero_grads();
    else reduce_.begin_step();
  }
  void backward_of(int m, int count) { reduce_.backward_of(m, count); }
  void finish() {
    reduce_.finish();
    if (sharder_) sharder_->finish();
  }
  [[nodiscard]] std::vector<Tensor> owned_values() const { return sharder_ ? sharder_->owned_values() : reduce_.owned_values(); }
  [[nodiscard]] std::vector<Tensor> owned_grads() const { return sharder_ ? sharder_->owned_grads() : reduce_.owned_grads(); }
  // Over the owned slices, the gradients the step unscales, clips and updates: at stage 1 the
  // rest of the all-reduced gradient is whole too, but nothing takes the loss scale off it.
  [[nodiscard]] SquaredNorms sum_squares() const {
    if (stage_ == 0) return reduce_.sum_squares();
    SquaredNorms sq;
    if (!tensor_parallel_) {
      for (const auto& g : sharder_->owned_grads()) sq.whole += device_->sum_squares(g);
    } else {
      sq = detail::per_parameter(*device_, *arena_, [&](const nn::Parameter& p) { return sharder_->owned_grad_of(p).first; });
    }
    if (!scalars_.valid()) return sq;
    double both[2] = {sq.whole, sq.sharded};
    scalars_.all_reduce(comm::Buffer(both, 2, DType::kF64), comm::ReduceOp::kSum);
    return {both[0], both[1]};
  }
  void after_update() {
    if (sharder_) sharder_->after_update();
  }

  /// \brief The ZeRO stage this run uses (0: none).
  [[nodiscard]] int stage() const noexcept { return stage_; }
  /// \brief The reduced gradient part of p this rank holds (stage 2 and 3: from its shard, an
  /// empty tensor when it holds none of p).
  [[nodiscard]] Tensor grad_of(const nn::Parameter& p) const { return stage_ >= 2 ? sharder_->owned_grad_of(p).first : p.grad; }
  /// \brief Stage 3: gathers every parameter so the model can be read (a collective).
  void gather_all() {
    if (sharder_) sharder_->gather_all();
  }
  /// \brief The whole parameters a program reads and writes after gather_all(): stage 3's
  /// gathered blocks, or the arena.
  [[nodiscard]] std::vector<Tensor> gathered() {
    return stage_ == 3 ? sharder_->gathered() : std::vector<Tensor>{arena_->values()};
  }
  /// \brief Stage 3: what the user wrote into the gathered parameters goes back into the shards
  /// (before a checkpoint reads them); they stay gathered.
  void write_back() {
    if (sharder_) sharder_->write_back();
  }
  /// \brief Stage 3: drops the gathered parameters (after an evaluation).
  void release_all() {
    if (sharder_) sharder_->release_all();
  }
  /// \brief This rank's slices of the arena (ZeRO), or the whole arena.
  [[nodiscard]] std::vector<param::Range> owned_ranges() const {
    return sharder_ ? sharder_->owned_ranges() : std::vector<param::Range>{{0, arena_->size()}};
  }
  [[nodiscard]] std::size_t buckets() const noexcept { return reduce_.buckets(); }
  [[nodiscard]] double last_overlap() const noexcept { return reduce_.last_overlap(); }
  void set_timeline(Timeline* t) noexcept {
    reduce_.set_timeline(t);
    if (sharder_) sharder_->set_timeline(t);
  }

 private:
  const D* device_;
  param::Arena* arena_;
  AllReduceSync<D> reduce_;
  std::unique_ptr<ZeroSharder<D>> sharder_;  // null at stage 0
  mutable comm::Communicator scalars_;
  int stage_;
  bool tensor_parallel_;
};

/// \brief The gradient sync a Policies<...> list compiles: ZeroSync with epl::Zero<1..3>, else
/// AllReduceSync. It is also the hooks type of the run's passes.
template <class P, class D>
using gradient_sync_t = std::conditional_t<(compiled<P>(false).zero > 0), ZeroSync<D>, AllReduceSync<D>>;

}  // namespace policy
}  // namespace v0
}  // namespace epl
