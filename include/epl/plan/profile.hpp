#pragma once
/// \file
/// \brief plan::profile — the probe: one short run of forward, loss and backward of a model's
/// sequential units on one device, repeated and interleaved, giving each unit's bytes and times
/// (plan::Profile), and the file that keeps them between runs.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "epl/core/files.hpp"
#include "epl/core/linked.hpp"
#include "epl/device/cpu/cpu.hpp"
#include "epl/device/device.hpp"
#include "epl/nn/loss.hpp"
#include "epl/param/arena.hpp"
#include "epl/plan/calibration_file.hpp"
#include "epl/plan/plan.hpp"
#include "epl/plan/shard.hpp"
#include "epl/policy/gradient_sync.hpp"
#include "epl/strategy/step_groups.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

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
  /// Held from its backward (B) to its weight pass (W) under a schedule that splits them
  /// (ZeroBubble), per row, over what a whole backward leaves: the saved inputs and output
  /// gradients its weight gradients are made from.
  std::int64_t weight_bytes = 0;
  std::int64_t split_backward_bytes = 0;  ///< allocated for a while during its B pass, per row
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
  /// A micro-batch's rows must be a multiple of this: a split MoE's tokens divide among its ranks
  /// (nn::MoE::token_multiple), and a row gives it the tokens the probe saw (one row of [rows, dim]
  /// is one token: 2 rows for 2 ranks; a row of [rows, 8, dim] is 8: any rows). The searches offer
  /// no plan whose micro-batches break it.
  std::int64_t row_multiple = 1;
  /// The GEMMs' operand type it was measured with (plan::profile's `matmul`): f32, or AMP's bf16 or
  /// f16 for SearchOptions::amp_profile, which plan::search checks (a stranger passed the f32 one).
  DType matmul = DType::kF32;
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

/// \brief One run's seconds of each unit, its forward's and its backward's (the loss last).
using RunTimes = std::vector<std::pair<double, double>>;

/// \brief Sets p's units' seconds from the probe's runs of the whole batch (`alls`, p.rows rows)
/// and of its first `small` rows (`ones`; empty when there was one size only), and p.spread from
/// the whole batch's steps: each unit keeps its fastest of each size, and its times are affine in
/// the rows, a fixed part per call (what a small micro-batch pays) and a part per row. A function
/// of the figures alone, so a test gives it the runs of a bursty machine without a clock.
inline void time_units(Profile& p, const std::vector<RunTimes>& alls, const std::vector<RunTimes>& ones, std::int64_t small) {
  EPL_CHECK(!alls.empty(), "the probe made no run: give it 1 or more repeats");
  const bool two_sizes = !ones.empty();
  auto fastest = [&](const std::vector<RunTimes>& runs) {
    RunTimes f = runs.front();
    for (const auto& run : runs)
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = {std::min(f[i].first, run[i].first), std::min(f[i].second, run[i].second)};
    return f;
  };
  const RunTimes all = fastest(alls), one = two_sizes ? fastest(ones) : all;
  std::vector<double> steps;
  for (const auto& run : alls) {
    double total = 0;
    for (const auto& [f, b] : run) total += f + b;
    steps.push_back(total);
  }
  std::sort(steps.begin(), steps.end());
  p.spread = steps.front() > 0 ? steps[steps.size() / 2] / steps.front() - 1 : 0;
  const double extra = static_cast<double>(std::max<std::int64_t>(p.rows - small, 1)), few = static_cast<double>(small);
  for (std::size_t i = 0; i < p.units.size(); ++i) {
    auto& u = p.units[i];
    if (!two_sizes) {  // one size only: all per row
      u.forward_seconds = all[i].first / static_cast<double>(p.rows);
      u.backward_seconds = all[i].second / static_cast<double>(p.rows);
      continue;
    }
    u.forward_seconds = std::max(0.0, (all[i].first - one[i].first) / extra);
    u.backward_seconds = std::max(0.0, (all[i].second - one[i].second) / extra);
    u.fixed_seconds = std::max(0.0, one[i].first + one[i].second - few * (u.forward_seconds + u.backward_seconds));
  }
}

