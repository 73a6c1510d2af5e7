#pragma once
/// \file
/// \brief The bodies of the step's groups (the header declares them): included by that header in a
/// header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {
namespace strategy {

EPL_LINKED StepGroups::StepGroups(comm::Communicator& world, MeshShape shape, bool rows_over_tensor, std::vector<double> weights,
                                  std::int64_t quantum)
    : mesh_(world, shape), rows_over_tensor_(rows_over_tensor), weights_(std::move(weights)), quantum_(quantum) {
  EPL_CHECK(weights_.empty() || (!rows_over_tensor_ && static_cast<int>(weights_.size()) == mesh_.data_size()),
            "uneven data-parallel shares (cluster.rank_speeds) need one weight per data-parallel rank and a split that is "
            "not colocated with a replicated part; leave cluster.rank_speeds unset");
  replicas_ = mesh_.data().split(0, 0);
  if (rows_over_tensor_) {
    stage_ = world.split(mesh_.coord().pipeline, world.rank());
    sharers_ = stage_.split(0, 0);
  }
  if (mesh_.tensor_size() > 1) tensor_ = mesh_.tensor().split(0, 0);
  if (mesh_.pipeline_size() > 1) pipeline_ = mesh_.pipeline().split(0, 0);
}
EPL_LINKED std::uint64_t content_hash(const Tensor& t, const Download& download) {
  std::vector<unsigned char> copy;
  const auto* p = static_cast<const unsigned char*>(t.raw());
  if (!host_reachable(t.device().kind)) {
    EPL_CHECK(download != nullptr, "content_hash of a tensor on ", t.device().str(), " needs the device's download");
    copy.resize(t.bytes());
    download(t, copy.data());
    p = copy.data();
  }
  const std::size_t n = t.bytes();
  std::uint64_t h = n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w);
  }
  for (; i < n; ++i) h = mix64(h ^ p[i]);
  return h;
}

EPL_LINKED std::vector<std::int64_t> share_rows(std::int64_t rows, int ranks, const std::vector<double>& weights, std::int64_t quantum) {
  EPL_CHECK(ranks >= 1 && (weights.empty() || static_cast<int>(weights.size()) == ranks), "share_rows: ", weights.size(),
            " weights for ", ranks, " ranks");
  EPL_CHECK(quantum >= 1, "share_rows: the shares' quantum is ", quantum, "; give 1 or more rows (the micro-batch count)");
  for (std::size_t r = 0; r < weights.size(); ++r)
    EPL_CHECK(std::isfinite(weights[r]) && weights[r] > 0, "data-parallel rank ", r, "'s share weight is ", weights[r],
              "; each rank's weight (cluster.rank_speeds, data::Shard::weights) must be a positive finite number");
  std::vector<std::int64_t> out(static_cast<std::size_t>(ranks), rows / ranks);
  if (weights.empty()) return out;
  // (equal speeds too: the rule is the shares', whatever the weights; a stranger read "uneven" of 1,1)
  EPL_CHECK(quantum >= 1 && rows % quantum == 0 && rows / quantum >= ranks, "a global batch of ", rows, rows == 1 ? " row" : " rows",
            " cannot give each of ", ranks, " data-parallel ranks its share by speed (cluster.rank_speeds): ",
            quantum == 1 ? std::string("one row at least")
                         : "a whole number of its " + std::to_string(quantum) + " micro-batches, one at least",
            "; use a batch of at least ", ranks * quantum, " rows", quantum == 1 ? std::string() : ", a multiple of " + std::to_string(quantum));
  const std::int64_t units = rows / quantum;
  for (auto& o : out) o = 0;
  double total = 0;
  for (double w : weights) total += w;
  // in proportion, rounded down but one at least; then the units left go to the largest
  // fractions, or the ones over go from the shares furthest above their due (lowest rank first)
  std::vector<double> exact(static_cast<std::size_t>(ranks));
  std::int64_t given = 0;
  for (int r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    exact[i] = static_cast<double>(units) * weights[i] / total;
    out[i] = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(exact[i])));
    given += out[i];
  }
  std::vector<int> order(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) order[static_cast<std::size_t>(r)] = r;
  auto due = [&](int r) { return exact[static_cast<std::size_t>(r)] - static_cast<double>(out[static_cast<std::size_t>(r)]); };
  while (given != units) {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return due(a) > due(b); });
    if (given < units) {
      ++out[static_cast<std::size_t>(order.front())];
      ++given;
    } else {
      for (auto it = order.rbegin(); it != order.rend(); ++it)
        if (out[static_cast<std::size_t>(*it)] > 1) {
          --out[static_cast<std::size_t>(*it)];
          --given;
          break;
        }
    }
  }
  for (auto& o : out) o *= quantum;
  return out;
}

