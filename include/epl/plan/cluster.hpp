#pragma once
/// \file
/// \brief What a plan runs on (plan::Cluster: ranks, memory, speed, α-β links), its calibration
/// from a measured step, the file that keeps it between runs, and presets of published machines.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>

#include "epl/core/error.hpp"
#include "epl/core/files.hpp"
#include "epl/plan/calibration_file.hpp"
#include "epl/plan/candidate.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief The collectives' α-β model: a message of n bytes takes alpha + n / beta seconds.
struct Link {
  double alpha = 20e-6;  ///< seconds per message
  double beta = 5e9;     ///< bytes per second
  [[nodiscard]] constexpr double seconds(double bytes) const noexcept { return alpha + bytes / beta; }
  /// \brief `count` ring all-reduces over a group of `ranks` moving `bytes` in all: each 2 (n - 1)
  /// messages, 2 (n - 1) / n of the bytes (none in a group of one).
  [[nodiscard]] constexpr double all_reduces(int ranks, double count, double bytes) const noexcept {
    return ranks > 1 ? count * 2.0 * (ranks - 1) * alpha + 2.0 * (ranks - 1) / ranks * bytes / beta : 0.0;
  }
};

/// \brief What a plan runs on: ranks, memory per rank, relative speed, links.
struct Cluster {
  int ranks = 1;
  std::int64_t bytes_per_rank = std::int64_t{1} << 40;  ///< device memory per rank
  /// A rank's speed over the probe's (a device twice as fast: 2).
  double speed = 1.0;
  /// Cores the ranks share when they share them (thread ranks of one machine, more ranks than
  /// cores): a step takes at least every rank's work over them. 0: each rank has its own.
  int cores = 0;
  /// Multiply-adds a second one rank does in its GEMMs: the compile-time search's (plan::static_search)
  /// compute model, where there is no probe. A measured figure (bench/gemm) is best.
  double macs_per_second = 50e9;
  Link data{};      ///< all-reduce, reduce-scatter, all-gather over the data-parallel group (ring)
  Link pipeline{};  ///< a pipeline stage's send to the next
  Link tensor{};    ///< the all-reduces of an epl::Split group (ring), on the critical path
  Link host{10e-6, 25e9};  ///< offload's moves between the device and host memory (PCIe; on a CPU, a copy)
};

namespace detail {
// Ring passes (a reduce-scatter or an all-gather each) over the gradients' bytes a step moves over
// the data-parallel group, by ZeRO stage, with m micro-batches: no ZeRO or stage 1 all-reduce once
// (two); stage 2 reduce-scatters each micro-batch's gradients and gathers the parameters once;
// stage 3 also gathers each micro-batch's parameters in forward and again in backward.
constexpr int zero_ring_passes(int zero, int m) { return zero <= 1 ? 2 : zero == 2 ? m + 1 : 3 * m; }
// The most ranks, micro-batches a step, and units of work the planner counts: past them its int
// and 64-bit sums could wrap, and its loops run too long to be an answer.
inline constexpr int kMostRanks = 1 << 16;
inline constexpr int kMostMicroBatches = 1 << 16;
[[noreturn]] inline void cluster_is_not_valid(const char* who, const char* what) { EPL_FAIL(who, ": the cluster's ", what); }
// Every field of a cluster the planner reads, checked; `who` names the caller in the error. Usable
// in a constant expression: a bad value stops it at cluster_is_not_valid.
constexpr void check_cluster(const Cluster& c, const char* who) {
  if (c.ranks < 1 || c.ranks > kMostRanks) cluster_is_not_valid(who, "ranks must be at least 1 and at most 65536");
  if (c.bytes_per_rank < 1) cluster_is_not_valid(who, "bytes_per_rank must be positive");
  if (!(c.speed >= 1e-6 && c.speed <= 1e6)) cluster_is_not_valid(who, "speed must be from 1e-6 to 1e6 (1: the probe's)");
  if (c.cores < 0) cluster_is_not_valid(who, "cores must be 0 (each rank its own) or more");
  if (!(c.macs_per_second >= 1e3 && c.macs_per_second <= 1e18))
    cluster_is_not_valid(who, "macs_per_second must be from 1e3 to 1e18 multiply-adds a second");
  for (const Link* l : {&c.data, &c.pipeline, &c.tensor, &c.host})
    if (!(l->alpha >= 0 && l->alpha <= 1e3) || !(l->beta >= 1 && l->beta <= 1e18))
      cluster_is_not_valid(who, "links (data, pipeline, tensor, host) need an alpha from 0 to 1000 seconds and a beta from 1 to "
                                "1e18 bytes per second");
}
}  // namespace detail

