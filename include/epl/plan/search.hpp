#pragma once
/// \file
/// \brief plan::search — every combination of data-parallel degree, pipeline stages,
/// micro-batches, schedule, ZeRO stage, offload and recompute that Model, its compiled policies
/// and a cluster allow, each predicted by plan::estimate; those that fit the memory budget,
/// fastest first. A combination the plan refuses is never returned. The tensor-parallel degree
/// is the model type's (its epl::Split parts): search each type and merge() the results to compare
/// degrees; estimate prices a split's all-reduces on Cluster::tensor.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "epl/plan/cost.hpp"
#include "epl/plan/fits.hpp"
#include "epl/plan/price.hpp"
#include "epl/reflect/type_name.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

/// \brief What search tries.
struct SearchOptions {
  std::vector<int> micro_batches = {1, 2, 4, 8};  ///< pipeline.num_micro_batch values
  bool pipelines = true;                          ///< cut into stages (auto.auto_parallel) as well as replicate
  bool recompute = true;                          ///< try gradient_checkpoint.type = "auto"
  std::int64_t budget = 0;                        ///< device bytes per rank (0: the cluster's)
  /// The profile measured with AMP's GEMMs (profile(..., matmul = the compiled epl::Amp's
  /// dtype)): amp.level = "O1" is tried with it when the policies compile AMP; null: not tried.
  const Profile* amp_profile = nullptr;
  PlanOptions base = {};                          ///< the other keys
};

/// \brief What search found: the fitting plans, fastest first, and how many it tried.
struct SearchResult {
  std::vector<Estimate> plans;
  int tried = 0, refused = 0, too_big = 0;
  /// The probe's spread (Profile::spread, the larger of the f32 and AMP probes'): how far its runs
  /// disagreed. Predicted times closer than it cannot be ranked from the probe alone.
  double spread = 0;
  /// \brief Whether the first two plans are predicted further apart than the probe's spread (one
  /// plan: yes). When not, measure them before choosing (auto_plan does; bench::combinations).
  [[nodiscard]] bool ranked() const noexcept {
    return plans.size() < 2 || plans[1].seconds > plans[0].seconds * (1 + spread);
  }
  [[nodiscard]] const Estimate& best() const {
    EPL_CHECK(!plans.empty(), "plan::search found no plan");
    return plans.front();
  }
};

