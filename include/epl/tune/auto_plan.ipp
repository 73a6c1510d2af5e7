#pragma once
/// \file
/// \brief The model-free bodies of epl::auto_plan's steps and of measure_all_reduce (the header
/// declares them): included by that header in a header-only program, or compiled once into
/// epl::precompiled (core/linked.hpp).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "epl/tune/auto_plan.hpp"

namespace epl {
inline namespace v0 {

EPL_LINKED plan::Link measure_all_reduce(comm::Communicator& world) {
  const int n = world.size();
  if (n == 1) return {};
  auto median_seconds = [&](std::int64_t count) {
    std::vector<float> buf(static_cast<std::size_t>(count), 1.0f);
    std::vector<double> t;
    for (int i = 0; i < 9; ++i) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      world.all_reduce(comm::Buffer(buf.data(), count, DType::kF32), comm::Buffer(buf.data(), count, DType::kF32), comm::ReduceOp::kSum);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    double s = t[t.size() / 2];
    world.all_reduce(comm::Buffer(&s, 1, DType::kF64), comm::Buffer(&s, 1, DType::kF64), comm::ReduceOp::kMax);
    return s;
  };
  const std::int64_t small = 16, large = 1 << 20;
  const double ts = median_seconds(small), tl = median_seconds(large);
  const double moved = 2.0 * (n - 1) / n * 4.0 * static_cast<double>(large);
  plan::Link l;
  l.alpha = std::max(1e-7, ts / (2.0 * (n - 1)));
  l.beta = moved / std::max(1e-9, tl - 2.0 * (n - 1) * l.alpha);
  return l;
}

namespace detail {
// A candidate as kEncoded integers (the schedule by its place in strategy::kSchedules, then each
// policy axis's value), to broadcast.
inline constexpr int kEncoded = 5 + policy::kAxes;
inline void encode(const plan::Candidate& c, std::int64_t* out) {
  const auto schedule = static_cast<std::int64_t>(strategy::schedule_index(strategy::schedule_named(c.schedule)));
  const std::int64_t v[] = {c.data, c.pipeline, c.micro_batches, schedule, c.virtual_stages};
  std::copy(std::begin(v), std::end(v), out);
  policy::encode(c.policies, out + 5);
}
inline plan::Candidate decode(const std::int64_t* v, int tensor) {
  return {.data = static_cast<int>(v[0]), .pipeline = static_cast<int>(v[1]), .micro_batches = static_cast<int>(v[2]), .tensor = tensor,
          .schedule = std::string(strategy::schedule_at(static_cast<std::size_t>(v[3])).name), .virtual_stages = static_cast<int>(v[4]),
          .policies = policy::decode(v + 5)};
}
EPL_LINKED Batch tiled(const device::Cpu& cpu, const Batch& sample, std::int64_t rows) {
  auto tile = [&](const Tensor& t) {
    Shape shape = t.shape();
    shape[0] = rows;
    Tensor out = cpu.empty(shape, t.dtype());
    const std::size_t row = t.bytes() / static_cast<std::size_t>(t.dim(0));
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw()) + r * row, static_cast<const char*>(t.raw()) + (r % t.dim(0)) * row, row);
    return out;
  };
  return {tile(sample.inputs), tile(sample.targets)};
}

// The least and the largest of every rank's `value`: equal where the ranks agree.
inline std::pair<std::int64_t, std::int64_t> over_ranks(comm::Communicator& world, std::int64_t value) {
  std::int64_t low = value, high = value;
  world.all_reduce(comm::Buffer(&low, 1, DType::kI64), comm::Buffer(&low, 1, DType::kI64), comm::ReduceOp::kMin);
  world.all_reduce(comm::Buffer(&high, 1, DType::kI64), comm::Buffer(&high, 1, DType::kI64), comm::ReduceOp::kMax);
  return {low, high};
}

EPL_LINKED std::int64_t check_sample(Context& ctx, const Batch& sample, std::int64_t global_rows, const AutoPlanOptions& o) {
  auto& world = ctx.world();
  {  // other options on one rank failed later inside bench::combinations, naming its options or plans (stranger 35)
    RunFacts facts;
    facts.add_number("AutoPlanOptions::budget", static_cast<double>(o.budget));
    facts.add_number("AutoPlanOptions::repeats", o.repeats);
    facts.add_number("AutoPlanOptions::measure", o.measure);
    facts.add_number("AutoPlanOptions::rounds", o.rounds);
    facts.add_number("AutoPlanOptions::max_rounds", o.max_rounds);
    facts.add_number("AutoPlanOptions::steps", o.steps);
    check_agreement(world, facts, "auto_plan: the", "give every rank the same AutoPlanOptions");
  }
  {  // another global batch on one rank failed later as "bench::combinations: the ranks disagree on the plans" (a stranger's finding)
    const auto [low, high] = over_ranks(world, global_rows);
    EPL_CHECK(low == high, "auto_plan: the ranks were given different global batches (global_rows from ", low, " to ", high,
              "); give every rank the batch the run trains a step");
  }
  // named here, not as the search's "global batch" (stranger 37)
  EPL_CHECK(global_rows >= 1, "auto_plan: global_rows = ", global_rows, "; give the rows the run trains a step, over all ranks (1 or more)");
  // the probe: at most 4 rows of the sample
  EPL_CHECK(sample.inputs.defined() && sample.inputs.rank() > 0 && sample.inputs.dim(0) >= 2, "auto_plan: the sample batch has ",
            sample.inputs.defined() && sample.inputs.rank() > 0 ? sample.inputs.dim(0) : 0, " row",
            sample.inputs.defined() && sample.inputs.rank() > 0 && sample.inputs.dim(0) == 1 ? "" : "s", "; give 2 or more (4 is "
            "what the probe uses): with fewer it cannot tell a unit's fixed cost a call from its cost a row, and every micro-batch "
            "count would be priced alike");
  const std::int64_t rows = std::min<std::int64_t>(sample.inputs.dim(0), 4);
  EPL_CHECK(detail::rows_of(sample.targets) == sample.inputs.dim(0), "auto_plan: the sample batch has ", sample.inputs.dim(0),
            " input rows but ", detail::rows_of(sample.targets), " target rows; give one target row an input row");
  detail::check_batch_memory(sample.inputs, sample.targets, ctx.cpu().id());
  {  // the measured plans train on the sample, and a pipeline's stages check they read the same rows
    std::uint64_t h = kFnvBasis;
    for (const Tensor* t : {&sample.inputs, &sample.targets}) h = detail::hash_bytes(h, t->raw(), t->bytes());
    const auto [low, high] = over_ranks(world, std::bit_cast<std::int64_t>(h));
    EPL_CHECK(low == high, "auto_plan: the ranks were given different sample batches; give every rank the same rows (the "
              "plans it measures train on them; read them with one seed on every rank, not from the rank's data shard)");
  }
  return rows;
}

EPL_LINKED plan::Cluster cluster_of(Context& ctx, const Config& cfg, const AutoPlanOptions& o, plan::PlanOptions& base) {
  auto& world = ctx.world();
  const int n = world.size();
  plan::Cluster cluster{.ranks = n};
  if (o.budget > 0) cluster.bytes_per_rank = o.budget;
  cluster.data = cluster.pipeline = cluster.tensor = measure_all_reduce(world);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n > cores) cluster.cores = cores;  // more ranks than this machine's cores: they share them (thread ranks, one host's processes)
  // the run's other keys, and its ranks' speeds (cluster.rank_speeds), price each plan as it will run
  base = plan_options(cfg, {});
  base.rank_speeds = rank_speeds(cfg, ctx.cpu(), world);
  return cluster;
}

