#pragma once
/// \file
/// \brief strategy::Executor — runs one rank's list of actions for a step: forwards and backwards
/// of its model chunks on micro-batches, and the sends and receives between pipeline ranks.
///
/// Activations and gradients travel on two channels (sub-groups of the pipeline group), each
/// message a small header (what, chunk, micro-batch, extents, dtype) and then the payload. On
/// each channel and between each pair of ranks, every schedule consumes messages in the order
/// they were produced, so no transfer needs a tag (NCCL has none) and the header's (chunk,
/// micro-batch) is checked against what the schedule expects. Sends are asynchronous and
/// released as they complete; receives block in the schedule's order, which keeps every schedule
/// deadlock-free: no rank ever waits for a send.
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/core/timeline.hpp"
#include "epl/strategy/schedule.hpp"
#include "epl/strategy/units.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

/// \brief What a step runs on: the micro-batches' inputs and targets, micro-batch m being the m-th
/// of `count` equal parts of each (the targets may hold more rows: a colocated split's loss sees
/// its group's rows). With `outputs` (a prediction: no targets), the last chunk's output of
/// micro-batch m goes to (*outputs)[m] instead of the loss.
struct MicroBatches {
  Tensor inputs, targets;
  int count = 1;
  std::vector<Tensor>* outputs = nullptr;
  [[nodiscard]] Tensor input(int m) const { return part(inputs, m); }
  [[nodiscard]] Tensor target(int m) const { return part(targets, m); }

 private:
  [[nodiscard]] Tensor part(const Tensor& t, int m) const {
    const std::int64_t per = t.dim(0) / count;
    return t.slice(m * per, (m + 1) * per);
  }
};

/// \brief Runs actions on this rank's chunks of a model of `chunks` chunks placed round `ranks`
/// pipeline ranks (chunk c on rank c % ranks).
/// \tparam Ctx the pass context type
/// \tparam Loss forward(ctx, logits, targets) -> double, backward(ctx, scale) -> Tensor
template <class Ctx, class Loss>
class Executor {
 public:
  using Device = typename Ctx::device_type;

  /// \param local this rank's chunks: local[j] is chunk stage + j ranks
  /// \param pipeline the pipeline group (one rank per stage of this replica); split here into
  ///        the activation and the gradient channel
  Executor(const Device& device, std::vector<Chunk<Ctx>> local, int chunks, int ranks, int stage, comm::Communicator& pipeline)
      : device_(&device), local_(std::move(local)), chunks_(chunks), ranks_(ranks), stage_(stage) {
    EPL_CHECK(chunks_ % ranks_ == 0 && static_cast<int>(local_.size()) == chunks_ / ranks_, "pipeline: ", chunks_,
              " chunks do not divide among ", ranks_, " ranks");
    if (ranks_ > 1) {
      channel_[kActivation] = pipeline.split(0, pipeline.rank());
      channel_[kGradient] = pipeline.split(0, pipeline.rank());
    }
  }

  [[nodiscard]] const std::vector<Chunk<Ctx>>& chunks() const noexcept { return local_; }
  /// \brief The loss the last chunk's output goes to (to configure it: vocabulary-parallel).
  [[nodiscard]] Loss& loss() noexcept { return loss_; }
  /// \brief Spans of each forward, backward, send and receive go to t (null: none).
  void set_timeline(Timeline* t) noexcept { timeline_ = t; }
  /// \brief Bytes this rank's sends and receives moved so far (headers included).
  [[nodiscard]] comm::CommStats stats() const {
    comm::CommStats s;
    for (const auto& c : channel_)
      if (c.valid()) {
        auto x = c.stats();
        s.bytes_sent += x.bytes_sent;
        s.bytes_received += x.bytes_received;
        s.operations += x.operations;
      }
    return s;
  }

