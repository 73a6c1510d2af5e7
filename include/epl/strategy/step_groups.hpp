#pragma once
/// \file
/// \brief strategy::StepGroups — a rank's place on the mesh and the strategies' part of a step
/// that is not the model's: which rows of each global batch the rank reads, the checks that the
/// ranks were given rows that fit their strategy, the loss and the gradient norm summed over the
/// axes that hold parts of them, and the comparison of replicas.
///
/// These small collectives run on groups split for them, so the data and tensor groups' byte
/// counts are the gradients' and the layers' traffic alone (tests assert them).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "epl/core/random.hpp"
#include "epl/nn/pass.hpp"
#include "epl/nn/tensor_parallel.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/strategy/mesh.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

/// \brief Reads a device tensor's bytes into host memory (the device's download).
using Download = std::function<void(const Tensor&, void*)>;

/// \brief A fast hash of a tensor's bytes (64-bit words through mix64), for comparing copies. A
/// tensor in memory host code cannot read (a GPU's) is hashed through a host copy by `download`.
EPL_LINKED std::uint64_t content_hash(const Tensor& t, const Download& download = {});

/// \brief Each rank's rows of a global batch of `rows`: equal shares, or with `weights` (one per
/// rank, positive) shares in proportion to them, by largest remainder, in whole multiples of
/// `quantum` (the micro-batches each rank splits its rows into), at least one each.
EPL_LINKED std::vector<std::int64_t> share_rows(std::int64_t rows, int ranks, const std::vector<double>& weights = {}, std::int64_t quantum = 1);

/// \brief Which rows of each global batch a rank reads: share `rank` of `ranks` shares, equal or,
/// with `weights` (cluster.rank_speeds), in proportion to them.
struct RowShare {
  int rank = 0;
  int ranks = 1;
  std::vector<double> weights = {};
  std::int64_t quantum = 1;  ///< uneven shares are whole multiples of it (the micro-batches)
  /// \brief This rank's rows of a global batch of `rows`, and the first of them. Equal shares of a
  /// batch that does not divide would leave its last rows to no rank: an error.
  [[nodiscard]] std::int64_t rows_of(std::int64_t rows) const { return shares(rows)[static_cast<std::size_t>(rank)]; }
  [[nodiscard]] std::int64_t first_of(std::int64_t rows) const {
    const auto all = shares(rows);
    std::int64_t first = 0;
    for (int r = 0; r < rank; ++r) first += all[static_cast<std::size_t>(r)];
    return first;
  }

 private:
  [[nodiscard]] std::vector<std::int64_t> shares(std::int64_t rows) const {
    EPL_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "data-parallel rank ", rank, " of ", ranks, " ranks is not a rank; give a "
              "rank from 0 to the number of ranks - 1, and at least 1 rank");
    EPL_CHECK(!weights.empty() || rows % ranks == 0, "a global batch of ", rows, rows == 1 ? " row" : " rows", " does not divide among ", ranks,
              " data-parallel ranks: ", rows % ranks == 1 ? std::string("its last row") : "its last " + std::to_string(rows % ranks) + " rows",
              " would be read by no rank; make the batch a multiple of ", ranks,
              rows >= ranks ? " (or give cluster.rank_speeds for uneven shares)" : " (uneven shares, cluster.rank_speeds, still give each rank a row)");
    return share_rows(rows, ranks, weights, quantum);
  }
};

/// \brief Where a rank's rows of this step's global batch lie: the first, how many in all, and
/// the weight its loss carries in the mean over the ranks that share the batch
/// (rows x ranks / total: 1 with equal shares).
struct RowPlace {
  std::int64_t first = 0, total = 0;
  double weight = 1.0;
};

class StepGroups {
 public:
  /// \param rows_over_tensor a colocated (or separate) split's replicated part runs data parallel
  ///        over the tensor axis too: each rank of a split group reads rows of its own
  /// \param weights each data-parallel rank's share of the batch (cluster.rank_speeds); empty: equal
  /// \param quantum uneven shares are whole multiples of it (the micro-batches)
  EPL_LINKED StepGroups(comm::Communicator& world, MeshShape shape, bool rows_over_tensor, std::vector<double> weights = {},
                        std::int64_t quantum = 1);

  StepGroups(const StepGroups&) = delete;
  StepGroups& operator=(const StepGroups&) = delete;