EPL_LINKED std::vector<plan::Estimate> agreed_shortlist(Context& ctx, const plan::SearchResult& found, std::size_t k_most, int tensor) {
  auto& world = ctx.world();
  const auto listed = plan::shortlist(found, k_most);
  std::int64_t k = static_cast<std::int64_t>(listed.size());
  world.broadcast(comm::Buffer(&k, 1, DType::kI64), 0);
  std::vector<std::int64_t> top(static_cast<std::size_t>(kEncoded * k));
  if (ctx.rank() == 0)
    for (std::int64_t i = 0; i < k; ++i) encode(found.plans[listed[static_cast<std::size_t>(i)]].candidate, top.data() + kEncoded * i);
  world.broadcast(comm::Buffer(top.data(), kEncoded * k, DType::kI64), 0);
  std::vector<plan::Estimate> plans(static_cast<std::size_t>(k));  // rank 0's predictions (what it prints), with its candidates
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (i < listed.size()) plans[i] = found.plans[listed[i]];
    plans[i].candidate = decode(top.data() + kEncoded * i, tensor);
  }
  return plans;
}

EPL_LINKED plan::SearchResult held_to_given(plan::SearchResult found, const Config& cfg) {
  // a key given on the command line, in the environment or by code, as its canonical text
  const auto given = [&](const std::string& key) -> std::optional<std::string> {
    if (cfg.source(key) == Config::Source::kDefault) return std::nullopt;
    return cfg.value_text(key);
  };
  const auto same = [&](const std::string& key, const std::string& text) {
    Config one;
    one.set_text(key, text);
    return one.value_text(key);
  };
  using Values = std::vector<std::string>;
  const auto add = [](Values& values, const std::string& v) {
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  };
  const auto listed = [](const Values& values) {
    std::string s;
    for (const auto& v : values) s += (s.empty() ? "" : ", ") + v;
    return s;
  };
  std::vector<std::pair<std::string, std::string>> held;  // the given keys some plan sets, and their given values
  std::vector<std::map<std::string, std::string>> sets;  // each plan's values of the given keys
  const auto keep = [&](const plan::Estimate& e) {
    bool agrees = true;
    auto& set = sets.emplace_back();
    for (const auto& [key, text] : e.candidate.keys()) {
      const auto mine = given(key);
      if (!mine || key == keys::auto_parallel.name) continue;  // what asked for the planner, not a constraint on it
      const std::string value = same(key, text);
      if (std::find(held.begin(), held.end(), std::pair{key, *mine}) == held.end()) held.emplace_back(key, *mine);
      set[key] = value;
      agrees = agrees && value == *mine;
    }
    return agrees;
  };
  // the values the plans that fit give `key`, of those whose `given` key has the value given (all: none)
  const auto taken = [&](const std::string& key, const std::pair<std::string, std::string>* given_value = nullptr) {
    Values values;
    for (const auto& set : sets) {
      if (given_value)
        if (auto g = set.find(given_value->first); g == set.end() || g->second != given_value->second) continue;
      if (auto k = set.find(key); k != set.end()) add(values, k->second);
    }
    return values;
  };
  const std::size_t before = found.plans.size();
  std::vector<plan::Estimate> kept;
  for (auto& e : found.plans)
    if (keep(e)) kept.push_back(std::move(e));
  // each given value no plan that fits takes, and what they take for its key (the search's range:
  // micro-batches 1-8, the compiled ZeRO); where each is taken alone, the combination no plan takes
  std::string keys;
  for (const auto& [key, mine] : held)
    if (const Values values = taken(key); std::find(values.begin(), values.end(), mine) == values.end())
      keys += (keys.empty() ? "" : "; ") + key + "=" + mine + " (they take " + listed(values) + ")";
  if (keys.empty() && held.size() > 1) {
    const auto& [first, first_value] = held.front();
    std::string all, with;
    for (const auto& [key, mine] : held) all += (all.empty() ? "" : " with ") + key + "=" + mine;
    for (std::size_t i = 1; i < held.size(); ++i) {
      const Values values = taken(held[i].first, &held.front());  // what the plans that take the first key's value take for this one
      with += (with.empty() ? "" : ", ") + held[i].first + " " + (values.empty() ? "unset" : listed(values));
    }
    keys = "each value alone is taken by some plan, but none takes " + all + " together (the plans with " + first + "=" +
           first_value + " take " + with + ")";
  }
  // the plans the checks refused may be the ones the keys ask for: a reason that names a given value
  std::string refused;
  for (const auto& why : found.refusals)
    for (const auto& [key, mine] : held) {
      const std::string bare = mine.size() > 1 && mine.front() == '"' ? mine.substr(1, mine.size() - 2) : mine;
      if (why.find(key) != std::string::npos && !bare.empty() && why.find(bare) != std::string::npos) {
        refused += (refused.empty() ? "" : "; ") + why;
        break;
      }
    }
  EPL_CHECK(!kept.empty(), "auto.auto_parallel: none of the ", before, " plans that fit agrees with the keys given: ", keys,
            "; give a value they take, leave the key unset for the planner to choose it, or give pipeline.num_stages to lay "
            "the run out by hand",
            found.too_big > 0 ? " (" + std::to_string(found.too_big) + " more plans are over the budget, AutoPlanOptions::budget: "
                                    "the keys may ask for one of them)"
                              : std::string(),
            refused.empty() ? std::string()
                            : " (the plan's checks refused " + std::to_string(found.refused) + " more, for a reason that names a value given: " +
                                  refused + ")");
  found.held_out += static_cast<int>(before - kept.size());
  found.plans = std::move(kept);
  return found;
}