  /// \brief Runs the actions; make_pass(c, m) builds chunk c's pass context for micro-batch m, before_backward(m)
  /// runs before each backward (before each W pass when the list splits backward: the gradients'
  /// hooks run there). Returns this rank's loss: the sum over micro-batches of
  /// loss / count, from the last chunk (0 on the other ranks), plus the loss terms its layers
  /// added (ctx.add_loss), likewise over count.
  double run(const std::vector<Action>& actions, const MicroBatches& mb, const std::function<Ctx(int c, int m)>& make_pass,
             const std::function<void(int m)>& before_backward = {}) {
    EPL_CHECK(mb.count >= 1, "pipeline.num_micro_batch = ", mb.count, " must be at least 1");
    // one pass context per (local chunk, micro-batch): its saved activations live from F to B,
    // and what B left for the weight pass (a zero-bubble schedule's) until W
    std::vector<std::vector<std::optional<Ctx>>> passes(local_.size());
    for (auto& p : passes) p.resize(static_cast<std::size_t>(mb.count));
    const bool split = splits_backward(actions);
    std::vector<std::vector<typename Ctx::Deferred>> deferred(split ? local_.size() : 0);
    for (auto& d : deferred) d.resize(static_cast<std::size_t>(mb.count));
    std::map<std::pair<int, int>, Tensor> inputs, grads, outputs, input_grads;  // by (chunk, micro-batch)
    double loss = 0, extra = 0;
    const bool traced = timeline_ != nullptr;
    for (const auto& a : actions) {
      const int c = a.chunk, m = a.micro_batch;
      auto& pass = passes[static_cast<std::size_t>(c / ranks_)][static_cast<std::size_t>(m)];
      const std::string label = traced ? std::string(name_of(a.kind)) + std::to_string(m) + (chunks_ > ranks_ ? "." + std::to_string(c) : "") : "";
      switch (a.kind) {
        case Action::Kind::kRecvForward: {
          SpanScope span(timeline_, label, "recv", Span::Lane::kCommunication);
          inputs[{c, m}] = receive(kActivation, c, m, c - 1);
          break;
        }
        case Action::Kind::kRecvBackward: {
          SpanScope span(timeline_, label, "recv", Span::Lane::kCommunication);
          grads[{c, m}] = receive(kGradient, c, m, c + 1);
          break;
        }
        case Action::Kind::kSendForward: send(kActivation, take(outputs, c, m), c + 1, m, c + 1, label); break;
        case Action::Kind::kSendBackward: send(kGradient, take(input_grads, c, m), c - 1, m, c - 1, label); break;
        case Action::Kind::kForward: {
          SpanScope span(timeline_, label, "forward");
          pass.emplace(make_pass(c, m));
          Tensor x = c == 0 ? mb.input(m) : take(inputs, c, m);
          Tensor y = local_[static_cast<std::size_t>(c / ranks_)].forward(*pass, x);
          extra += pass->extra_loss() / mb.count;  // layers' own loss terms (an MoE's balancing loss)
          if (c == chunks_ - 1 && mb.outputs) mb.outputs->at(static_cast<std::size_t>(m)) = y;
          else if (c == chunks_ - 1) loss += loss_.forward(*pass, y, mb.target(m)) / mb.count;
          else if (rank_of(c + 1) == stage_) inputs[{c + 1, m}] = y;  // the next chunk is this rank's
          else outputs[{c, m}] = y;
          break;
        }
        case Action::Kind::kBackward: {
          SpanScope span(timeline_, label, "backward");
          EPL_CHECK(pass.has_value(), "schedule: backward of micro-batch ", m, " on chunk ", c, " before its forward");
          // split: the hooks (gradient reduction) run in W, and so does what tells them the micro-batch
          if (split) pass->defer_into(&deferred[static_cast<std::size_t>(c / ranks_)][static_cast<std::size_t>(m)]);
          else if (before_backward) before_backward(m);
          // the loss's gradient scaled as the pass says: 1/M, times AMP's loss scale
          Tensor dy = c == chunks_ - 1 ? loss_.backward(*pass, pass->options().loss_scale) : take(grads, c, m);
          Tensor dx = local_[static_cast<std::size_t>(c / ranks_)].backward(*pass, dy);
          if (c > 0 && rank_of(c - 1) == stage_) grads[{c - 1, m}] = dx;
          else if (c > 0) input_grads[{c, m}] = dx;
          if (!split) pass.reset();
          break;
        }
        case Action::Kind::kWeight: {
          SpanScope span(timeline_, label, "weight");
          EPL_CHECK(pass.has_value() && split, "schedule: weight pass of micro-batch ", m, " on chunk ", c, " before its backward");
          if (before_backward) before_backward(m);
          pass->run_deferred(deferred[static_cast<std::size_t>(c / ranks_)][static_cast<std::size_t>(m)]);
          pass.reset();
          break;
        }
      }
      release_completed_sends();
    }
    while (!sends_.empty()) {
      sends_.front().works[0].wait();
      sends_.front().works[1].wait();
      sends_.pop_front();
    }
    return loss + extra;
  }