/// \brief Every valid combination for Model (a copy of `model`, with Policy's compiled policies)
/// on `cluster`, training `rows` rows a step with an optimizer of `slots` state values per element,
/// from its profile. Fails, saying by how much, when none fits the budget.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
SearchResult search(const Model& model, const Profile& prof, const Cluster& cluster, std::int64_t rows, int slots,
                    const SearchOptions& o = {}) {
  constexpr int t = tensor_degree_v<Model>;
  constexpr auto c = policy::compiled<Policy>(false);
  detail::check_cluster(cluster, "plan::search");
  EPL_CHECK(cluster.ranks % t == 0, "plan::search: a cluster of ", cluster.ranks, " ranks cannot hold the model's epl::Split<", t,
            ", ...> parts; use a multiple of ", t, " ranks");
  EPL_CHECK(cluster.ranks >= 1, "plan::search: a cluster of ", cluster.ranks, " ranks; it needs at least 1");
  EPL_CHECK(rows >= 1, "plan::search: a global batch of ", rows, " rows; it needs at least 1");
  EPL_CHECK(slots >= 0, "plan::search: ", slots, " optimizer state slots per element; give the optimizer's kStateSlots (0 or more)");
  EPL_CHECK(!o.micro_batches.empty() && std::all_of(o.micro_batches.begin(), o.micro_batches.end(),
                                                    [](int m) { return m >= 1 && m <= detail::kMostMicroBatches; }),
            "plan::search: SearchOptions::micro_batches must list one or more counts from 1 to 65536");
  EPL_CHECK(rows <= (std::int64_t{1} << 50), "plan::search: a global batch of ", rows, " rows; at most 2^50");
  EPL_CHECK(!prof.units.empty(), "plan::search: the profile is empty; measure one with plan::profile");
  EPL_CHECK(o.base.rank_speeds.empty() || static_cast<int>(o.base.rank_speeds.size()) == cluster.ranks, "plan::search: cluster.rank_speeds "
            "(SearchOptions::base.rank_speeds) gives ", o.base.rank_speeds.size(), " speeds for a cluster of ", cluster.ranks,
            " ranks; give one per rank");
  EPL_CHECK(o.budget >= 0 && cluster.bytes_per_rank > 0, "plan::search: a budget of ", o.budget, " bytes and ", cluster.bytes_per_rank,
            " bytes per rank; give positive byte counts (a budget of 0: the cluster's)");
  std::size_t unit_count = 0;  // a cut into more chunks than units is not tried (plan::make refuses it)
  {  // the profile must be this model's: as many units (and the loss)
    Model copy = model;
    using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;  // estimate's: no other instantiation
    std::vector<strategy::Unit<Pass>> units;
    strategy::flatten<Pass>(copy, units);
    EPL_CHECK(prof.units.size() == units.size() + 1, "the profile was measured on another model: it has ", prof.units.size() - 1,
              " units, this model ", units.size(), "; profile this model (plan::profile)");
    unit_count = units.size();
    for (const auto& u : units) {
      std::int64_t params = 0;
      u.parameters(u.layer, [&](nn::Parameter& q) { params += q.global_shape().numel(); });
      const auto& up = prof.unit(u.name);
      EPL_CHECK(params == up.parameters, "the profile was measured on another model: its unit ", u.name, " has ", up.parameters,
                " parameters, this model's ", params, "; profile this model (plan::profile)");
    }
  }
  const std::int64_t budget = o.budget > 0 ? std::min(o.budget, cluster.bytes_per_rank) : cluster.bytes_per_rank;
  SearchResult r;
  const Estimate* smallest = nullptr;
  std::string first_refusal;  // what the plan said of the first it refused
  std::vector<Estimate> over;  // what did not fit, to say by how much
  over.reserve(1024);
  // the loop static_search shares; a declared Pipeline's depth and a cut's units are plan::make's to
  // check (a declared model also runs on fewer ranks, several of its stages each)
  policy::Choice most = policy::reach(c);
  most.recompute = o.recompute;
  most.amp = most.amp && o.amp_profile;  // priced from the AMP profile
  r.tried = for_each_combination({.ranks = cluster.ranks, .tensor = t, .units = unit_count, .rows = rows, .micro_batches = o.micro_batches.data(),
                                  .micro_batch_counts = o.micro_batches.size(), .pipelines = o.pipelines, .policies = most},
                                 [&](const Combination& combination) {
                                   try {
                                     Estimate e = estimate<Model, Policy, D>(model, combination.policies.amp ? *o.amp_profile : prof,
                                                                             Candidate::of(combination, t), cluster, rows, slots, o.base);
                                     if (e.device_bytes() <= budget) {
                                       r.plans.push_back(std::move(e));
                                     } else {
                                       ++r.too_big;
                                       over.push_back(std::move(e));
                                     }
                                   } catch (const Error& err) {
                                     ++r.refused;  // the plan's checks refuse it: never a choice
                                     if (first_refusal.empty()) first_refusal = err.what();
                                   }
                                 });
  for (const auto& e : over)
    if (!smallest || e.device_bytes() < smallest->device_bytes()) smallest = &e;
  EPL_CHECK(r.tried > 0, "plan::search: no combination to try: a global batch of ", rows, " rows divides into none of the ",
            "data-parallel degrees x micro-batch counts (", cluster.ranks, " ranks over the pipeline stages and split degree ", t,
            "); use a batch that is a multiple of the ranks");
  EPL_CHECK(r.refused < r.tried, "plan::search: the plan's checks refused every one of the ", r.tried, " combinations; the first: ",
            first_refusal);
  EPL_CHECK(!r.plans.empty(), "no plan of the model fits ", budget, " bytes per rank on ", cluster.ranks, " ranks (", r.tried,
            " tried, ", r.refused, " refused by the plan's checks)",
            smallest ? "; the smallest, " + smallest->candidate.str() + ", needs " + std::to_string(smallest->device_bytes()) +
                           " bytes, " + std::to_string(smallest->device_bytes() - budget) + " more, its largest part the " +
                           smallest->biggest() + ": add ranks or memory, or the policy that shrinks it (epl::Zero<k>, "
                           "epl::Offload, gradient_checkpoint)"
                     : std::string());
  std::stable_sort(r.plans.begin(), r.plans.end(), [](const Estimate& a, const Estimate& b) { return a.seconds < b.seconds; });
  r.spread = std::max(prof.spread, o.amp_profile ? o.amp_profile->spread : 0.0);
  return r;
}