  [[nodiscard]] Mesh& mesh() noexcept { return mesh_; }
  [[nodiscard]] const Mesh& mesh() const noexcept { return mesh_; }
  /// \brief The ranks of this pipeline stage on every replica and tensor part (null unless the
  /// replicated part runs over the tensor axis: its gradients meet there).
  [[nodiscard]] comm::Communicator* stage_group() noexcept { return stage_.valid() ? &stage_ : nullptr; }
  /// \brief The groups a layer may use inside its pass (a split Linear's tensor group).
  [[nodiscard]] nn::Groups layer_groups() noexcept { return {mesh_.tensor_size() > 1 ? &mesh_.tensor() : nullptr, &mesh_.data()}; }

  /// \brief The rows of each global batch this rank reads: its data-parallel share (a colocated
  /// split's replicated part: its share over data and tensor ranks). The stages of one pipeline
  /// replica read the same rows.
  [[nodiscard]] RowShare rows() const {
    const auto& c = mesh_.coord();
    if (rows_over_tensor_) return {c.data * mesh_.tensor_size() + c.tensor, mesh_.data_size() * mesh_.tensor_size()};
    return {c.data, mesh_.data_size(), weights_, quantum_};
  }
  [[nodiscard]] bool uneven() const noexcept { return !weights_.empty(); }

  /// \brief Where this rank's `rows` lie in this step's global batch. With uneven shares, checks
  /// (over the data-parallel group) that every rank got its share of the batch they add up to.
  EPL_LINKED RowPlace place(std::int64_t rows, std::int64_t step);

  /// \brief Fails unless the ranks of a split group (unless colocated) and the stages of a
  /// pipeline were given the same rows (equal shares are the world's check: runtime's agree_on_call).
  EPL_LINKED void check_rows(const Tensor& inputs, const Tensor& targets, std::int64_t step, const Download& download = {});
  /// \brief The same for an evaluation (`call`: or a prediction) after `step` steps (pipelined, stage
  /// 0's inputs meet the last stage's targets: rows that differ would give another batch's loss
  /// without a word).
  EPL_LINKED void check_evaluation_rows(const Tensor& inputs, const Tensor& targets, std::int64_t step, const Download& download = {},
                                        const char* call = "trainer.evaluate()");

  /// \brief The global batch's loss from this rank's: the last stage's, summed over the pipeline,
  /// then the mean over the ranks that share the batch.
  double loss(double mine) {
    if (pipeline_.valid()) mesh_.pipeline().all_reduce(comm::Buffer(&mine, 1, DType::kF64), comm::ReduceOp::kSum);
    loss_group().all_reduce(comm::Buffer(&mine, 1, DType::kF64), comm::ReduceOp::kMean);
    return mine;
  }
  /// \brief A loss of this rank's rows (evaluation): the last stage's, on every stage.
  double stage_loss(double mine) {
    if (pipeline_.valid()) mesh_.pipeline().all_reduce(comm::Buffer(&mine, 1, DType::kF64), comm::ReduceOp::kSum);
    return mine;
  }
  /// \brief The global L2 norm from this rank's part: the split parts summed over the tensor axis,
  /// the pipeline's stages summed.
  double norm(policy::SquaredNorms sq) {
    if (tensor_.valid()) tensor_.all_reduce(comm::Buffer(&sq.sharded, 1, DType::kF64), comm::ReduceOp::kSum);
    double total = sq.whole + sq.sharded;
    if (pipeline_.valid()) mesh_.pipeline().all_reduce(comm::Buffer(&total, 1, DType::kF64), comm::ReduceOp::kSum);
    return std::sqrt(total);
  }
  /// \brief Fails unless every replica's parameters hash alike (h: this rank's hash).
  EPL_LINKED void check_replicas(std::uint64_t h, std::int64_t step);
  /// \brief The same for the parameters a program may have written after gather_parameters().
  EPL_LINKED void check_gathered(std::uint64_t h, std::int64_t step);

  /// \brief The targets a rank's loss sees: its own rows, or under a colocated split the group's,
  /// micro-batch by micro-batch (each micro-batch's rows of every part in group order, as the
  /// split's entry gathers them).
  template <class D>
  Tensor targets(const D& d, const Tensor& mine, int micro_batches) {
    if (!rows_over_tensor_) return mine;
    const std::int64_t n = mesh_.tensor_size(), rows = mine.dim(0), per = rows / micro_batches;
    Tensor all = d.empty({n * rows}, mine.dtype(), MemoryCategory::kActivations);
    mesh_.tensor().all_gather(mine, all);
    Tensor ordered = d.empty({n * rows}, mine.dtype(), MemoryCategory::kActivations);
    for (std::int64_t m = 0; m < micro_batches; ++m)
      for (std::int64_t q = 0; q < n; ++q)
        d.copy(all.slice(q * rows + m * per, q * rows + (m + 1) * per), ordered.slice((m * n + q) * per, (m * n + q + 1) * per));
    return ordered;
  }

