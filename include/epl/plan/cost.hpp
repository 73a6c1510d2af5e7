#pragma once
/// \file
/// \brief The planner's cost model: what a plan costs one rank, predicted before anything is
/// drawn.
///
/// - **State bytes** (parameters, gradients, optimizer state): exact. predict_state lays out each
///   rank's parameters with the arena's own rule (param::layout, after the same sharding and
///   stage cut the Trainer makes) and applies ZeRO's and offload's placement (state_bytes).
/// - **Activations, time, FLOPs, communication**: from a Profile of the model's sequential units
///   (the partitioner's units, with the partitioner's cost: strategy::unit_cost, or a
///   strategy::static_cost a layer type declares), measured by one short probe run on the
///   device (profile), and from the schedule's own action list.
///
/// search.hpp enumerates candidate plans with it; fits.hpp is its compile-time form.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "epl/core/files.hpp"
#include "epl/device/cpu/cpu.hpp"
#include "epl/device/device.hpp"
#include "epl/nn/loss.hpp"
#include "epl/param/arena.hpp"
#include "epl/plan/plan.hpp"
#include "epl/plan/shard.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief One rank's training state, by where it lives (the allocator's categories).
struct StateBytes {
  std::int64_t parameters = 0, gradients = 0, optimizer_state = 0;  ///< on the device
  /// In the device's host pool (offload.level = "v0").
  std::int64_t host_parameters = 0, host_gradients = 0, host_optimizer_state = 0;
  [[nodiscard]] constexpr std::int64_t device() const noexcept { return parameters + gradients + optimizer_state; }
  [[nodiscard]] constexpr std::int64_t host() const noexcept { return host_parameters + host_gradients + host_optimizer_state; }
};

/// \brief The state a rank keeps between steps for an arena of `elements` (padding included)
/// shared by `shards` data-parallel ranks: ZeRO stage 1 shards the optimizer state, stage 2 the
/// gradients too, stage 3 the parameters too; offload keeps stage 3's shards in host memory.
/// `slots` state values per element (optim's kStateSlots), `element_bytes` each (4: f32).
constexpr StateBytes state_bytes(std::int64_t elements, int shards, int zero_stage, bool offload, int slots,
                                 std::int64_t element_bytes = 4) {
  const std::int64_t whole = elements * element_bytes, part = elements / shards * element_bytes;
  StateBytes s;
  s.parameters = zero_stage >= 3 ? part : whole;
  s.gradients = zero_stage >= 2 ? part : whole;
  s.optimizer_state = slots * (zero_stage >= 1 ? part : whole);
  if (offload) {
    s.host_parameters = std::exchange(s.parameters, 0);
    s.host_gradients = std::exchange(s.gradients, 0);
    s.host_optimizer_state = std::exchange(s.optimizer_state, 0);
  }
  return s;
}

/// \brief A rank's place: its pipeline rank and its part of the tensor axis.
struct Place {
  int stage = 0, tensor = 0;
};

/// \brief The state bytes of each place of plan on a world of world_size ranks (index
/// stage * plan.tensor + tensor; every data-parallel rank of a place holds as much), for Model
/// trained by an optimizer of `slots` state values per element, as Trainer<Model, ..., Policy, ...,
/// D> lays it out. Nothing is drawn: a copy of the model is sharded and cut as each rank would.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
std::vector<StateBytes> predict_state(const Model& model, const Plan& plan, int world_size, int slots) {
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;
  const int data = world_size / (plan.pipeline * plan.tensor);
  Plan cut = plan;
  cut.policies.recompute = nn::RecomputeMode::kMarked;  // the parameters a rank owns do not depend on what it recomputes
  const std::int64_t bytes = plan.policies.dtype == DType::kF64 ? 8 : 4;
  std::vector<StateBytes> out;
  for (int s = 0; s < plan.pipeline; ++s)
    for (int t = 0; t < plan.tensor; ++t) {
      Model copy = model;
      (void)shard_model(copy, nn::SplitPart{t, plan.tensor}, plan.rows_over_tensor());
      const auto chunks = local_chunks<Pass>(copy, cut, s);
      const auto mo = arena_options(chunks, plan.chunks_of(s), plan, data, 0);
      std::vector<nn::Parameter*> order;
      nn::for_each_parameter(copy, [&](nn::Parameter& p) {
        if (mo.owned(p)) order.push_back(&p);
      });
      std::reverse(order.begin(), order.end());  // the arena's backward order
      const auto lay = param::layout(order, mo);
      out.push_back(state_bytes(lay.size, mo.shards, plan.policies.zero_stage, plan.policies.offload, slots, bytes));
    }
  return out;
}

/// \brief What one sequential unit of a model costs, per row of its input (a sample).
struct UnitProfile {
  std::string name;                     ///< the unit's path, as strategy::flatten names it
  std::int64_t parameters = 0;          ///< elements, unsplit
  double macs_per_token = 0;            ///< the partitioner's cost (strategy::unit_cost)
  /// What its forward leaves allocated, per row: its output and what it saves for its backward,
  /// less its input when it does not save it (so a model's units add up to its activations).
  std::int64_t activation_bytes = 0;
  std::int64_t output_bytes = 0;        ///< its output, per row: what a pipeline sends on
  std::int64_t backward_bytes = 0;      ///< allocated for a while during its backward, per row
  double forward_seconds = 0;           ///< measured, per row
  double backward_seconds = 0;          ///< measured, per row
  double fixed_seconds = 0;             ///< measured, forward and backward, per call whatever its rows
};

