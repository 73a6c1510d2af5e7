#pragma once
/// \file
/// \brief policy::AllReduceReducer: gradients fused into buckets that are contiguous
/// ranges of the arena's flat gradient buffer, each all-reduced in place and asynchronously as
/// soon as backward has produced all of its gradients, so the last layer's gradients leave first
/// and communication overlaps the rest of the backward pass.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/timeline.hpp"
#include "epl/param/arena.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

/// \brief How gradients are fused and reduced (EPL's communication.* keys).
struct BucketOptions {
  int max_splits = 5;              ///< at most this many buckets (communication.max_splits)
  std::int64_t bucket_bytes = 0;   ///< target bytes per bucket; 0: total / max_splits
  bool fp16 = false;               ///< communication.fp16: reduce in half precision
  /// kMean divides the sum by this many ranks (0: the group's size). A colocated split's
  /// replicated part sums its ranks' shares of a replica's gradient over the tensor axis and
  /// averages over the replicas: mean_over = the replicas.
  int mean_over = 0;
  double fp16_scale = 128;         ///< communication.fp16_scale: multiply before the cast
  comm::ReduceOp op = comm::ReduceOp::kMean;  ///< communication.gradients_reduce_method
};

/// \brief Bucketed, overlapped all-reduce of an arena's gradients over a group (every rank holds
/// every gradient: no ZeRO). A group of one has nothing to reduce: ready() and finish() return
/// at once, on the same code path. A reducer may take only a range of the arena (the parameters
/// whose gradients meet over this group; others go to another reducer and are ignored here).
template <class D>
class AllReduceReducer {
 public:
  AllReduceReducer(const D& device, comm::Communicator& group, const param::Arena& arena, BucketOptions opt = {},
                   param::Range range = {0, -1})
      : device_(&device), group_(&group), arena_(&arena), opt_(opt), range_(range) {
    if (range_.end < 0) range_.end = arena.size();
    EPL_CHECK(opt.max_splits >= 1, "communication.max_splits = ", opt.max_splits, " must be at least 1");
    EPL_CHECK(!opt.fp16 || opt.fp16_scale > 0, "communication.fp16_scale = ", opt.fp16_scale, " must be positive");
    EPL_CHECK(arena.dtype() == DType::kF32 || arena.dtype() == DType::kF64, "gradients of dtype ", name_of(arena.dtype()),
              " cannot be reduced; the arena must be f32 or f64");
    for (auto* p : arena.parameters())
      if (p->offset >= range_.begin && p->offset < range_.end) params_.push_back(p);
    const auto& params = params_;
    const std::int64_t elem = static_cast<std::int64_t>(size_of(arena.dtype()));
    const std::int64_t total = range_.size() * elem;
    const std::int64_t target = opt.bucket_bytes > 0 ? opt.bucket_bytes : (total + opt.max_splits - 1) / opt.max_splits;
    // Buckets cut the layout (backward) order into ranges of about `target` bytes; a bucket
    // ends where the next parameter starts, so padding travels with the parameter before it.
    for (std::size_t i = 0; i < params.size(); ++i) {
      const bool full = !buckets_.empty() && (params[i]->offset - buckets_.back().range.begin) * elem >= target &&
                        static_cast<int>(buckets_.size()) < opt.max_splits;
      if (buckets_.empty() || full) {
        if (!buckets_.empty()) buckets_.back().range.end = params[i]->offset;
        buckets_.push_back({{params[i]->offset, 0}, 0, 0, {}, {}});
      }
      ++buckets_.back().members;
      bucket_of_.push_back(buckets_.size() - 1);
    }
    if (!buckets_.empty()) buckets_.back().range.end = range_.end;
    marked_.assign(params.size(), 0);
    if (opt.fp16)  // the wire format needs a staging copy; full precision reduces in place
      for (auto& b : buckets_) b.staging = device.empty({b.range.size()}, DType::kF16, MemoryCategory::kCommunication);
  }
  AllReduceReducer(const AllReduceReducer&) = delete;
  AllReduceReducer& operator=(const AllReduceReducer&) = delete;
  /// Destroyed in the middle of a step (its rank is unwinding from an exception), it cancels the
  /// group's outstanding work and waits for it, so no all-reduce is left running on gradients
  /// that are being freed, and none waits a timeout for peers this rank will not meet.
  ~AllReduceReducer() {
    bool outstanding = false;
    for (auto& b : buckets_) outstanding |= !b.work.test();
    if (!outstanding) return;
    group_->cancel("the gradient reducer was destroyed in the middle of a step");
    for (auto& b : buckets_) {
      try {
        b.work.wait();
      } catch (...) {  // the step failed; its error is already on its way up
      }
    }
  }