  /// \brief The model's whole output on this rank's `rows` (a prediction, one micro-batch) from the
  /// last chunk's `y`, on every rank: a vocabulary-parallel output's columns (`columns_split`)
  /// gathered over the split group, this rank's rows of a colocated split's group rows (the
  /// targets' order), and the last pipeline stage's result sent to the others (whose `y` is empty).
  template <class D>
  Tensor whole_output(const D& d, Tensor y, std::int64_t rows, bool columns_split) {
    const int last = mesh_.pipeline_size() - 1;
    if (mesh_.coord().pipeline == last) {
      const std::int64_t n = mesh_.tensor_size();
      if (columns_split && n > 1) y = nn::gather_columns(d, mesh_.tensor(), y);
      if (rows_over_tensor_ && y.dim(0) == n * rows) y = y.slice(mesh_.coord().tensor * rows, (mesh_.coord().tensor + 1) * rows);
    }
    if (!pipeline_.valid()) return y;
    std::array<std::int64_t, Shape::kMaxRank + 2> h{};  // rank, extents, dtype
    if (y.defined()) {
      h[0] = y.rank();
      for (int i = 0; i < y.rank(); ++i) h[static_cast<std::size_t>(i + 1)] = y.dim(i);
      h.back() = static_cast<std::int64_t>(y.dtype());
    }
    Tensor header = d.empty({static_cast<std::int64_t>(h.size())}, DType::kI64, MemoryCategory::kCommunication);
    d.upload(h.data(), header);
    mesh_.pipeline().broadcast(header, last);
    d.download(header, h.data());
    Shape shape;
    for (std::int64_t i = 0; i < h[0]; ++i) shape.push_back(h[static_cast<std::size_t>(i + 1)]);
    Tensor out = y.defined() ? y : d.empty(shape, static_cast<DType>(h.back()), MemoryCategory::kActivations);
    mesh_.pipeline().broadcast(out, last);
    return out;
  }

  /// \brief Records every group's blocking collectives on t, the layers' tensor- and sequence-parallel
  /// ones among them (`trace` key); null stops.
  void set_timeline(Timeline* t) {
    mesh_.set_timeline(t);
    replicas_.set_timeline(t, "replicas");
    sharers_.set_timeline(t, "loss sharers");
    tensor_.set_timeline(t, "tensor");
    pipeline_.set_timeline(t, "pipeline");
    stage_.set_timeline(t, "stage replicas");
  }

 private:
  comm::Communicator& loss_group() { return sharers_.valid() ? sharers_ : replicas_; }
  // The first replica whose hash differs from rank 0's, or 0 (a collective over the replicas).
  EPL_LINKED int first_unlike_replica(std::uint64_t h);
  // The ranks of group must have been given the same rows (inputs and targets).
  EPL_LINKED void rows_agree(const Tensor& inputs, const Tensor& targets, const std::string& when, const Download& download);
  static void same_rows(comm::Communicator& group, const Tensor& inputs, const Tensor& targets, const std::string& when,
                        const Download& download, const char* who, const char* of, const char* why) {
    std::uint64_t mine[2] = {content_hash(inputs, download), content_hash(targets, download)};
    std::vector<std::uint64_t> all(static_cast<std::size_t>(2 * group.size()));
    group.all_gather(comm::Buffer(mine, 2, DType::kI64), comm::Buffer(all.data(), 2 * group.size(), DType::kI64));
    for (int r = 1; r < group.size(); ++r) {
      const bool same_inputs = all[2 * r] == all[0], same_targets = all[2 * r + 1] == all[1];
      EPL_CHECK(same_inputs && same_targets, when, " ", who, r, of, " got other ", same_inputs ? "targets" : "inputs",
                " than its ", who, "0; ", why, " (read them with data::WindowLoader and trainer.data_shard())");
    }
  }

  Mesh mesh_;
  bool rows_over_tensor_;
  std::vector<double> weights_;
  std::int64_t quantum_ = 1;
  // replicas_: the ranks that hold the same parameters (a colocated split: only those of the same
  // tensor part); sharers_: the ranks that share the loss (each with its rows) when not those
  comm::Communicator replicas_, sharers_, tensor_, pipeline_, stage_;
};

}  // namespace strategy
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/strategy/step_groups.ipp"
#endif