/// \brief A model's units as measured by profile(): one short probe run of forward, loss and
/// backward on one device. The loss is the last unit (name "loss").
struct Profile {
  std::vector<UnitProfile> units;
  std::int64_t rows = 0;             ///< rows of the probe batch
  std::int64_t tokens_per_row = 0;   ///< elements of one input row
  std::int64_t input_bytes = 0;      ///< of one input row
  int tensor = 1;                    ///< the split degree it was probed at: one rank's part of each split layer
  int repeats = 1;                   ///< probe runs of each batch size, interleaved
  /// How far the probe's runs disagreed: the median run's whole step (forward, loss and backward of
  /// the probe batch) over the fastest run's, less 1 (0: as steady as one run can tell). The times
  /// above are each unit's fastest; a spread near or above the gap between two plans' predicted
  /// times means the probe cannot rank them (plan::SearchResult::spread, auto_plan's log).
  double spread = 0;
  [[nodiscard]] std::int64_t parameters() const {
    std::int64_t n = 0;
    for (const auto& u : units) n += u.parameters;
    return n;
  }
  /// \brief The unit named `name`; an error when there is none.
  [[nodiscard]] const UnitProfile& unit(const std::string& name) const {
    for (const auto& u : units)
      if (u.name == name) return u;
    EPL_FAIL("the profile has no unit ", name, ": it was measured on another model; profile this one");
  }
};

namespace detail {
inline std::int64_t activations_now(DeviceId d) { return memory_stats(d).current_of(MemoryCategory::kActivations); }
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The probe's stand-in for a split group of `parts` ranks, as its rank 0: each collective gives
// outputs of the group's shapes (an all-gather repeats this rank's part, a reduce-scatter keeps
// the first part, the rest copy), so a split layer's part runs alone with its own shapes and
// allocations; the values are not a run's, and nothing is sent. Models comm::communicator.
class ProbeGroup {
 public:
  explicit ProbeGroup(int parts) : parts_(parts) {}
  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return parts_; }
  [[nodiscard]] std::string_view name() const noexcept { return "the probe's stand-in split group"; }
  [[nodiscard]] comm::CommStats stats() const noexcept { return {}; }
  void all_reduce(const comm::Buffer& in, const comm::Buffer& out, comm::ReduceOp) { copy(in, out, 0, out.count); }
  comm::Work all_reduce_async(const comm::Buffer& in, const comm::Buffer& out, comm::ReduceOp op) {
    all_reduce(in, out, op);
    return comm::Work::done();
  }
  void reduce_scatter(const comm::Buffer& in, const comm::Buffer& out, comm::ReduceOp) { copy(in, out, 0, out.count); }
  comm::Work reduce_scatter_async(const comm::Buffer& in, const comm::Buffer& out, comm::ReduceOp op) {
    reduce_scatter(in, out, op);
    return comm::Work::done();
  }
  void all_gather(const comm::Buffer& in, const comm::Buffer& out) {
    for (std::int64_t at = 0; at + in.count <= out.count && in.count > 0; at += in.count) copy(in, out, at, in.count);
  }
  comm::Work all_gather_async(const comm::Buffer& in, const comm::Buffer& out) {
    all_gather(in, out);
    return comm::Work::done();
  }
  void broadcast(const comm::Buffer&, int) {}
  void reduce(const comm::Buffer& in, const comm::Buffer& out, comm::ReduceOp, int) { copy(in, out, 0, out.count); }
  void all_to_all(const comm::Buffer& in, const comm::Buffer& out) { copy(in, out, 0, out.count); }
  void all_to_all_v(const comm::Buffer& in, const std::vector<std::int64_t>&, const comm::Buffer& out, const std::vector<std::int64_t>& recv) {
    std::int64_t n = 0;
    for (auto c : recv) n += c;
    copy(in, out, 0, std::min({n, in.count, out.count}));
  }
  void send(const comm::Buffer&, int, int) { point_to_point(); }
  void recv(const comm::Buffer&, int, int) { point_to_point(); }
  comm::Work isend(const comm::Buffer&, int, int) { point_to_point(); }
  comm::Work irecv(const comm::Buffer&, int, int) { point_to_point(); }
  void barrier() noexcept {}
  [[nodiscard]] ProbeGroup split(int, int) const { return *this; }
  void cancel(const std::string&) noexcept {}

 private:
  [[noreturn]] static void point_to_point() {
    EPL_FAIL("plan::profile: a layer sent a message within its split group; the probe's stand-in group has no peers to send "
             "to (profile a model whose split layers use collectives only)");
  }
  // out[at, at + n) = in[0, n), the same elements when in and out are one buffer
  static void copy(const comm::Buffer& in, const comm::Buffer& out, std::int64_t at, std::int64_t n) {
    if (n <= 0) return;
    const auto size = static_cast<std::int64_t>(size_of(in.dtype));
    auto* dst = static_cast<char*>(out.data) + at * size;
    if (dst != in.data) std::memmove(dst, in.data, static_cast<std::size_t>(std::min(n, in.count) * size));
  }
  int parts_ = 1;
};
}  // namespace detail