/// \brief The plans worth measuring before choosing, at most k of r.plans (fastest predicted
/// first): the fastest of each layout (data-parallel degree, pipeline stages, split degree) in the
/// order of their best; then the fastest of each other shape (a layout's schedule and micro-batch
/// count), also in order; then the next fastest of any. A cost model's largest errors are between
/// layouts (a tiny model's pipeline against its replicas) and between a pipeline's schedules and
/// micro-batch counts (what a step's fixed costs and a busy machine's scheduling weigh most), not
/// between the memory policies of one shape (ZeRO, recompute, offload, AMP), which only add work:
/// so the measured few span the shapes rather than being one shape's siblings.
inline std::vector<std::size_t> shortlist(const SearchResult& r, std::size_t k) {
  std::vector<std::size_t> out;
  auto layout = [&](std::size_t i) {
    const auto& c = r.plans[i].candidate;
    return std::tuple{c.data, c.pipeline, c.tensor};
  };
  auto shape = [&](std::size_t i) {
    const auto& c = r.plans[i].candidate;
    return std::tuple{c.data, c.pipeline, c.tensor, c.micro_batches, c.pipeline > 1 ? c.schedule : std::string(), c.virtual_stages};
  };
  auto take_each = [&](auto&& key) {  // the fastest of each key not yet listed, fastest first
    for (std::size_t i = 0; i < r.plans.size() && out.size() < k; ++i)
      if (std::find(out.begin(), out.end(), i) == out.end() &&
          std::none_of(out.begin(), out.end(), [&](std::size_t j) { return key(j) == key(i); }))
        out.push_back(i);
  };
  take_each(layout);
  take_each(shape);
  take_each([](std::size_t i) { return i; });
  std::sort(out.begin(), out.end());
  return out;
}

