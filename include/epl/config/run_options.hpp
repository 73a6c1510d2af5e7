#pragma once
/// \file
/// \brief What a Trainer is told besides its model and optimizer: TrainerOptions (the settings
/// that are not EPL keys), and the configuration keys read into the plain options plan::make
/// checks (plan/ sits below config/ and does not know Config).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epl/config/config.hpp"
#include "epl/optim/schedule.hpp"
#include "epl/plan/plan.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {

/// \brief Options of a Trainer that are not EPL config keys.
struct TrainerOptions {
  std::uint64_t seed = 0;  ///< parameter init and dropout streams
  double clip_norm = 0;    ///< clip gradients to this global L2 norm; 0: no clipping
  /// The dtype of parameters, gradients and optimizer state: f32, or f64 on a device that computes
  /// it (device::CpuF64). Half precision is mixed precision's: amp.level = "O1".
  DType dtype = DType::kF32;
  /// Data parallel: after the first step and every this many steps, compare a hash of the
  /// parameters across replicas and fail if they drifted apart (0: never; one small all_gather).
  std::int64_t check_replicas_every = 100;
  /// A loss or gradient that is NaN or infinite is an error naming the step and the parameter
  /// (false: train on, as a run that handles overflow itself might).
  bool check_finite = true;
  /// Mixed precision (amp.level "O1") with amp.loss_scale = "dynamic": the scale the run starts
  /// at, and the good steps in a row after which it doubles (policy::LossScaler has the rule).
  double amp_init_scale = 65536;
  std::int64_t amp_growth_interval = 2000;
  /// The learning rate of each optimizer step (from 1), when the program has a rule of its own
  /// (null: the lr.* keys say, constant by default). Every rank must give the same rates, and a
  /// resumed run the same rate at the saved step (both checked).
  std::function<double(std::int64_t step)> lr_schedule = nullptr;
  /// Called on every rank at each phase of a checkpoint save ("prepared", "shards written",
  /// "manifest written"): where a test makes a save fail part-way. Null: nothing.
  std::function<void(std::string_view phase)> checkpoint_phase = nullptr;
};

/// \brief Every option's own range, checked when a Trainer is made, whether or not the run uses it
/// (an AMP option set on a run without AMP is a setting that would be silently dropped).
EPL_LINKED void check(const TrainerOptions& o);

/// \brief The learning-rate schedule the lr.* keys (or TrainerOptions::lr_schedule) describe; its
/// base rate is set from the optimizer's options().lr by the trainer.
EPL_LINKED optim::LrSchedule lr_schedule(const Config& cfg, const TrainerOptions& o);

/// \brief How a policy's home reads its keys from a Config (policy::read_keys).
struct KeyReader {
  const Config& cfg;
  template <class T>
  [[nodiscard]] T get(Key<T> key) const {
    return cfg.get(key);
  }
  template <class T>
  [[nodiscard]] bool given(Key<T> key) const {
    return cfg.source(key) != Config::Source::kDefault;
  }
  /// nullopt when the key holds its default
  template <class T>
  [[nodiscard]] std::optional<T> optional(Key<T> key) const {
    return given(key) ? std::optional<T>(cfg.get(key)) : std::nullopt;
  }
};

/// \brief The configuration keys (and the trainer's options) that shape a run's plan.
EPL_LINKED plan::PlanOptions plan_options(const Config& cfg, const TrainerOptions& o);

/// \brief Device d's speed: the fastest of a few timed 256 x 256 x 256 GEMMs, in GFLOP/s.
template <class D>
double measure_speed(const D& d) {
  constexpr std::int64_t n = 256;
  const Tensor a = d.zeros({n, n}, DType::kF32, MemoryCategory::kWorkspace), c = d.zeros({n, n}, DType::kF32, MemoryCategory::kWorkspace);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    d.gemm(a, false, a, true, c, 1, 0);
    d.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, 2.0 * n * n * n / std::max(s, 1e-9) / 1e9);  // the first warms up
  }
  return best;
}

/// \brief cluster.rank_speeds: empty (even), each rank's number, or with "measure" each rank's
/// device timed and the speeds gathered over world (so every rank holds the same list).
template <class D>
std::vector<double> rank_speeds(const Config& cfg, const D& d, comm::Communicator& world) {
  const std::string text = cfg.get(keys::rank_speeds);
  if (text.empty()) return {};
  std::vector<double> speeds(static_cast<std::size_t>(world.size()));
  if (text == "measure") {
    double mine = measure_speed(d);
    world.all_gather(comm::Buffer(&mine, 1, DType::kF64), comm::Buffer(speeds.data(), world.size(), DType::kF64));
    return speeds;
  }
  return detail::parse_rank_speeds(text);
}

}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/config/run_options.ipp"
#endif