/// \brief Measures model's units on device d with the batch (inputs, targets) of `rows` rows: each
/// unit's activation bytes (from the allocator's accounting) and its forward and backward times
/// (each the fastest of `repeats` runs, the whole batch's and one row's interleaved; Profile::spread
/// says how far the runs disagreed), and its parameters; `matmul` bf16 or f16 times AMP's GEMMs. The model is copied and drawn once, whole,
/// on d (a model too large for one device is profiled on its parts by the caller). Run it on a
/// device whose account nothing else charges meanwhile (before starting thread ranks).
template <class Model, class Loss = nn::SoftmaxCrossEntropy, class D>
Profile profile(const Model& model, const D& d, const Tensor& inputs, const Tensor& targets, int repeats = 3,
                DType matmul = DType::kF32) {
  EPL_CHECK(inputs.defined() && inputs.rank() > 0 && inputs.dim(0) > 0, "profile: the probe batch has no rows; give it one or more");
  EPL_CHECK(targets.defined() && targets.rank() > 0 && targets.dim(0) == inputs.dim(0), "profile: the probe batch has ",
            inputs.dim(0), " input rows but ", targets.defined() && targets.rank() > 0 ? targets.dim(0) : 0, " target rows");
  EPL_CHECK(repeats >= 1, "profile: repeats = ", repeats, " must be at least 1");
  using Pass = nn::Pass<D>;
  // A split model is probed as one rank of its group: part 0 of each split layer, its collectives
  // over a stand-in group, so the bytes and times are a split rank's.
  constexpr int parts = tensor_degree_v<Model>;
  Model copy = model;
  bool vocab_parallel = false;
  if constexpr (parts > 1) vocab_parallel = shard_model(copy, nn::SplitPart{0, parts}, false).sharded_output;
  comm::Communicator group(detail::ProbeGroup{parts});
  param::Arena arena = param::materialize(copy, d, {.seed = 1});
  std::vector<strategy::Unit<Pass>> units;
  strategy::flatten<Pass>(copy, units);
  Loss loss;
  if constexpr (requires { loss.parallelize(nn::SplitPart{}); })
    if (vocab_parallel) loss.parallelize(nn::SplitPart{0, parts});
  Profile p;
  p.tensor = parts;
  p.rows = inputs.dim(0);
  p.tokens_per_row = inputs.numel() / p.rows;
  p.input_bytes = static_cast<std::int64_t>(inputs.bytes()) / p.rows;
  p.units.resize(units.size() + 1);
  for (std::size_t i = 0; i < units.size(); ++i) {
    p.units[i].name = units[i].name;
    p.units[i].macs_per_token = units[i].cost;
    units[i].parameters(units[i].layer, [&](nn::Parameter& q) { p.units[i].parameters += q.global_shape().numel(); });
  }
  p.units.back().name = "loss";
  const DeviceId id = d.id();
  auto& account = memory_account(id);
  // One run of forward, loss and backward of the rows of x: each unit's forward and backward, in
  // seconds per call; with `record`, the bytes.
  auto measure = [&](const Tensor& x, const Tensor& y, bool record) {
    std::vector<std::pair<double, double>> t(p.units.size());
    const auto rows = x.dim(0);
    Pass pass(d, nn::PassOptions{.training = true, .seed = 1, .recompute = nn::RecomputeMode::kNone, .matmul = matmul}, nullptr,
              nn::Groups{.tensor = parts > 1 ? &group : nullptr});
    Tensor h = x;
    for (std::size_t i = 0; i < units.size(); ++i) {
      const std::int64_t before = detail::activations_now(id);
      const auto t0 = std::chrono::steady_clock::now();
      Tensor out = units[i].forward(units[i].layer, pass, h);
      t[i].first = detail::since(t0);
      h = std::move(out);  // the input goes unless the unit saved it
      if (record) {
        // what the unit added: its output and what it saved, less its input when it did not save
        // it (the batch is the caller's: never freed here)
        p.units[i].activation_bytes = (detail::activations_now(id) - before) / rows;
        p.units[i].output_bytes = static_cast<std::int64_t>(h.bytes()) / rows;
      }
    }
    auto& lp = p.units.back();
    std::int64_t before = detail::activations_now(id);
    auto t0 = std::chrono::steady_clock::now();
    (void)loss.forward(pass, h, y);
    t.back().first = detail::since(t0);
    if (record) lp.activation_bytes = (detail::activations_now(id) - before) / rows;
    before = detail::activations_now(id);
    account.reset_peaks();
    t0 = std::chrono::steady_clock::now();
    Tensor g = loss.backward(pass, 1.0 / static_cast<double>(rows));
    t.back().second = detail::since(t0);
    if (record) lp.backward_bytes = (memory_stats(id).peak_of(MemoryCategory::kActivations) - before) / rows;
    h = {};  // the logits: the loss saved them
    for (std::size_t i = units.size(); i-- > 0;) {
      before = detail::activations_now(id);
      account.reset_peaks();
      t0 = std::chrono::steady_clock::now();
      g = units[i].backward(units[i].layer, pass, g);
      t[i].second = detail::since(t0);
      if (record) p.units[i].backward_bytes = (memory_stats(id).peak_of(MemoryCategory::kActivations) - before) / rows;
    }
    return t;
  };
  // The whole batch and its first row in turns, `repeats` times, so a burst of load on the machine
  // falls on both sizes and on every unit alike; each unit keeps its fastest of each size.
  using Run = std::vector<std::pair<double, double>>;
  std::vector<Run> alls, ones;
  for (int r = 0; r < repeats; ++r) {
    alls.push_back(measure(inputs, targets, r == 0));
    if (p.rows > 1) ones.push_back(measure(inputs.slice(0, 1), targets.slice(0, 1), false));
  }
  auto fastest = [&](const std::vector<Run>& runs) {
    Run f = runs.front();
    for (const auto& run : runs)
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = {std::min(f[i].first, run[i].first), std::min(f[i].second, run[i].second)};
    return f;
  };
  const Run all = fastest(alls), one = p.rows > 1 ? fastest(ones) : all;
  std::vector<double> steps;
  for (const auto& run : alls) {
    double total = 0;
    for (const auto& [f, b] : run) total += f + b;
    steps.push_back(total);
  }
  std::sort(steps.begin(), steps.end());
  p.repeats = repeats;
  p.spread = steps.front() > 0 ? steps[steps.size() / 2] / steps.front() - 1 : 0;
  // Times are affine in the rows: a fixed part per call (what a small micro-batch pays) and a part
  // per row, from the whole batch and its first row.
  const double extra = static_cast<double>(std::max<std::int64_t>(p.rows - 1, 1));
  for (std::size_t i = 0; i < p.units.size(); ++i) {
    auto& u = p.units[i];
    if (p.rows == 1) {
      u.forward_seconds = all[i].first;
      u.backward_seconds = all[i].second;
      continue;
    }
    u.forward_seconds = std::max(0.0, (all[i].first - one[i].first) / extra);
    u.backward_seconds = std::max(0.0, (all[i].second - one[i].second) / extra);
    u.fixed_seconds = std::max(0.0, one[i].first + one[i].second - u.forward_seconds - u.backward_seconds);
  }
  return p;
}