EPL_LINKED Config chosen(Context& ctx, const Config& cfg, const plan::SearchResult& found, const std::vector<plan::Estimate>& plans,
                         const std::vector<bench::Measured>& measured, bool stand_in, const AutoPlanOptions& o) {
  const int n = ctx.world().size();
  std::size_t chosen = 0;
  std::string account;  // rank 0's, printed and kept in o.log
  std::string why = "chosen as the fastest of the plans that fit (predicted";
  why += o.measure > 1 && !stand_in ? "; not measured: the optimizer cannot be built from default options)" : ")";
  const auto k = plans.size();
  if (!measured.empty()) {
    chosen = bench::choose(measured);  // the fastest, or fewer stages within the noise of it
    const std::size_t first = bench::fastest(measured);
    why = chosen == first ? "chosen as the fastest measured of " + std::to_string(k) + " (the fastest predicted of each layout, then of each shape)"
                          : "chosen over the fastest measured (" + plans[first].candidate.str() + ", " +
                                std::to_string(static_cast<int>(std::lround(100 * (measured[chosen].rank_key() / measured[first].rank_key() - 1)))) +
                                "% faster) for fewer pipeline stages within the measurement's noise, of " + std::to_string(k) +
                                " measured (the fastest predicted of each layout, then of each shape)";
    if (ctx.rank() == 0) {
      int most = 0;
      for (const auto& m : measured) most = std::max(most, m.rounds);
      const bool in_rounds = measured[first].relative > 0;  // else one round: x is the step over the fastest's
      std::string table = "measured before choosing (" + std::to_string(o.rounds) + (o.rounds == 1 ? " round of " : " rounds of ") +
                          std::to_string(o.steps) + (o.steps == 1 ? " step" : " steps") + (o.rounds > 1 ? ", alternating" : "") +
                          (most > o.rounds ? ", then the plans within " + std::to_string(std::lround(100 * bench::CombinationOptions{}.race_band)) +
                                                 "% of the leader, round by round, raced on to " + std::to_string(most) +
                                                 " rounds"
                                           : std::string()) +
                          (in_rounds ? "; the slowest rank's median step, and its round's step over the round's typical (the geometric mean "
                                       "of the plans that ran every round), the median over rounds: what ranks them):\n"
                                     : "; the slowest rank's median step, and its step over the fastest's):\n");
      char line[512];
      for (std::size_t i = 0; i < plans.size(); ++i) {
        std::snprintf(line, sizeof line, "  %-34s predicted %9.3f ms  measured %9.3f ms  x%.3f  (spread %3.0f%%, %2d round%s%s)%s\n",
                      plans[i].candidate.str().c_str(), 1e3 * plans[i].seconds, 1e3 * measured[i].seconds, measured[i].rank_key() /
                      (measured[i].relative > 0 ? 1.0 : measured[first].seconds), 100 * measured[i].spread(), measured[i].rounds,
                      measured[i].rounds == 1 ? "" : "s", measured[i].left_race ? ", left the race" : "", i == chosen ? "  <- chosen" : "");
        table += line;
      }
      account = table;
    }
  }
  const plan::Candidate& c = plans[chosen].candidate;
  if (o.chosen) *o.chosen = c;
  if (ctx.rank() == 0) {
    account += "auto.auto_parallel: " + c.str() + " on " + std::to_string(n) + (n == 1 ? " rank, " : " ranks, ") + why + ":\n" +
               plan::report(found, 5, !measured.empty());
    const auto place = std::find_if(found.plans.begin(), found.plans.end(), [&](const plan::Estimate& e) { return e.candidate.str() == c.str(); });
    if (place != found.plans.end() && place - found.plans.begin() >= 5) {
      char line[512];
      std::snprintf(line, sizeof line, "the chosen plan, number %zd by prediction: %.2f MiB, %.3f ms, bubble %.1f%%\n",
                    place - found.plans.begin() + 1, static_cast<double>(place->device_bytes()) / (1024.0 * 1024.0), 1e3 * place->seconds,
                    100 * place->bubble);
      account += line;
    }
    if (o.print) std::printf("%s", account.c_str());
    std::fflush(stdout);
    if (o.log) *o.log = account;
  }
  Config out = cfg;
  for (const auto& [k, v] : c.keys()) out.set_text(k, v);
  return out;
}
}  // namespace detail

}  // namespace v0
}  // namespace epl