// profile's walk of the probe's model after its runs, whose last was of all `rows` rows: the rows
// a micro-batch must be a multiple of, for each layer whose tokens divide among a split group (a
// type of its own, so each node type's walk is compiled once).
struct RowMultiple {
  std::int64_t rows = 1, multiple = 1;
  template <class N>
  void operator()(std::string_view, N& node) {
    if constexpr (requires { node.token_multiple(); node.last_routing().tokens; }) {
      const std::int64_t parts = node.token_multiple(), per_row = node.last_routing().tokens / rows;
      if (parts > 1 && per_row > 0) multiple = std::lcm(multiple, parts / std::gcd(per_row, parts));
    }
  }
};

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

namespace detail {
// The hooks of the probe's passes: none for a stateless type (nn::NoHooks); a gradient sync
// (policy::AllReduceSync, policy::ZeroSync at stage 0) over no parameters, which reduces and
// gathers nothing, so the probe runs the Trainer's own pass type and shares its layers' code.
template <class Hooks, class D>
std::unique_ptr<Hooks> idle_hooks(const D& d, comm::Communicator& group, param::Arena& none) {
  if constexpr (std::is_empty_v<Hooks> && std::is_default_constructible_v<Hooks>) return nullptr;
  else return std::make_unique<Hooks>(d, group, nullptr, none, policy::SyncOptions{});
}

/// \brief profile's measurements of a model's `units` (flattened, drawn) and its loss, a rank of a
/// split group of `parts` (`group` the stand-in): compiled once for the CPU under epl::precompiled.
template <class Pass, class Loss, class D>
Profile profile_units(const std::vector<strategy::Unit<Pass>>& units, Loss& loss, const D& d, comm::Communicator& group, int parts,
                      const Tensor& inputs, const Tensor& targets, int repeats, DType matmul) {
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
  param::Arena none;  // the idle sync's: no parameters, so no bucket and no shard
  auto hooks = idle_hooks<typename Pass::hooks_type>(d, group, none);
  // One run of forward, loss and backward of the rows of x: each unit's forward and backward, in
  // seconds per call; with `record`, the bytes. `left[split]` gets what each unit's backward left
  // allocated (per row), a whole backward's (split false) or a B pass's (true, its W deferred).
  std::array<std::vector<std::int64_t>, 2> left;
  std::vector<std::int64_t> split_peaks(p.units.size());
  auto measure = [&](const Tensor& x, const Tensor& y, bool record, bool split = false) {
    RunTimes t(p.units.size());
    const auto rows = x.dim(0);
    Pass pass(d, nn::PassOptions{.training = true, .seed = 1, .recompute = nn::RecomputeMode::kNone, .matmul = matmul}, hooks.get(),
              nn::Groups{.tensor = parts > 1 ? &group : nullptr});
    typename Pass::Deferred weight_pass;
    if (split) pass.defer_into(&weight_pass);
    left[split].assign(p.units.size(), 0);
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
      if (split) split_peaks[i] = (memory_stats(id).peak_of(MemoryCategory::kActivations) - before) / rows;
      left[split][i] = (detail::activations_now(id) - before) / rows;
    }
    g = {};
    if (split) pass.run_deferred(weight_pass);
    return t;
  };
  // The whole batch and its first rows in turns, `repeats` times, so a burst of load on the machine
  // falls on both sizes and on every unit alike; each unit keeps its fastest of each size. The
  // small size is one row, or a split group's ranks' worth (an MoE's tokens must divide among
  // them: one row of [rows, dim] is one token, which 2 ranks cannot share; a stranger's finding).
  const std::int64_t small = std::max(1, parts);
  const bool two_sizes = p.rows > small;
  std::vector<RunTimes> alls, ones;
  for (int r = 0; r < repeats; ++r) {
    alls.push_back(measure(inputs, targets, r == 0));
    if (two_sizes) ones.push_back(measure(inputs.slice(0, small), targets.slice(0, small), false));
  }
  // what a split backward's B leaves for W, unit by unit, over what a whole backward leaves
  (void)measure(inputs, targets, false, true);
  for (std::size_t i = 0; i < units.size(); ++i) {
    p.units[i].weight_bytes = std::max<std::int64_t>(0, left[1][i] - left[0][i]);
    p.units[i].split_backward_bytes = split_peaks[i];
  }
  p.repeats = repeats;
  time_units(p, alls, ones, small);
  return p;
}
}  // namespace detail