EPL_LINKED RowPlace StepGroups::place(std::int64_t rows, std::int64_t step) {
  const RowShare share = this->rows();
  if (!uneven()) return {share.rank * rows, rows * share.ranks, 1.0};
  std::vector<std::int64_t> all(static_cast<std::size_t>(share.ranks));
  mesh_.data().all_gather(comm::Buffer(&rows, 1, DType::kI64), comm::Buffer(all.data(), share.ranks, DType::kI64));
  std::int64_t total = 0;
  for (auto r : all) total += r;
  const auto expected = share_rows(total, share.ranks, weights_, quantum_);
  for (int r = 0; r < share.ranks; ++r)
    EPL_CHECK(all[static_cast<std::size_t>(r)] == expected[static_cast<std::size_t>(r)], "at step ", step, " data-parallel rank ",
              r, " got ", all[static_cast<std::size_t>(r)], " rows, but its share of the global batch of ", total,
              " rows by cluster.rank_speeds is ", expected[static_cast<std::size_t>(r)],
              "; read the rows with data::WindowLoader and trainer.data_shard(), which carries the shares");
  return {share.first_of(total), total, static_cast<double>(rows * share.ranks) / static_cast<double>(total)};
}

EPL_LINKED void StepGroups::check_rows(const Tensor& inputs, const Tensor& targets, std::int64_t step, const Download& download) {
  rows_agree(inputs, targets, "at step " + std::to_string(step), download);
}

EPL_LINKED void StepGroups::check_evaluation_rows(const Tensor& inputs, const Tensor& targets, std::int64_t step, const Download& download,
                                                  const char* call) {
  const std::string when = std::string("in ") + call + " after step " + std::to_string(step);
  if (tensor_.valid() && rows_over_tensor_) {  // a step's equal shares are the world's check (agree_on_call)
    std::int64_t mine = inputs.dim(0);
    std::vector<std::int64_t> all(static_cast<std::size_t>(tensor_.size()));
    tensor_.all_gather(comm::Buffer(&mine, 1, DType::kI64), comm::Buffer(all.data(), tensor_.size(), DType::kI64));
    for (std::size_t r = 1; r < all.size(); ++r)
      EPL_CHECK(all[r] == all[0], when, " tensor-parallel rank ", r, " of a split group got ", all[r], " rows and its tensor-parallel "
                "rank 0 ", all[0], "; the split part gathers the rows of every rank of its group (cluster.colocate_split_and_replicate, "
                "or a split stage after a replicated one), so each rank gives as many: cut the batch evenly (trainer.data_shard()), "
                "or give a remainder that does not divide whole to every rank");
  }
  rows_agree(inputs, targets, when, download);
}

EPL_LINKED void StepGroups::rows_agree(const Tensor& inputs, const Tensor& targets, const std::string& when, const Download& download) {
  if (tensor_.valid() && !rows_over_tensor_)
    same_rows(tensor_, inputs, targets, when, download, "tensor-parallel rank ", " of a split group",
              "the ranks of an epl::Split group work on the same rows");
  if (pipeline_.valid())
    same_rows(pipeline_, inputs, targets, when, download, "pipeline stage ", "",
              "the stages of one pipeline replica work on the same rows (stage 0 reads their inputs, the last stage their targets)");
}

EPL_LINKED int StepGroups::first_unlike_replica(std::uint64_t h) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(replicas_.size()));
  replicas_.all_gather(comm::Buffer(&h, 1, DType::kI64), comm::Buffer(all.data(), replicas_.size(), DType::kI64));
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) return static_cast<int>(r);
  return 0;
}

EPL_LINKED void StepGroups::check_replicas(std::uint64_t h, std::int64_t step) {
  const int r = first_unlike_replica(h);
  EPL_CHECK(r == 0, "after step ", step, " the parameters of data-parallel rank ", r, " differ from rank 0's: the "
            "replicas drifted apart (non-deterministic code on one rank, or a gradient that was not reduced)");
}

EPL_LINKED void StepGroups::check_gathered(std::uint64_t h, std::int64_t step) {
  const int r = first_unlike_replica(h);
  EPL_CHECK(r == 0, "after step ", step, " the parameters data-parallel rank ", r, " holds after trainer.gather_parameters() "
            "differ from rank 0's: a write on some ranks only would be kept in part (each rank keeps its own slice of the "
            "parameters); write them alike on every rank, or load values with trainer.load_safetensors on every rank");
}
}  // namespace strategy
}  // namespace v0
}  // namespace epl
