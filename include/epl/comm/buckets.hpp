#pragma once
/// \file
/// \brief GradientBuckets — gradient traffic fused into a few buckets, each all-reduced
/// asynchronously as soon as the backward pass has produced all of its gradients (so the last
/// layer's gradients leave first and communication overlaps the rest of the backward pass),
/// optionally compressed to fp16 (EPL's communication.fp16 / fp16_scale). Each bucket's flat
/// staging buffer is allocated once (MemoryCategory::kCommunication) and reused every step.
#include <algorithm>
#include <chrono>
#include <vector>

#include "epl/comm/communicator.hpp"
#include "epl/device/cpu/cpu.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief How gradients are fused and reduced (EPL's communication.* keys).
struct BucketOptions {
  int max_splits = 5;              ///< at most this many buckets (communication.max_splits)
  std::int64_t bucket_bytes = 0;   ///< target bytes per bucket; 0: total / max_splits
  bool fp16 = false;               ///< communication.fp16: reduce in half precision
  double fp16_scale = 128;         ///< communication.fp16_scale: multiply before the cast
  ReduceOp op = ReduceOp::kMean;   ///< communication.gradients_reduce_method
};

/// \brief Fused, overlapped all-reduce of a fixed list of host gradient tensors.
/// \tparam C models communicator.
template <communicator C>
class GradientBuckets {
 public:
  /// \param grads the gradients in the order backward produces them (last layer first).
  GradientBuckets(C& comm, std::vector<Tensor> grads, BucketOptions opt = {}) : comm_(&comm), grads_(std::move(grads)), opt_(opt) {
    EPL_CHECK(opt.max_splits >= 1, "GradientBuckets: max_splits ", opt.max_splits, " must be at least 1");
    EPL_CHECK(!opt.fp16 || opt.fp16_scale > 0, "GradientBuckets: fp16_scale ", opt.fp16_scale, " must be positive");
    std::int64_t total = 0;
    for (const auto& g : grads_) {
      EPL_CHECK(g.dtype() == DType::kF32 || g.dtype() == DType::kF64, "GradientBuckets: gradient of dtype ", name_of(g.dtype()),
                "; gradients are reduced from f32 or f64");
      EPL_CHECK(g.dtype() == grads_.front().dtype(), "GradientBuckets: gradients of different dtypes in one list");
      total += static_cast<std::int64_t>(g.bytes());
    }
    const std::int64_t target = opt.bucket_bytes > 0 ? opt.bucket_bytes : (total + opt.max_splits - 1) / opt.max_splits;
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < grads_.size(); ++i) {
      const bool full = !buckets_.empty() && bytes >= target && static_cast<int>(buckets_.size()) < opt.max_splits;
      if (buckets_.empty() || full) {
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().members.push_back(i);
      buckets_.back().elements += grads_[i].numel();
      bytes += static_cast<std::int64_t>(grads_[i].bytes());
      bucket_of_.push_back(buckets_.size() - 1);
    }
    marked_.assign(grads_.size(), 0);
    for (auto& b : buckets_)  // on the gradients' own device, so its accounts see them
      b.flat = Tensor(grads_.front().allocator(), {b.elements}, opt.fp16 ? DType::kF16 : grads_.front().dtype(),
                      MemoryCategory::kCommunication);
  }

  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;
  /// Destroyed in the middle of a step (its rank is unwinding from an exception), it cancels
  /// the communicator's outstanding work and waits for it, so no all-reduce is left running on
  /// the staging buffers it frees, and none waits a timeout for peers this rank will not meet.
  ~GradientBuckets() {
    bool outstanding = false;
    for (auto& b : buckets_) outstanding |= !b.work.test();
    if (!outstanding) return;
    comm_->cancel("the gradient buckets were destroyed in the middle of a step");
    for (auto& b : buckets_) {
      try {
        b.work.wait();
      } catch (...) {  // the step failed; its error is already on its way up
      }
    }
  }

  [[nodiscard]] std::size_t buckets() const noexcept { return buckets_.size(); }
  /// \brief Of the last step's all-reduce time, the fraction that ran while the caller was
  /// still computing (1: fully overlapped; 0: the optimizer waited for all of it).
  [[nodiscard]] double last_overlap() const noexcept {
    return last_comm_ > 0 ? std::clamp(1.0 - last_exposed_ / last_comm_, 0.0, 1.0) : 0.0;
  }
  [[nodiscard]] std::size_t bucket_of(std::size_t grad) const { return bucket_of_.at(grad); }

  /// \brief Gradient i is final for this step; when it completes its bucket, the bucket's
  /// all_reduce starts at once (asynchronously).
  void ready(std::size_t i) {
    EPL_CHECK(i < grads_.size(), "GradientBuckets::ready(", i, "): there are ", grads_.size(), " gradients");
    if (marked_[i]) return;  // announced before in this step
    marked_[i] = 1;
    auto& b = buckets_[bucket_of_[i]];
    if (++b.ready == static_cast<int>(b.members.size())) launch(b);
  }
  /// \brief Waits for every bucket and writes the reduced values back into the gradients.
  /// Gradients never marked ready are an error (they would be silently stale).
  void finish() {
    for (std::size_t k = 0; k < buckets_.size(); ++k)
      EPL_CHECK(buckets_[k].ready == static_cast<int>(buckets_[k].members.size()), "GradientBuckets::finish: bucket ", k,
                " has ", buckets_[k].ready, " of ", buckets_[k].members.size(), " gradients ready; call ready() for each gradient");
    device::Cpu cpu;
    const auto wait_start = std::chrono::steady_clock::now();
    for (auto& b : buckets_) b.work.wait();
    last_exposed_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
    last_comm_ = 0;
    for (auto& b : buckets_) last_comm_ += b.work.seconds();
    double unscale = 1.0 / opt_.fp16_scale;
    if (opt_.op == ReduceOp::kMean) unscale /= comm_->size();
    for (auto& b : buckets_) {
      for_each_part(b, [&](const Tensor& g, const Tensor& part) {
        if (opt_.fp16) {
          cpu.cast(part, g);
          cpu.scale(g, unscale);
        } else {
          cpu.copy(part, g);
        }
      });
      b.ready = 0;
    }
    std::fill(marked_.begin(), marked_.end(), 0);
  }

 private:
  struct Bucket {
    std::vector<std::size_t> members;
    std::int64_t elements = 0;
    int ready = 0;
    Tensor flat;
    Work work;
  };
  // fn(gradient, its slice of the bucket's flat buffer) for each gradient of bucket b
  template <class Fn>
  void for_each_part(Bucket& b, Fn&& fn) {
    std::int64_t offset = 0;
    for (auto i : b.members) {
      const Tensor& g = grads_[i];
      fn(g, b.flat.slice(offset, offset + g.numel()));
      offset += g.numel();
    }
  }
  void launch(Bucket& b) {
    device::Cpu cpu;
    for_each_part(b, [&](const Tensor& g, const Tensor& part) {
      if (opt_.fp16) {
        cpu.cast(g, part);
        cpu.scale(part, opt_.fp16_scale);
      } else {
        cpu.copy(g, part);
      }
    });
    // fp16 sums in half (the wire format) and divides in full precision afterwards
    const ReduceOp op = opt_.fp16 && opt_.op == ReduceOp::kMean ? ReduceOp::kSum : opt_.op;
    b.work = comm_->all_reduce_async(b.flat, b.flat, op);
  }

  C* comm_;
  std::vector<Tensor> grads_;
  BucketOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<char> marked_;
  double last_exposed_ = 0, last_comm_ = 0;
};

}  // namespace comm
}  // namespace v0
}  // namespace epl