/// \brief Writes a profile to `path` under `key` (what it was measured for: the model's shape,
/// the device), so a later run reads it back instead of measuring again (load_profile).
inline void save_profile(const Profile& p, const std::filesystem::path& path, const std::string& key) {
  std::ostringstream f;
  f.precision(17);
  f << "epl-profile 4\n" << key << "\n" << p.rows << ' ' << p.tokens_per_row << ' ' << p.input_bytes << ' ' << p.tensor << ' ' << p.repeats
    << ' ' << p.spread << ' ' << p.units.size() << '\n';
  for (const auto& u : p.units)
    f << u.name << ' ' << u.parameters << ' ' << u.macs_per_token << ' ' << u.activation_bytes << ' ' << u.output_bytes << ' '
      << u.backward_bytes << ' ' << u.forward_seconds << ' ' << u.backward_seconds << ' ' << u.fixed_seconds << '\n';
  files::write_file(path, f.str(), "planner's calibration file");  // whole or not at all: a reader sees the old or the new
}

namespace detail {
// A calibration file's first line as a message may show it: at most 40 characters, each byte that
// is not printable ASCII as '?'.
inline std::string shown(const std::string& line) {
  std::string out = line.substr(0, 40);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}
// Opens a calibration file to read; nullopt when there is none. A folder or other non-file at the
// path is an error naming it.
inline std::optional<std::ifstream> open_calibration(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return std::nullopt;
  EPL_CHECK(std::filesystem::is_regular_file(st), "the planner's calibration file ", path, " is ",
            std::filesystem::is_directory(st) ? "a folder" : "not a regular file", "; give the path of a file (it is written there)");
  std::ifstream f(path);
  EPL_CHECK(static_cast<bool>(f), "the planner's calibration file ", path, " cannot be read; check its permissions or delete it");
  return f;
}
// The most a unit's time may be, in seconds per row or per call, in a calibration file: past it the
// file is not a measurement.
inline constexpr double kMostSeconds = 1e4;
}  // namespace detail

/// \brief The profile save_profile wrote to `path` under `key`; nullopt when there is no file or it
/// was measured for another key. A file that is not a profile is an error naming it.
inline std::optional<Profile> load_profile(const std::filesystem::path& path, const std::string& key) {
  auto opened = detail::open_calibration(path);
  if (!opened) return std::nullopt;
  auto& f = *opened;
  std::string magic, saved;
  std::getline(f, magic);
  EPL_CHECK(magic == "epl-profile 4" || magic == "epl-profile 3" || magic == "epl-profile 2", "the planner's calibration file ", path,
            " is not one (its first line is \"", detail::shown(magic), "\"); delete it to measure again");
  if (magic != "epl-profile 4") return std::nullopt;  // an older probe's (split layers measured whole; no spread): measure again
  EPL_CHECK(static_cast<bool>(std::getline(f, saved)), "the planner's calibration file ", path,
            " is truncated or corrupt (no key line); delete it to measure again");
  if (saved != key) return std::nullopt;
  Profile p;
  std::size_t n = 0;
  f >> p.rows >> p.tokens_per_row >> p.input_bytes >> p.tensor >> p.repeats >> p.spread >> n;
  EPL_CHECK(f.good() && n > 0 && n < (1u << 24) && p.tensor >= 1 && p.repeats >= 1 && p.spread >= 0 && std::isfinite(p.spread),
            "the planner's calibration file ", path, " is truncated or corrupt; delete it to measure again");
  p.units.resize(n);
  for (auto& u : p.units)
    f >> u.name >> u.parameters >> u.macs_per_token >> u.activation_bytes >> u.output_bytes >> u.backward_bytes >> u.forward_seconds >>
        u.backward_seconds >> u.fixed_seconds;
  EPL_CHECK(!f.fail() && p.rows >= 1 && p.tokens_per_row >= 1 && p.input_bytes >= 0, "the planner's calibration file ", path,
            " is truncated or corrupt; delete it to measure again");
  for (const auto& u : p.units) {
    const bool sane = u.parameters >= 0 && u.macs_per_token >= 0 && u.output_bytes >= 0 && u.backward_bytes >= 0 &&
                      std::isfinite(u.macs_per_token) && u.forward_seconds >= 0 && u.backward_seconds >= 0 && u.fixed_seconds >= 0 &&
                      u.forward_seconds <= detail::kMostSeconds && u.backward_seconds <= detail::kMostSeconds &&
                      u.fixed_seconds <= detail::kMostSeconds;
    EPL_CHECK(sane, "the planner's calibration file ", path, " holds impossible figures for unit ", u.name,
              " (negative, not finite, or a time over ", detail::kMostSeconds, " s); delete it to measure again");
  }
  return p;
}

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