  [[nodiscard]] std::size_t buckets() const noexcept { return buckets_.size(); }
  /// \brief The range of the arena this reducer covers.
  [[nodiscard]] param::Range range() const noexcept { return range_; }
  /// \brief Each bucket's all-reduce becomes a span of t (null: none).
  void set_timeline(Timeline* t) noexcept { timeline_ = t; }
  /// \brief A bucket's range of the arena (bucket 0 holds the last layer's gradients).
  [[nodiscard]] param::Range bucket_range(std::size_t k) const { return buckets_.at(k).range; }
  /// \brief Of the last step's all-reduce time, the fraction that ran while the caller was
  /// still computing (1: fully overlapped; 0: the optimizer waited for all of it).
  [[nodiscard]] double last_overlap() const noexcept {
    return last_comm_ > 0 ? std::clamp(1.0 - last_exposed_ / last_comm_, 0.0, 1.0) : 0.0;
  }

  /// \brief p's gradient is final for this step; when it completes its bucket, the bucket's
  /// all-reduce starts at once (asynchronously). Repeats in a step are ignored.
  void ready(const nn::Parameter& p) {
    if (group_->size() == 1 || p.offset < range_.begin || p.offset >= range_.end) return;
    const auto& params = params_;
    auto it = std::lower_bound(params.begin(), params.end(), p.offset, [](const nn::Parameter* q, std::int64_t o) { return q->offset < o; });
    EPL_CHECK(it != params.end() && (*it)->offset == p.offset, "a gradient announced ready is not in this reducer's arena");
    const auto i = static_cast<std::size_t>(it - params.begin());
    if (marked_[i]) return;
    marked_[i] = 1;
    auto& b = buckets_[bucket_of_[i]];
    if (++b.ready == b.members) launch(b);
  }
  /// \brief Marks every gradient final, in layout order (the same on every rank).
  void ready_all() {
    for (auto* p : params_) ready(*p);
  }
  /// \brief Waits for every bucket; the arena's gradients then hold the group's reduction.
  /// A bucket with gradients never marked ready is an error (they would be silently stale).
  void finish() {
    if (group_->size() == 1) return;
    for (std::size_t k = 0; k < buckets_.size(); ++k)
      EPL_CHECK(buckets_[k].ready == buckets_[k].members, "gradient bucket ", k, " has ", buckets_[k].ready, " of ",
                buckets_[k].members, " gradients ready at the end of the step: a layer's backward ran without the hooks "
                "(call nn::backward, not layer.backward, on sub-layers) or a parameter took no part in this step");
    const auto wait_start = std::chrono::steady_clock::now();
    for (auto& b : buckets_) b.work.wait();
    last_exposed_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
    last_comm_ = 0;
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      last_comm_ += buckets_[k].work.seconds();
      if (auto [start, end] = buckets_[k].work.interval(); timeline_ && start != Timeline::Clock::time_point{})
        timeline_->add("all_reduce " + std::to_string(k), "all_reduce", Span::Lane::kCommunication, start, end);
    }
    if (opt_.fp16 || summed_mean()) {
      double unscale = opt_.fp16 ? 1.0 / opt_.fp16_scale : 1.0;
      if (opt_.op == comm::ReduceOp::kMean) unscale /= opt_.mean_over > 0 ? opt_.mean_over : group_->size();
      for (auto& b : buckets_) {
        Tensor g = arena_->grads(b.range);
        if (opt_.fp16) device_->cast(b.staging, g);
        device_->scale(g, unscale);
      }
    }
    for (auto& b : buckets_) {
      b.ready = 0;
      b.work = {};
    }
    std::fill(marked_.begin(), marked_.end(), 0);
  }

 private:
  struct Bucket {
    param::Range range;
    int members = 0;
    int ready = 0;
    Tensor staging;  // fp16 wire copy, allocated once
    comm::Work work;
  };
  // A mean over other than the group's size: reduced as a sum, divided in finish().
  [[nodiscard]] bool summed_mean() const noexcept {
    return opt_.op == comm::ReduceOp::kMean && opt_.mean_over > 0 && opt_.mean_over != group_->size();
  }
  void launch(Bucket& b) {
    Tensor g = arena_->grads(b.range);
    // fp16 sums in half (the wire format) and divides in full precision afterwards
    const auto op = opt_.op == comm::ReduceOp::kMean && (opt_.fp16 || summed_mean()) ? comm::ReduceOp::kSum : opt_.op;
    if (!opt_.fp16) {
      b.work = group_->all_reduce_async(g, g, op);
      return;
    }
    device_->scale(g, opt_.fp16_scale);  // in full precision, then one rounding to the wire format
    device_->cast(g, b.staging);
    b.work = group_->all_reduce_async(b.staging, b.staging, op);
  }

  const D* device_;
  comm::Communicator* group_;
  const param::Arena* arena_;
  BucketOptions opt_;
  param::Range range_;
  std::vector<nn::Parameter*> params_;  // those in range_, in layout order
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<char> marked_;
  double last_exposed_ = 0, last_comm_ = 0;
  Timeline* timeline_ = nullptr;
};

