#pragma once
/// \file
/// \brief plan::search — every combination of data-parallel degree, pipeline stages,
/// micro-batches, schedule, ZeRO stage, offload and recompute that Model, its compiled policies
/// and a cluster allow, each predicted by plan::estimate; those that fit the memory budget,
/// fastest first. A combination the plan refuses is never returned. The tensor-parallel degree
/// is the model type's (its epl::Split parts): search each type and merge() the results to compare
/// degrees; estimate prices a split's all-reduces on Cluster::tensor.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "epl/core/linked.hpp"
#include "epl/nn/walk.hpp"
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
  /// Plans that fit but take other values of planner keys the run gave (auto_plan holds the run to
  /// them and leaves these out of `plans`); 0 from plan::search.
  int held_out = 0;
  /// What the plan's checks said of the combinations they refused, each reason once (at most 8):
  /// a key the program gives may rule out a policy (communication.fp16 every ZeRO 2 and 3 plan).
  std::vector<std::string> refusals;
  /// \brief Keeps `why` among refusals unless it is there or they are 8.
  void note_refusal(std::string why) {
    if (refusals.size() < 8 && std::find(refusals.begin(), refusals.end(), why) == refusals.end()) refusals.push_back(std::move(why));
  }
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

namespace detail {
// search's body, compiled once: the model enters as its flattened units (each with its parameters)
// and as `estimate_one`, which prices one combination of the loop; `t` is its split degree and
// `most` the policies its program compiled, as far as they reach.
EPL_LINKED SearchResult search_units(const Profile& prof, const Cluster& cluster, std::int64_t rows, int slots, const SearchOptions& o,
                                     int t, policy::Choice most, const std::vector<PricedUnit>& units,
                                     const std::function<Estimate(const Combination&)>& estimate_one);
}  // namespace detail

/// \brief Every valid combination for Model (a copy of `model`, with Policy's compiled policies)
/// on `cluster`, training `rows` rows a step with an optimizer of `slots` state values per element,
/// from its profile. Fails, saying by how much, when none fits the budget.
template <class Model, class Policy = Policies<>, class D = device::Cpu>
SearchResult search(const Model& model, const Profile& prof, const Cluster& cluster, std::int64_t rows, int slots,
                    const SearchOptions& o = {}) {
  constexpr int t = tensor_degree_v<Model>;
  Model copy = model;
  using Pass = nn::Pass<D, policy::gradient_sync_t<Policy, D>>;  // estimate's: no other instantiation
  std::vector<strategy::Unit<Pass>> flat;
  strategy::flatten<Pass>(copy, flat);
  std::vector<detail::PricedUnit> units;
  for (const auto& u : flat) units.push_back(detail::priced(u));
  return detail::search_units(prof, cluster, rows, slots, o, t, policy::reach(policy::compiled<Policy>(false)), units,
                              [&](const Combination& combination) {
                                return estimate<Model, Policy, D>(model, combination.policies.amp ? *o.amp_profile : prof,
                                                                  Candidate::of(combination, t), cluster, rows, slots, o.base);
                              });
}

/// \brief The plans worth measuring before choosing, at most k of r.plans (fastest predicted
/// first): the fastest of each layout (data-parallel degree, pipeline stages, split degree) in the
/// order of their best; then the fastest of each other shape (a layout's schedule and micro-batch
/// count), also in order; then the next fastest of any. A cost model's largest errors are between
/// layouts (a tiny model's pipeline against its replicas) and between a pipeline's schedules and
/// micro-batch counts (what a step's fixed costs and a busy machine's scheduling weigh most), not
/// between the memory policies of one shape (ZeRO, recompute, offload, AMP), which only add work:
/// so the measured few span the shapes rather than being one shape's siblings.
EPL_LINKED std::vector<std::size_t> shortlist(const SearchResult& r, std::size_t k);

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
  std::map<const nn::Parameter*, std::string> paths;  // a unit is named by its first parameter's path (a.weight), as a checkpoint names it
  nn::visit_parameters(copy, [&](std::string_view path, nn::Parameter& q) { paths.emplace(&q, std::string(path)); });
  std::vector<std::pair<std::string, std::int64_t>> real;  // the units that hold parameters
  std::int64_t real_total = 0, twin_total = 0;
  for (auto& u : units) {
    std::int64_t n = 0;
    std::string first;
    u.parameters(u.layer, [&](nn::Parameter& q) {
      n += q.global_shape().numel();
      if (const auto it = paths.find(&q); first.empty() && it != paths.end()) first = it->second;
    });
    real_total += n;
    if (n > 0) real.emplace_back(first.empty() ? u.name : "the unit of " + first, n);
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
EPL_LINKED SearchResult merge(std::vector<SearchResult> results);

/// \brief The top `n` plans as a table: the combination, predicted bytes by part, step time and
/// bubble. Where the probe's spread cannot rank the first two it says so, and advises measuring
/// them unless `measured` (auto_plan's report, after it measured them).
EPL_LINKED std::string report(const SearchResult& r, std::size_t n = 5, bool measured = false);

}  // namespace plan
}  // namespace v0
}  // namespace epl

// The model-free bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/plan/search.ipp"
#endif