/// \brief One combination: the axes of the mesh, the schedule and the policies.
struct Candidate {
  int data = 1, pipeline = 1, micro_batches = 1;
  int tensor = 1;                           ///< the model type's epl::Split degree (set by estimate; a type, not a key)
  std::string schedule = "PreferBackward";  ///< pipeline.strategy (when pipeline > 1)
  int virtual_stages = 2;                   ///< Interleaved's chunks per rank
  int zero = 0;                             ///< ZeRO stage (zero.level "", v0, v1, v2)
  bool recompute = false;                   ///< gradient_checkpoint.type = "auto"
  bool offload = false;                     ///< offload.level = "v0"
  bool amp = false;                         ///< amp.level = "O1" (the compiled epl::Amp's dtype)
  /// \brief The configuration keys that run it (key, value), for epl::Config::set.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> keys() const {
    std::vector<std::pair<std::string, std::string>> k{{"pipeline.num_micro_batch", std::to_string(micro_batches)},
                                                       {"pipeline.num_stages", std::to_string(pipeline)},
                                                       {"zero.level", zero == 0 ? "" : "v" + std::to_string(zero - 1)},
                                                       {"offload.level", offload ? "v0" : ""},
                                                       {"gradient_checkpoint.type", recompute ? "auto" : ""},
                                                       {"amp.level", amp ? "O1" : ""}};
    if (pipeline > 1) {
      k.push_back({"pipeline.strategy", schedule});
      k.push_back({"auto.auto_parallel", "true"});
      if (schedule == "Interleaved") k.push_back({"pipeline.num_virtual_stages", std::to_string(virtual_stages)});
    }
    return k;
  }
  /// \brief A short name: dp2 pp2 m4 1F1B zero1 rc.
  [[nodiscard]] std::string str() const {
    std::string s = "dp" + std::to_string(data) + (tensor > 1 ? " tp" + std::to_string(tensor) : std::string()) + " pp" +
                    std::to_string(pipeline) + " m" + std::to_string(micro_batches);
    if (pipeline > 1)
      s += schedule == "PreferBackward" ? " 1F1B" : schedule == "PreferForward" ? " GPipe" : " " + schedule + std::to_string(virtual_stages);
    if (zero) s += " zero" + std::to_string(zero);
    if (offload) s += " offload";
    if (recompute) s += " recompute";
    if (amp) s += " amp";
    return s;
  }
  /// \brief The plan options of this candidate (the rest as in `base`).
  [[nodiscard]] PlanOptions options(PlanOptions base = {}) const {
    base.micro_batches = micro_batches;
    base.stages = pipeline;
    base.stages_given = true;  // an epl::Pipeline type on one rank too: what was priced is what runs
    base.schedule = schedule;
    base.virtual_stages = virtual_stages;
    base.virtual_stages_given = pipeline > 1 && schedule == "Interleaved";
    base.auto_parallel = pipeline > 1;
    base.policies.zero_level = zero == 0 ? std::string() : "v" + std::to_string(zero - 1);
    base.policies.offload_level = offload ? "v0" : "";
    base.policies.recompute = recompute ? "auto" : "";
    base.policies.amp_level = amp ? "O1" : "";
    return base;
  }
};

/// \brief What a candidate is predicted to cost its busiest rank, per step.
struct Estimate {
  Candidate candidate;
  StateBytes state;                ///< the largest of any rank (exact)
  std::int64_t activations = 0;    ///< peak activation bytes of the rank that holds most
  std::int64_t data_bytes = 0;     ///< gradient bytes a rank sends to its data-parallel group (ring)
  std::int64_t pipeline_bytes = 0; ///< activation and gradient bytes a stage sends on
  std::int64_t tensor_bytes = 0;   ///< bytes a rank's split group all-reduces per step (epl::Split)
  double flops = 0;                ///< multiply-adds x 2 of the busiest rank (forward, backward, recompute)
  double bubble = 0;               ///< the fraction of the step a stage idles: (p - 1) / (v m + p - 1)
  double compute_seconds = 0, data_seconds = 0, pipeline_seconds = 0;
  double tensor_seconds = 0;       ///< the split group's all-reduces of the busiest rank (part of compute_seconds' path)
  double host_seconds = 0;         ///< offload: the shards' parameters and gradients moved between host and device
  double seconds = 0;              ///< predicted step time
  [[nodiscard]] std::int64_t device_bytes() const noexcept { return state.device() + activations; }
  /// \brief The largest of parameters, gradients, optimizer state, activations, by name.
  [[nodiscard]] std::string biggest() const {
    const std::pair<std::int64_t, const char*> parts[] = {{state.parameters, "parameters"},
                                                          {state.gradients, "gradients"},
                                                          {state.optimizer_state, "optimizer state"},
                                                          {activations, "activations"}};
    return std::max_element(std::begin(parts), std::end(parts))->second;
  }
};