/// \brief Fails unless Twin (a model type whose layers state their costs, planned at compile time
/// by plan::fits and plan::static_search) describes `model`: the same parameters in all, and unit
/// by unit in model order (the units that hold parameters, as the partitioner cuts them). A twin
/// that has drifted from the model it stands for would plan another model; the error names the
/// first unit that differs.
template <class Twin, class Model, class D = device::Cpu>
void check_twin(const Model& model, const Twin& = Twin{}) {
  std::vector<std::int64_t> twin;  // the parameters its units state, in model order
  auto parameters = [&](const strategy::Cost& c, int, int) { twin.push_back(c.parameters); };
  detail::for_each_static_unit<Twin>(parameters);
  Model copy = model;
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policies<>, D>>;  // search's: no other instantiation
  std::vector<strategy::Unit<Pass>> units;
  strategy::flatten<Pass>(copy, units);
  std::vector<std::pair<std::string, std::int64_t>> real;  // the units that hold parameters
  std::int64_t real_total = 0, twin_total = 0;
  for (auto& u : units) {
    std::int64_t n = 0;
    u.parameters(u.layer, [&](nn::Parameter& q) { n += q.global_shape().numel(); });
    real_total += n;
    if (n > 0) real.emplace_back(u.name, n);
  }
  for (const auto n : twin) twin_total += n;
  std::erase(twin, 0);
  const auto twin_name = std::string(reflect::type_name<Twin>()), model_name = std::string(reflect::type_name<Model>());
  constexpr int stages_of_model = declared_stages_v<Model>, stages_of_twin = declared_stages_v<Twin>;
  EPL_CHECK(tensor_degree_v<Model> == tensor_degree_v<Twin> && stages_of_model == stages_of_twin, "plan::check_twin: the twin ",
            twin_name, " is split ", tensor_degree_v<Twin>, " way", tensor_degree_v<Twin> == 1 ? "" : "s", " over ", stages_of_twin,
            " pipeline stage", stages_of_twin == 1 ? "" : "s", ", but the model ", model_name, " ", tensor_degree_v<Model>, " way",
            tensor_degree_v<Model> == 1 ? "" : "s", " over ", stages_of_model, "; give the twin the model's epl::Split and "
            "epl::Pipeline (they decide the plans it is searched for)");
  EPL_CHECK(twin_total == real_total, "plan::check_twin: the twin ", twin_name, " states ", twin_total, " parameters, but the model ",
            model_name, " has ", real_total, "; make its layers' static_cost parameters the model's (nn::parameter_count counts them)");
  EPL_CHECK(twin.size() == real.size(), "plan::check_twin: the twin ", twin_name, " has ", twin.size(), " units that hold parameters, but the "
            "model ", model_name, " has ", real.size(), " (as the partitioner cuts it: each field of a sequence, each Residual, "
            "Recompute or leaf a unit); give the twin one cost-bearing layer for each");
  for (std::size_t i = 0; i < twin.size(); ++i)
    EPL_CHECK(twin[i] == real[i].second, "plan::check_twin: unit ", i, " of the model ", model_name, " (", real[i].first, ") has ",
              real[i].second, " parameters, but the twin's unit ", i, " states ", twin[i], "; fix that layer's static_cost");
}

/// \brief The plans of several searches (one a model type: its epl::Split degree is its type's,
/// so comparing tensor-parallel degrees is searching each type), fastest first; the counts added.
/// An error when none found a plan.
inline SearchResult merge(std::vector<SearchResult> results) {
  SearchResult all;
  for (auto& r : results) {
    all.tried += r.tried;
    all.refused += r.refused;
    all.too_big += r.too_big;
    all.spread = std::max(all.spread, r.spread);
    for (auto& e : r.plans) all.plans.push_back(std::move(e));
  }
  EPL_CHECK(!all.plans.empty(), "plan::merge: none of the ", results.size(), " searches found a plan");
  std::stable_sort(all.plans.begin(), all.plans.end(), [](const Estimate& a, const Estimate& b) { return a.seconds < b.seconds; });
  return all;
}

/// \brief The top `n` plans as a table: the combination, predicted bytes by part, step time and bubble.
inline std::string report(const SearchResult& r, std::size_t n = 5) {
  auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-34s %9s %9s %9s %9s %9s %10s %7s\n", "plan (fastest first)", "params", "grads", "optim",
                "activ.", "MiB", "step ms", "bubble");
  out += line;
  for (std::size_t i = 0; i < std::min(n, r.plans.size()); ++i) {
    const auto& e = r.plans[i];
    std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %9.2f %9.2f %9.2f %10.3f %6.1f%%\n", e.candidate.str().c_str(),
                  mib(e.state.parameters), mib(e.state.gradients), mib(e.state.optimizer_state), mib(e.activations),
                  mib(e.device_bytes()), 1e3 * e.seconds, 100 * e.bubble);
    out += line;
  }
  std::snprintf(line, sizeof line, "(%d combinations tried: %zu fit, %d over the budget, %d refused by the plan's checks)\n", r.tried,
                r.plans.size(), r.too_big, r.refused);
  out += line;
  if (!r.ranked()) {
    std::snprintf(line, sizeof line,
                  "the probe's runs disagreed by %.1f%%, more than the %.1f%% between the first two plans: the probe cannot rank them; "
                  "measure them (auto_plan with AutoPlanOptions::measure above 1, or bench::combinations)\n",
                  100 * r.spread, 100 * (r.plans[1].seconds / r.plans[0].seconds - 1));
    out += line;
  }
  return out;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