 private:
  enum Channel { kActivation = 0, kGradient = 1 };
  static constexpr int kHeaderWords = 12;  // what, chunk, micro-batch, rank, 6 extents, dtype, unused
  struct Pending {
    std::array<comm::Work, 2> works;  // header, payload
    Tensor header, payload;           // kept alive until both complete
  };

  [[nodiscard]] int rank_of(int chunk) const { return chunk % ranks_; }
  static Tensor take(std::map<std::pair<int, int>, Tensor>& from, int c, int m) {
    auto it = from.find({c, m});
    EPL_CHECK(it != from.end(), "schedule: chunk ", c, " needs micro-batch ", m, "'s tensor before it was produced or received");
    Tensor t = std::move(it->second);
    from.erase(it);
    return t;
  }
  // Sends t, produced for chunk `for_chunk`'s micro-batch m, to that chunk's rank.
  void send(Channel ch, const Tensor& t, int for_chunk, int m, int to_chunk, const std::string& label) {
    SpanScope span(timeline_, label, "send", Span::Lane::kCommunication);
    EPL_CHECK(t.defined(), "pipeline: nothing to send to chunk ", to_chunk, " (a stage's input had no gradient: an embedding "
              "can only be a pipeline's first layer)");
    std::array<std::int64_t, kHeaderWords> h{};
    h[0] = ch;
    h[1] = for_chunk;
    h[2] = m;
    h[3] = t.rank();
    for (int i = 0; i < t.rank(); ++i) h[4 + static_cast<std::size_t>(i)] = t.dim(i);
    h[10] = static_cast<std::int64_t>(t.dtype());
    Tensor header = device_->empty({kHeaderWords}, DType::kI64, MemoryCategory::kCommunication);
    device_->upload(h.data(), header);
    auto& group = channel_[ch];
    sends_.push_back({{group.isend(header, rank_of(to_chunk), 0), group.isend(t, rank_of(to_chunk), 0)}, header, t});
  }
  // Receives the tensor for chunk `for_chunk`'s micro-batch m from `from_chunk`'s rank, checking
  // it is the one the schedule expects.
  Tensor receive(Channel ch, int for_chunk, int m, int from_chunk) {
    auto& group = channel_[ch];
    const int peer = rank_of(from_chunk);
    Tensor header = device_->empty({kHeaderWords}, DType::kI64, MemoryCategory::kCommunication);
    group.irecv(header, peer, 0).wait();
    std::array<std::int64_t, kHeaderWords> h{};
    device_->download(header, h.data());
    const char* what = ch == kActivation ? "activation" : "gradient";
    EPL_CHECK(h[0] == ch && h[3] >= 0 && h[3] <= Shape::kMaxRank && h[10] >= 0 && h[10] <= static_cast<std::int64_t>(DType::kI64),
              "pipeline: a malformed ", what, " header from pipeline rank ", peer);
    EPL_CHECK(h[1] == for_chunk && h[2] == m, "pipeline: pipeline rank ", stage_, " expected the ", what, " of micro-batch ", m,
              " for chunk ", for_chunk, " from pipeline rank ", peer, " but got micro-batch ", h[2], " for chunk ", h[1],
              "; the ranks run different schedules (pipeline.strategy, pipeline.num_micro_batch)");
    Shape shape;
    for (std::int64_t i = 0; i < h[3]; ++i) shape.push_back(h[static_cast<std::size_t>(4 + i)]);
    Tensor t = device_->empty(shape, static_cast<DType>(h[10]), MemoryCategory::kActivations);
    group.irecv(t, peer, 0).wait();
    return t;
  }
  // Frees the buffers of sends that completed (the oldest first; sends complete in order).
  void release_completed_sends() {
    while (!sends_.empty() && sends_.front().works[0].test() && sends_.front().works[1].test()) {
      sends_.front().works[0].wait();  // rethrows a failed send
      sends_.front().works[1].wait();
      sends_.pop_front();
    }
  }

  const Device* device_;
  std::vector<Chunk<Ctx>> local_;
  int chunks_, ranks_, stage_;
  std::array<comm::Communicator, 2> channel_;
  std::deque<Pending> sends_;
  Loss loss_;
  Timeline* timeline_ = nullptr;
};

}  // namespace strategy
}  // namespace v0
}  // namespace epl