namespace detail {
// The peak activation bytes of pipeline rank `stage` running `actions`, where chunk c keeps
// kept[c] bytes per micro-batch from its forward to its backward and needs transient[c] more
// while its backward runs.
inline std::int64_t activation_peak(const std::vector<strategy::Action>& actions, const std::vector<std::int64_t>& kept,
                                    const std::vector<std::int64_t>& transient) {
  // a split backward keeps (part of) what a forward kept until W: counted whole, the bound
  const bool split = strategy::splits_backward(actions);
  std::int64_t live = 0, peak = 0;
  for (const auto& a : actions) {
    const auto c = static_cast<std::size_t>(a.chunk);
    if (a.kind == strategy::Action::Kind::kForward) {
      live += kept[c];
    } else if (a.kind == strategy::Action::Kind::kBackward) {
      peak = std::max(peak, live + transient[c]);
      if (!split) live -= kept[c];
    } else if (a.kind == strategy::Action::Kind::kWeight) {
      live -= kept[c];
    }
  }
  return std::max(peak, live);
}

// A pipeline stage's time over the probe's, on uneven devices (cluster.rank_speeds): `slowest`
// the most over its replicas of the replica's share of the rows (as the Trainer shares them)
// over its slowest rank's speed relative to the fastest rank's (which runs at Cluster::speed),
// `busy` their sum (the replicas' work); even: 1 and the replicas.
struct Lane {
  double slowest = 1, busy = 1;
};
inline std::vector<Lane> stage_lanes(const Plan& plan, const std::vector<double>& speeds, int ranks, std::int64_t rows, int micro_batches) {
  const int data = ranks / (plan.pipeline * plan.tensor);
  std::vector<Lane> lanes(static_cast<std::size_t>(plan.pipeline), Lane{1.0, static_cast<double>(data)});
  if (speeds.empty()) return lanes;
  std::vector<double> slow(static_cast<std::size_t>(data * plan.pipeline), 0.0);  // [replica][stage]: its slowest rank
  for (int r = 0; r < ranks; ++r) {
    const auto at = strategy::coord_of(plan.mesh_shape(), data, r);
    auto& v = slow[static_cast<std::size_t>(at.data * plan.pipeline + at.pipeline)];
    v = v == 0 ? speeds[static_cast<std::size_t>(r)] : std::min(v, speeds[static_cast<std::size_t>(r)]);
  }
  const auto shares = strategy::share_rows(rows, data, plan.data_weights, micro_batches);
  const double even = static_cast<double>(rows) / data;
  const double fastest = *std::max_element(speeds.begin(), speeds.end());  // the speeds are relative: the fastest runs at the cluster's
  for (int s = 0; s < plan.pipeline; ++s) {
    auto& lane = lanes[static_cast<std::size_t>(s)];
    lane = {0, 0};
    for (int i = 0; i < data; ++i) {
      const double f = static_cast<double>(shares[static_cast<std::size_t>(i)]) / even * fastest / slow[static_cast<std::size_t>(i * plan.pipeline + s)];
      lane.slowest = std::max(lane.slowest, f);
      lane.busy += f;
    }
  }
  return lanes;
}
}  // namespace detail

/// \brief Writes a cluster's calibrated speed and links to `path` under `key` (what it was measured
/// for), for load_cluster to read back in a later run.
inline void save_cluster(const Cluster& c, const std::filesystem::path& path, const std::string& key) {
  std::ostringstream f;
  f.precision(17);
  f << "epl-cluster 2\n" << key << '\n' << c.speed << ' ' << c.data.alpha << ' ' << c.data.beta << ' ' << c.pipeline.alpha << ' '
    << c.pipeline.beta << ' ' << c.tensor.alpha << ' ' << c.tensor.beta << '\n';
  files::write_file(path, f.str(), "planner's calibration file");
}

