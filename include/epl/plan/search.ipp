#pragma once
/// \file
/// \brief The model-free bodies of plan::search (its loop over the combinations), shortlist, merge
/// and report (the header declares them): included by that header in a header-only program, or
/// compiled once into epl::precompiled (core/linked.hpp).
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "epl/plan/search.hpp"

namespace epl {
inline namespace v0 {
namespace plan {

namespace detail {
EPL_LINKED SearchResult search_units(const Profile& prof, const Cluster& cluster, std::int64_t rows, int slots, const SearchOptions& o,
                                     int t, policy::Choice most, const std::vector<PricedUnit>& units,
                                     const std::function<Estimate(const Combination&)>& estimate_one) {
  detail::check_cluster(cluster, "plan::search");
  EPL_CHECK(cluster.ranks % t == 0, "plan::search: a cluster of ", cluster.ranks, " ranks cannot hold the model's epl::Split<", t,
            ", ...> parts; use a multiple of ", t, " ranks");
  EPL_CHECK(cluster.ranks >= 1, "plan::search: a cluster of ", cluster.ranks, " ranks; it needs at least 1");
  EPL_CHECK(rows >= 1, "plan::search: a global batch of ", rows, " rows; it needs at least 1");
  // the key's own range, said once before the combinations (each one's checks would refuse it)
  policy::home::Communication::check_splits(o.base.policies.max_splits,
                                            "plan::search: SearchOptions::base.policies.max_splits (communication.max_splits)");
  EPL_CHECK(slots >= 0 && slots <= kMostStateSlots, "plan::search: ", slots, " optimizer state slots per element; give the "
            "optimizer's kStateSlots (0 to ", kMostStateSlots, ")");
  EPL_CHECK(!o.micro_batches.empty() && std::all_of(o.micro_batches.begin(), o.micro_batches.end(),
                                                    [](int m) { return m >= 1 && m <= kMostMicroBatches; }),
            "plan::search: SearchOptions::micro_batches must list one or more counts from 1 to 65536");
  EPL_CHECK(rows <= (std::int64_t{1} << 50), "plan::search: a global batch of ", rows, " rows; at most 2^50");
  EPL_CHECK(!prof.units.empty(), "plan::search: the profile is empty; measure one with plan::profile");
  EPL_CHECK(o.base.rank_speeds.empty() || static_cast<int>(o.base.rank_speeds.size()) == cluster.ranks, "plan::search: cluster.rank_speeds "
            "(SearchOptions::base.rank_speeds) gives ", o.base.rank_speeds.size(), " speeds for a cluster of ", cluster.ranks,
            " ranks; give one per rank");
  EPL_CHECK(o.budget >= 0 && cluster.bytes_per_rank > 0, "plan::search: a budget of ", o.budget, " bytes and ", cluster.bytes_per_rank,
            " bytes per rank; give positive byte counts (a budget of 0: the cluster's)");
  // each profile's GEMMs as the plans it prices run them (a stranger gave the f32 profile as the AMP one)
  EPL_CHECK(prof.matmul == DType::kF32, "plan::search: the profile was measured with ", name_of(prof.matmul),
            " GEMMs; give the f32 one (plan::profile's default) first, and the AMP one as SearchOptions::amp_profile");
  EPL_CHECK(!o.amp_profile || o.amp_profile->matmul != DType::kF32, "plan::search: SearchOptions::amp_profile was measured with f32 "
            "GEMMs; measure it with AMP's (plan::profile(..., matmul = DType::kBF16 or kF16, as the compiled epl::Amp))");
  const std::size_t unit_count = units.size();  // a cut into more chunks than units is not tried (plan::make refuses it)
  // the profile must be this model's: as many units (and the loss), each as large
  EPL_CHECK(prof.units.size() == units.size() + 1, "the profile was measured on another model: it has ", prof.units.size() - 1,
            " units, this model ", units.size(), "; profile this model (plan::profile)");
  for (const auto& u : units) {
    const auto& up = prof.unit(u.name);
    EPL_CHECK(u.parameters == up.parameters, "the profile was measured on another model: its unit ", u.name, " has ", up.parameters,
              " parameters, this model's ", u.parameters, "; profile this model (plan::profile)");
  }
  const std::int64_t budget = o.budget > 0 ? std::min(o.budget, cluster.bytes_per_rank) : cluster.bytes_per_rank;
  SearchResult r;
  const Estimate* smallest = nullptr;
  std::string first_refusal;  // what the plan said of the first it refused
  std::vector<Estimate> over;  // what did not fit, to say by how much
  over.reserve(1024);
  // the loop static_search shares; a declared Pipeline's depth and a cut's units are plan::make's to
  // check (a declared model also runs on fewer ranks, several of its stages each)
  most.recompute = o.recompute;
  most.amp = most.amp && o.amp_profile;  // priced from the AMP profile
  r.tried = for_each_combination({.ranks = cluster.ranks, .tensor = t, .units = unit_count, .rows = rows, .row_multiple = prof.row_multiple,
                                  .micro_batches = o.micro_batches.data(), .micro_batch_counts = o.micro_batches.size(),
                                  .pipelines = o.pipelines, .policies = most},
                                 [&](const Combination& combination) {
                                   try {
                                     Estimate e = estimate_one(combination);
                                     if (e.device_bytes() <= budget) {
                                       r.plans.push_back(std::move(e));
                                     } else {
                                       ++r.too_big;
                                       over.push_back(std::move(e));
                                     }
                                   } catch (const Error& err) {
                                     ++r.refused;  // the plan's checks refuse it: never a choice
                                     if (first_refusal.empty()) first_refusal = err.what();
                                     r.note_refusal(err.detail());
                                   }
                                 });
  for (const auto& e : over)
    if (!smallest || e.device_bytes() < smallest->device_bytes()) smallest = &e;
  EPL_CHECK(r.tried > 0, "plan::search: no combination to try: a global batch of ", rows, rows == 1 ? " row" : " rows", " divides into none of the ",
            "data-parallel degrees (", cluster.ranks, " ranks over the pipeline stages and split degree ", t, ") times SearchOptions::",
            "micro_batches' counts (", [&] {
              std::string counts;
              for (int m : o.micro_batches) counts += (counts.empty() ? "" : ", ") + std::to_string(m);
              return counts;
            }(), ")",
            prof.row_multiple > 1 ? " in micro-batches of a multiple of " + std::to_string(prof.row_multiple) +
                                        " rows (the split MoE's tokens divide among its ranks: Profile::row_multiple)"
                                  : std::string(),
            "; use a batch that is a multiple of a data-parallel degree (the ranks over the split degree and the pipeline stages, "
            "1 with as many stages as that allows)",
            prof.row_multiple > 1 ? " times " + std::to_string(prof.row_multiple) : std::string(), " times one of the counts",
            std::find(o.micro_batches.begin(), o.micro_batches.end(), 1) == o.micro_batches.end()
                ? " (the counts hold no 1: add it to try one micro-batch a step)"
                : std::string());
  EPL_CHECK(r.refused < r.tried, "plan::search: the plan's checks refused every one of the ", r.tried, " combinations; the first: ",
            first_refusal);
  EPL_CHECK(!r.plans.empty(), "no plan of the model fits ", budget, " bytes per rank on ", cluster.ranks, " ranks (", r.tried,
            " tried, ", r.refused, " refused by the plan's checks)",
            smallest ? "; the smallest, " + smallest->candidate.str() + ", needs " + std::to_string(smallest->device_bytes()) +
                           " bytes, " + std::to_string(smallest->device_bytes() - budget) + " more, its largest part the " +
                           smallest->biggest() + ": add ranks or memory" + [&] {
                             // the policies that shrink it which the program did not compile (those it did were tried)
                             std::string more;
                             const auto add = [&](const char* p) { more += (more.empty() ? "" : ", ") + std::string(p); };
                             if (most.zero < 3) add(most.zero == 0 ? "epl::Zero<k>" : "a higher epl::Zero<k> stage");
                             if (!most.offload) add("epl::Offload");
                             if (!most.recompute) add("gradient checkpointing");
                             return more.empty() ? std::string(" (every policy that shrinks it was tried: ZeRO 3, offload, recompute)")
                                                 : ", or a policy that shrinks it (" + more + ")";
                           }()
                     : std::string());
  std::stable_sort(r.plans.begin(), r.plans.end(), [](const Estimate& a, const Estimate& b) {
    return a.seconds < b.seconds || (a.seconds == b.seconds && a.device_bytes() < b.device_bytes());  // as fast: the smaller first
  });
  r.spread = std::max(prof.spread, o.amp_profile ? o.amp_profile->spread : 0.0);
  return r;
}
}  // namespace detail

EPL_LINKED std::vector<std::size_t> shortlist(const SearchResult& r, std::size_t k) {
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

EPL_LINKED SearchResult merge(std::vector<SearchResult> results) {
  SearchResult all;
  for (auto& r : results) {
    all.tried += r.tried;
    all.refused += r.refused;
    all.too_big += r.too_big;
    all.spread = std::max(all.spread, r.spread);
    for (auto& why : r.refusals) all.note_refusal(std::move(why));
    for (auto& e : r.plans) all.plans.push_back(std::move(e));
  }
  EPL_CHECK(!all.plans.empty(), "plan::merge: none of the ", results.size(), " searches found a plan");
  std::stable_sort(all.plans.begin(), all.plans.end(), [](const Estimate& a, const Estimate& b) {
    return a.seconds < b.seconds || (a.seconds == b.seconds && a.device_bytes() < b.device_bytes());  // as fast: the smaller first
  });
  return all;
}

EPL_LINKED std::string report(const SearchResult& r, std::size_t n, bool measured) {
  auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-34s %9s %9s %9s %9s %9s %9s %10s %7s\n", "plan (fastest first)", "params", "grads", "optim",
                "activ.", "in fl.", "MiB", "step ms", "bubble");
  out += line;
  for (std::size_t i = 0; i < std::min(n, r.plans.size()); ++i) {
    const auto& e = r.plans[i];
    std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %10.3f %6.1f%%\n", e.candidate.str().c_str(),
                  mib(e.state.parameters), mib(e.state.gradients), mib(e.state.optimizer_state), mib(e.activations),
                  mib(e.in_flight.total()), mib(e.device_bytes()), 1e3 * e.seconds, 100 * e.bubble);
    out += line;
  }
  const std::string held = r.held_out > 0 ? ", " + std::to_string(r.held_out) + " more fit but take other values of the keys given" : "";
  std::snprintf(line, sizeof line, "(%d combinations tried: %zu fit%s, %d over the budget, %d refused by the plan's checks)\n", r.tried,
                r.plans.size(), held.c_str(), r.too_big, r.refused);
  out += line;
  if (!r.ranked()) {
    std::snprintf(line, sizeof line, "the probe's runs disagreed by %.1f%%, more than the %.1f%% between the first two plans: the probe cannot rank them; %s\n",
                  100 * r.spread, 100 * (r.plans[1].seconds / r.plans[0].seconds - 1),
                  measured ? "the choice above is the measurements'"
                           : "measure them (auto_plan with AutoPlanOptions::measure above 1, or bench::combinations)");
    out += line;
  }
  return out;
}

}  // namespace plan
}  // namespace v0
}  // namespace epl