/// \brief NVIDIA DGX A100 servers, Megatron-LM's and MT-NLG's machine, from their published
/// figures: 8 A100-SXM4-40GB each (40 GiB; 312 TFLOP/s dense bf16, 156e12 multiply-adds a second,
/// times `efficiency`: what a run reaches of it, calibrated on a published run by
/// plan::static_calibrate); NVLink 3 through NVSwitch inside a server (300 GB/s a GPU each way) for
/// the tensor-parallel group; an HDR InfiniBand port a GPU between servers (200 Gb/s, 25 GB/s) for
/// the pipeline and data-parallel groups; PCIe 4 x16 to host memory. The latencies are NCCL's
/// usual order (5 us inside a server, 10 us across).
constexpr Cluster dgx_a100(int servers, double efficiency = 1.0) {
  if (servers < 1 || servers > 8192) detail::cluster_is_not_valid("plan::dgx_a100", "servers must be 1 to 8192 (8 GPUs each)");
  if (!(efficiency > 0 && efficiency <= 1))
    detail::cluster_is_not_valid("plan::dgx_a100", "efficiency is the share of the A100's bf16 peak a run reaches: above 0, at most 1");
  return {.ranks = 8 * servers,
          .bytes_per_rank = std::int64_t{40} << 30,
          .macs_per_second = 156e12 * efficiency,
          .data = {10e-6, 25e9},
          .pipeline = {10e-6, 25e9},
          .tensor = {5e-6, 300e9},
          .host = {10e-6, 25e9}};
}


/// \brief Writes a cluster's calibrated speed and links to `path` under `key` (what it was measured
/// for), for load_cluster to read back in a later run.
inline void save_cluster(const Cluster& c, const std::filesystem::path& path, const std::string& key) {
  std::ostringstream f;
  f.precision(17);
  f << "epl-cluster 3\n" << key << '\n' << c.speed << ' ' << c.data.alpha << ' ' << c.data.beta << ' ' << c.pipeline.alpha << ' '
    << c.pipeline.beta << ' ' << c.tensor.alpha << ' ' << c.tensor.beta << '\n';
  files::write_file(path, detail::sealed(f.str()), "planner's calibration file");
}

/// \brief `base` with the speed and links save_cluster wrote under `key`; nullopt when there is no
/// file or it was measured for another key. A file that is not one is an error naming it.
inline std::optional<Cluster> load_cluster(const std::filesystem::path& path, const std::string& key, Cluster base) {
  const auto text = detail::read_calibration(path);
  if (!text) return std::nullopt;
  const std::string magic = detail::version_line(*text);
  EPL_CHECK(magic == "epl-cluster 1" || magic == "epl-cluster 2" || magic == "epl-cluster 3", "the planner's calibration file ", path,
            " is not one (", detail::first_line(magic), "); delete it to measure again");
  if (magic != "epl-cluster 3") return std::nullopt;  // an older one (one link measured; no check line): measure again
  auto f = detail::sealed_lines(*text, path);
  std::string saved, more;
  std::getline(f, saved);
  if (saved != key) return std::nullopt;
  f >> base.speed >> base.data.alpha >> base.data.beta >> base.pipeline.alpha >> base.pipeline.beta >> base.tensor.alpha >> base.tensor.beta;
  EPL_CHECK(!f.fail() && !(f >> more) && base.speed > 0 && base.data.beta > 0 && base.pipeline.beta > 0 && base.tensor.beta > 0,
            "the planner's calibration file ", path, " is truncated or corrupt; delete it to measure again");
  return base;
}

/// \brief Calibration: the cluster's speed made such that `predicted` (an estimate on `cluster`)
/// takes the `measured` seconds one short run of that plan took. What the probe does not see (the
/// optimizer's update, the step's bookkeeping, cores shared with others) then scales every
/// candidate's compute alike. Returns the factor the speed changed by.
inline double calibrate(Cluster& cluster, const Estimate& predicted, double measured) {
  EPL_CHECK(std::isfinite(measured) && measured > 0, "plan::calibrate: the measured step of ", measured, " s is not a positive time");
  // communication, which the α-β already measured: the data and pipeline links, and the split
  // group's all-reduces on the compute path
  const double other = predicted.seconds - predicted.compute_seconds + predicted.tensor_seconds;
  const double work = predicted.compute_seconds - predicted.tensor_seconds;
  const double compute = std::max(measured - other, 0.25 * measured);
  const double factor = work > 0 ? std::clamp(work / compute, 1e-3, 1e3) : 1.0;
  cluster.speed = std::clamp((cluster.speed > 0 ? cluster.speed : 1.0) * factor, 1e-6, 1e6);
  return factor;
}

/// \brief Calibration of a split group's link: cluster.tensor scaled so that `predicted` (an
/// estimate of a single-stage plan of a split model on `cluster`, its speed calibrated first) takes
/// the `measured` seconds one short run of it took. What the α-β of a quiet all-reduce does not see
/// (ranks sharing cores that wait for their turn at each of a step's many small all-reduces) then
/// prices every split plan's all-reduces alike. Returns the factor the link's times changed by.
inline double calibrate_tensor(Cluster& cluster, const Estimate& predicted, double measured) {
  EPL_CHECK(std::isfinite(measured) && measured > 0, "plan::calibrate_tensor: the measured step of ", measured, " s is not a positive time");
  EPL_CHECK(predicted.tensor_seconds > 0 && predicted.candidate.pipeline == 1, "plan::calibrate_tensor: ", predicted.candidate.str(),
            " is not a single-stage plan of a split model; calibrate with one (dp n/t tp t pp1)");
  const double rest = predicted.seconds - predicted.tensor_seconds;
  const double wanted = std::max(measured - rest, 0.1 * predicted.tensor_seconds);
  const double factor = std::clamp(wanted / predicted.tensor_seconds, 0.01, 1000.0);
  cluster.tensor.alpha *= factor;
  cluster.tensor.beta /= factor;
  return factor;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