/// \brief `base` with the speed and links save_cluster wrote under `key`; nullopt when there is no
/// file or it was measured for another key. A file that is not one is an error naming it.
inline std::optional<Cluster> load_cluster(const std::filesystem::path& path, const std::string& key, Cluster base) {
  auto opened = detail::open_calibration(path);
  if (!opened) return std::nullopt;
  auto& f = *opened;
  std::string magic, saved;
  std::getline(f, magic);
  EPL_CHECK(magic == "epl-cluster 1" || magic == "epl-cluster 2", "the planner's calibration file ", path, " is not one (its first line is \"",
            detail::shown(magic), "\"); delete it to measure again");
  std::getline(f, saved);
  if (saved != key) return std::nullopt;
  f >> base.speed >> base.data.alpha >> base.data.beta >> base.pipeline.alpha >> base.pipeline.beta;
  if (magic == "epl-cluster 2") f >> base.tensor.alpha >> base.tensor.beta;
  else base.tensor = base.data;  // version 1 measured one link: the world's all-reduce
  EPL_CHECK(!f.fail() && base.speed > 0 && base.data.beta > 0 && base.pipeline.beta > 0 && base.tensor.beta > 0,
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

/// \brief Predicts `c` for Model (a copy of `model` is sharded and cut; nothing is drawn) from its
/// profile, on `cluster`, training `rows` rows a step, with an optimizer of `slots` state values
/// per element; a candidate the plan refuses throws the plan's error.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
Estimate estimate(const Model& model, const Profile& prof, const Candidate& c, const Cluster& cluster, std::int64_t rows, int slots,
                  PlanOptions base = {}) {
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;
  detail::check_cluster(cluster, "plan::estimate");
  EPL_CHECK(c.zero >= 0 && c.zero <= 3 && c.virtual_stages >= 1 && c.micro_batches <= detail::kMostMicroBatches && rows <= (std::int64_t{1} << 50),
            "plan::estimate: candidate ", c.str(), ": its ZeRO stage must be 0 to 3, its virtual stages 1 or more, its micro-batches ",
            "at most 65536, and the batch at most 2^50 rows");
  EPL_CHECK(!prof.units.empty(), "plan::estimate: the profile is empty; measure one with plan::profile");
  EPL_CHECK(cluster.ranks >= 1 && rows >= 1 && slots >= 0 && c.data >= 1 && c.pipeline >= 1 && c.micro_batches >= 1,
            "plan::estimate: the cluster's ranks (", cluster.ranks, "), the batch's rows (", rows, "), the candidate's degrees and "
            "micro-batches must be at least 1, and the optimizer's state slots (", slots, ") at least 0");
  EPL_CHECK(c.data * c.pipeline * tensor_degree_v<Model> == cluster.ranks, "candidate ", c.str(), " uses ",
            c.data * c.pipeline * tensor_degree_v<Model>, " ranks, but the cluster has ", cluster.ranks);
  EPL_CHECK(rows % (c.data * c.micro_batches) == 0, "candidate ", c.str(), ": a global batch of ", rows, " rows does not divide into ",
            c.data, " replicas x ", c.micro_batches, " micro-batches");
  const Plan plan = make<Model, Policy>(c.options(base), cluster.ranks, device::computes<D, double>());
  EPL_CHECK(prof.tensor == plan.tensor, "the profile was probed as a rank of a split group of ", prof.tensor, ", but this model is split ",
            plan.tensor, " ways: it is another model's; profile this model (plan::profile)");
  Estimate e;
  e.candidate = c;
  e.candidate.tensor = plan.tensor;
  for (const auto& s : predict_state<Model, Policy, D>(model, plan, cluster.ranks, slots)) {
    e.state.parameters = std::max(e.state.parameters, s.parameters);
    e.state.gradients = std::max(e.state.gradients, s.gradients);
    e.state.optimizer_state = std::max(e.state.optimizer_state, s.optimizer_state);
    e.state.host_parameters = std::max(e.state.host_parameters, s.host_parameters);
    e.state.host_gradients = std::max(e.state.host_gradients, s.host_gradients);
    e.state.host_optimizer_state = std::max(e.state.host_optimizer_state, s.host_optimizer_state);
  }
  const std::int64_t micro_rows = rows / c.data / c.micro_batches;
  // Each pipeline rank's chunks as it cuts them, with the segments gradient_checkpoint.type = "auto"
  // recomputes chosen as it chooses them (an error when there are none: the plan is refused).
  Model sharded = model;
  (void)shard_model(sharded, nn::SplitPart{0, plan.tensor}, plan.rows_over_tensor());
  std::vector<std::vector<strategy::Chunk<Pass>>> stages;
  for (int s = 0; s < plan.pipeline; ++s) stages.push_back(local_chunks<Pass>(sharded, plan, s));
  double slowest_chunk = 0, work = 0;  // one micro-batch's chunk at full speed; every rank's seconds a step
  double slowest_talk = 0;             // one micro-batch's split-group all-reduces, the most of any chunk
  std::int64_t sends = 0;              // boundary bytes per row, the largest
  // Uneven devices (cluster.rank_speeds): stage s's time over the probe's is the most, over its
  // replicas, of the replica's share of the rows over its slowest rank's speed; `busy` the sum.
  const auto lanes = detail::stage_lanes(plan, base.rank_speeds, cluster.ranks, rows, c.micro_batches);
  const double speed = cluster.speed > 0 ? cluster.speed : 1.0;
  for (int s = 0; s < plan.pipeline; ++s) {
    std::vector<std::int64_t> kept(static_cast<std::size_t>(plan.chunks)), transient(kept.size());
    double stage_macs = 0, stage_tensor_seconds = 0;
    std::int64_t stage_tensor_bytes = 0;
    const auto& lane = lanes[static_cast<std::size_t>(s)];
    const auto ids = plan.chunks_of(s);
    for (std::size_t j = 0; j < ids.size(); ++j) {
      const int id = ids[j];
      const auto& chunk = stages[static_cast<std::size_t>(s)][j];
      const auto& units = chunk.units();
      const bool last = id + 1 == plan.chunks;
      // The chunk's pieces in forward order, as the probe measured their units: the segments it
      // recomputes or not (one piece a unit without recompute), and the loss on the last chunk.
      // A unit as the probe measured it (as a split rank, for a split model: its time is this
      // rank's), the share of its multiply-adds this rank does (its parameters': a split layer's
      // GEMMs are as split as its weights), and its split group's traffic.
      struct Part {
        const UnitProfile* profile = nullptr;
        double macs = 1;
        strategy::TensorTraffic traffic = {};
      };
      struct Piece {
        std::vector<Part> units;
        bool recomputed = false;
        std::int64_t input = 0;  // bytes per row of the piece's input (what a recomputed piece keeps)
      };
      std::vector<Part> parts;
      for (const auto& u : units) {  // the profile must be this model's: each unit as large
        std::int64_t params = 0, local = 0;
        u.parameters(u.layer, [&](nn::Parameter& q) {
          params += q.global_shape().numel();
          local += q.shape.numel();
        });
        const auto& up = prof.unit(u.name);
        EPL_CHECK(params == up.parameters, "the profile was measured on another model: its unit ", u.name, " has ", up.parameters,
                  " parameters, this model's ", params, "; profile this model (plan::profile)");
        parts.push_back({&up, params > 0 ? static_cast<double>(local) / static_cast<double>(params) : 1.0, u.traffic});
      }
      std::vector<Piece> pieces;
      // a piece's input per row: the unit before's output; a chunk's first, what it receives from the
      // chunk before (the first chunk's is the batch, the caller's)
      auto input_of = [&](std::size_t u) -> std::int64_t {
        if (u > 0) return prof.unit(units[u - 1].name).output_bytes;
        for (std::size_t i = 1; id > 0 && !units.empty() && i < prof.units.size(); ++i)
          if (prof.units[i].name == units[0].name) return prof.units[i - 1].output_bytes;
        return 0;
      };
      if (chunk.segments().empty()) {
        for (std::size_t u = 0; u < units.size(); ++u) pieces.push_back({{parts[u]}, false, input_of(u)});
      } else {
        for (const auto& seg : chunk.segments()) {
          Piece piece{{}, seg.recompute, input_of(seg.begin)};
          for (std::size_t u = seg.begin; u < seg.end; ++u) piece.units.push_back(parts[u]);
          pieces.push_back(std::move(piece));
        }
      }
      if (last) pieces.push_back({{Part{&prof.units.back()}}, false, 0});
      else if (!units.empty()) sends = std::max(sends, prof.unit(units.back().name).output_bytes);
      // kept from forward to backward; in backward, the peak over what is left
      std::int64_t k = 0, above = 0, freed = 0;
      double sec = 0, macs = 0, talk = 0;
      std::int64_t talked = 0;
      for (const auto& piece : pieces)
        for (const auto& part : piece.units) {
          const auto* up = part.profile;
          const double again = piece.recomputed ? 2 : 1;
          k += piece.recomputed ? 0 : up->activation_bytes;
          sec += (up->forward_seconds * again + up->backward_seconds) * static_cast<double>(micro_rows) +
                 up->fixed_seconds * (piece.recomputed ? 1.5 : 1.0);
          macs += part.macs * up->macs_per_token * (1 + again + 1);
          if (plan.tensor > 1 && part.traffic.collectives > 0) {  // ring all-reduces of f32 activations, on the path
            const std::int64_t bytes = part.traffic.elements * prof.tokens_per_row * micro_rows * 4;
            talked += bytes;
            talk += cluster.tensor.all_reduces(plan.tensor, part.traffic.collectives, static_cast<double>(bytes));
          }
        }
      for (const auto& piece : pieces) k += piece.recomputed ? piece.input : 0;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        // a recomputed piece's activations come back at its backward, over what is left of the rest
        std::int64_t back = 0, inner = 0, inner_freed = 0;
        for (const auto& part : it->units) back += part.profile->activation_bytes;
        for (auto u = it->units.rbegin(); u != it->units.rend(); ++u) {
          inner = std::max(inner, u->profile->backward_bytes - inner_freed);
          inner_freed += u->profile->activation_bytes;
        }
        above = std::max(above, (it->recomputed ? back : 0) + inner - freed);
        freed += it->recomputed ? it->input : back;
      }
      kept[static_cast<std::size_t>(id)] = k * micro_rows;
      transient[static_cast<std::size_t>(id)] = above * micro_rows;
      slowest_chunk = std::max(slowest_chunk, sec * lane.slowest);
      slowest_talk = std::max(slowest_talk, talk);  // the links do not scale with the speed
      work += sec * c.micro_batches * lane.busy * plan.tensor;
      stage_macs += macs;
      stage_tensor_bytes += talked * c.micro_batches;
      stage_tensor_seconds += talk * c.micro_batches;
    }
    e.tensor_bytes = std::max(e.tensor_bytes, stage_tensor_bytes);
    e.tensor_seconds = std::max(e.tensor_seconds, stage_tensor_seconds);
    e.activations = std::max(e.activations, detail::activation_peak(plan.actions(s), kept, transient));
    e.flops = std::max(e.flops, 2.0 * stage_macs * static_cast<double>(prof.tokens_per_row * micro_rows * c.micro_batches));
  }
  const int v = plan.virtual_stages(), p = plan.pipeline, m = c.micro_batches;
  // The critical path: the schedule's chunk-passes of the slowest chunk (v m + p - 1; fewer for a
  // zero-bubble schedule); ranks that share cores (Cluster::cores) also wait for every rank's work
  // to get its turn on them.
  const double path = p == 1 ? m : plan.schedule->path(m, v, p);
  e.bubble = p == 1 ? 0.0 : 1.0 - v * m / path;
  e.compute_seconds = slowest_chunk * path / speed;
  if (cluster.cores > 0) e.compute_seconds = std::max(e.compute_seconds, work / speed / cluster.cores);
  // a split group's all-reduces hold every rank of it at each one: on the path, cores shared or not
  e.compute_seconds += slowest_talk * path;
  if (p > 1) {
    const double per = static_cast<double>(sends * micro_rows);
    e.pipeline_bytes = 2 * m * v * sends * micro_rows;
    e.pipeline_seconds = 2.0 * path * cluster.pipeline.seconds(per);
  }
  const int n = c.data;
  if (n > 1) {
    // A ring moves (n - 1) / n of the gradients G per pass, as many passes as the ZeRO stage makes
    const std::int64_t held = e.state.gradients + e.state.host_gradients;
    const double whole = static_cast<double>(plan.policies.zero_stage >= 2 ? held * n : held);
    const int zero = plan.policies.zero_stage;
    const int passes = detail::zero_ring_passes(zero, m);
    const double moved = static_cast<double>(n - 1) / n * whole * passes;
    e.data_bytes = static_cast<std::int64_t>(moved);
    const int messages = (n - 1) * plan.policies.max_splits * passes;
    e.data_seconds = cluster.data.alpha * messages + moved / cluster.data.beta;
  }
  // The reduction overlaps backward but for its last bucket.
  const double exposed = std::max(e.data_seconds - 0.6 * e.compute_seconds, e.data_seconds / plan.policies.max_splits);
  // Offload: each step moves the rank's shards of the parameters and gradients between the host and the device.
  if (plan.policies.offload) e.host_seconds = cluster.host.seconds(static_cast<double>(e.state.host_parameters + e.state.host_gradients));
  e.seconds = e.compute_seconds + e.pipeline_seconds + exposed + e.host_seconds;
  EPL_CHECK(std::isfinite(e.seconds), "plan::estimate: candidate ", c.str(), " comes to a step time that is not finite: the "
            "profile's times, the cluster's speed or rank speeds are out of proportion; measure them again");
  return e;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