/// \brief Measures model's units on device d with the batch (inputs, targets) of `rows` rows: each
/// unit's activation bytes (from the allocator's accounting) and its forward and backward times
/// (each the fastest of `repeats` runs, the whole batch's and its first row's, or a split model's
/// tensor degree of rows, interleaved; Profile::spread
/// says how far the runs disagreed), and its parameters; `matmul` bf16 or f16 times AMP's GEMMs. The model is copied and drawn once, whole,
/// on d (a model too large for one device is profiled on its parts by the caller). Run it on a
/// device whose account nothing else charges meanwhile (before starting thread ranks). The probe
/// runs the passes of a Trainer with `Policy` (their gradient sync idle), so a program that trains
/// that Trainer compiles the layers' forward and backward once for both.
template <class Model, class Loss = nn::SoftmaxCrossEntropy, class D, class Policy = Policies<>>
Profile profile(const Model& model, const D& d, const Tensor& inputs, const Tensor& targets, int repeats = 3,
                DType matmul = DType::kF32) {
  EPL_CHECK(inputs.defined() && inputs.rank() > 0 && inputs.dim(0) >= 2, "profile: the probe batch has ",
            inputs.defined() && inputs.rank() > 0 ? inputs.dim(0) : 0, inputs.defined() && inputs.rank() > 0 && inputs.dim(0) == 1 ? " row" : " rows",
            "; give it 2 or more (4 is what auto_plan uses): with fewer it cannot tell a unit's fixed cost a call from its cost a row, "
            "and every micro-batch count would be priced alike");
  EPL_CHECK(targets.defined() && targets.rank() > 0 && targets.dim(0) == inputs.dim(0), "profile: the probe batch has ",
            inputs.dim(0), " input rows but ", targets.defined() && targets.rank() > 0 ? targets.dim(0) : 0, " target rows");
  EPL_CHECK(repeats >= 1, "profile: repeats = ", repeats, " must be at least 1");
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;
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
  try {
    Profile p = detail::profile_units<Pass>(units, loss, d, group, parts, inputs, targets, repeats, matmul);
    p.matmul = matmul;
    if constexpr (parts > 1) {
      detail::RowMultiple walk{.rows = p.rows};
      nn::visit_nodes(copy, walk);
      p.row_multiple = walk.multiple;
    }
    return p;
  } catch (Error& e) {
    nn::name_layer(copy, e);  // the copy's layers sit at the model's paths
    throw;
  }
}

// A program linked with epl::precompiled takes the CPU's probe from that library, compiled once.
#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)
extern template Profile detail::profile_units(const std::vector<strategy::Unit<nn::Pass<device::Cpu, policy::AllReduceSync<device::Cpu>>>>&,
                                              nn::SoftmaxCrossEntropy&, const device::Cpu&, comm::Communicator&, int, const Tensor&,
                                              const Tensor&, int, DType);
extern template Profile detail::profile_units(const std::vector<strategy::Unit<nn::Pass<device::Cpu, policy::ZeroSync<device::Cpu>>>>&,
                                              nn::SoftmaxCrossEntropy&, const device::Cpu&, comm::Communicator&, int, const Tensor&,
                                              const Tensor&, int, DType);
#endif

/// \brief Writes a profile to `path` under `key` (what it was measured for: the model's shape,
/// the device), so a later run reads it back instead of measuring again (load_profile).
EPL_LINKED void save_profile(const Profile& p, const std::filesystem::path& path, const std::string& key);

/// \brief The profile save_profile wrote to `path` under `key`; nullopt when there is no file or it
/// was measured for another key. A file that is not a profile is an error naming it.
EPL_LINKED std::optional<Profile> load_profile(const std::filesystem::path& path, const std::string& key);

}  // namespace plan
}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/plan/profile.ipp"
#endif