/// \brief Reducers over disjoint ranges of one arena, each over its own group: the parameters of
/// a colocated split's replicated part meet over the data and tensor axes, the rest over the data
/// axis. ready(p) goes to the reducer whose range holds p.
template <class D>
class ReducerSet {
 public:
  ReducerSet() = default;
  ReducerSet(const ReducerSet&) = delete;
  ReducerSet& operator=(const ReducerSet&) = delete;
  /// \brief Adds a reducer of `group` over `range` of the arena (ranges must not overlap).
  void add(const D& device, comm::Communicator& group, const param::Arena& arena, BucketOptions opt, param::Range range) {
    for (const auto& r : reducers_)
      EPL_CHECK(range.end <= r->range().begin || range.begin >= r->range().end, "reducer ranges [", range.begin, ", ", range.end,
                ") and [", r->range().begin, ", ", r->range().end, ") overlap");
    if (range.size() > 0) reducers_.push_back(std::make_unique<AllReduceReducer<D>>(device, group, arena, opt, range));
  }
  void ready(const nn::Parameter& p) {
    for (auto& r : reducers_)
      if (p.offset >= r->range().begin && p.offset < r->range().end) return r->ready(p);
  }
  void ready_all() {
    for (auto& r : reducers_) r->ready_all();
  }
  void finish() {
    for (auto& r : reducers_) r->finish();
  }
  [[nodiscard]] std::size_t buckets() const noexcept {
    std::size_t n = 0;
    for (const auto& r : reducers_) n += r->buckets();
    return n;
  }
  /// \brief The smallest overlap of the reducers' last steps.
  [[nodiscard]] double last_overlap() const noexcept {
    double o = reducers_.empty() ? 0.0 : 1.0;
    for (const auto& r : reducers_) o = std::min(o, r->last_overlap());
    return o;
  }
  void set_timeline(Timeline* t) noexcept {
    for (auto& r : reducers_) r->set_timeline(t);
  }

 private:
  std::vector<std::unique_ptr<AllReduceReducer<D>>> reducers_;
};

}  // namespace policy
}  // namespace v0
}  // namespace epl
