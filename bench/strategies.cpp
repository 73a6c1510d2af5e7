// The planner checked against measurement: a GPT of examples/gpt's kind, every combination
// plan::search finds valid on R ranks (thread ranks, or MPI processes under epl-launch), each
// predicted (plan::estimate) and then trained for a few steps (epl::bench::combinations).
// Prints a table and writes JSON:
//   bench_strategies [--ranks=4] [--steps=3] [--warmup=1] [--layers=4 --dim=128 --heads=4 --context=64 --batch=16]
//                    [--tensor=1,2,4] [--calibration=FILE] [--json=FILE] [--only=N]
// The split degrees (--tensor) are model types: gpt::Gpt, and gpt::SplitGpt<2> and <4> (every
// part tensor-parallel), each searched (its own probe) and the searches merged.
// Parameter, gradient and optimizer bytes are predicted exactly (the arena's layout); activation
// peaks from the probe's per-unit bytes and the schedule's action list; step times from the
// probe's per-unit times, scaled by the ranks' share of the cores, and the collectives' α-β
// measured on the run's own world (the calibration; the probe is cached in --calibration).
#include <epl/epl.hpp>
#include <epl/plan/search.hpp>
#include <epl/tune/auto_plan.hpp>
#include <epl/tune/combinations.hpp>
#include <epl/runtime/launch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "../examples/gpt/gpt.hpp"
#include "epl/core/files.hpp"

namespace {
using Policy = epl::Policies<epl::Zero<3>, epl::Offload<epl::offload::V0>, epl::Amp<epl::amp::BF16>>;

epl::data::TokenDataset random_tokens(std::int64_t vocab) {
  std::vector<std::int32_t> tokens(1 << 18);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(epl::uniform01(7, i) * static_cast<double>(vocab));
  return epl::data::TokenDataset::from_tokens(tokens, vocab);
}

// The CPU's model name (/proc/cpuinfo), to stand beside every figure.
std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "an unknown CPU";
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) o += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  return o;
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::int64_t> ranks{"ranks", 4, "thread ranks (under epl-launch: the processes)", {.min = 1, .max = 64}};
  const epl::Flag<std::int64_t> steps{"steps", 3, "timed steps per combination (their median)", {.min = 1, .max = 1000}};
  const epl::Flag<std::int64_t> warmup{"warmup", 1, "steps before the timed ones", {.min = 0, .max = 100}};
  const epl::Flag<std::int64_t> layers{"layers", 4, "transformer blocks", {.min = 1, .max = 64}};
  const epl::Flag<std::int64_t> dim{"dim", 128, "model width", {.min = 8, .max = 4096}};
  const epl::Flag<std::int64_t> heads{"heads", 4, "attention heads", {.min = 1, .max = 64}};
  const epl::Flag<std::int64_t> context{"context", 64, "tokens per window", {.min = 2, .max = 4096}};
  const epl::Flag<std::int64_t> batch{"batch", 16, "windows per global batch", {.min = 1, .max = 4096}};
  const epl::Flag<std::int64_t> only{"only", 0, "measure only the first N combinations, in the planner's order (0: all)", {.min = 0}};
  const epl::Flag<std::string> calibration{"calibration", "strategies.calibration", "the probe's cache file (and FILE.amp, FILE.cluster)"};
  const epl::Flag<std::int64_t> confirm{"confirm", 5, "alternating rounds of the first choice and the measured-fastest three", {.min = 0, .max = 100}};
  const epl::Flag<std::string> json{"json", "strategies.json", "where the results go"};
  const epl::Flag<std::string> tensor{"tensor", "1,2,4", "the split degrees (model types) to search: 1 (gpt::Gpt), 2, 4 (gpt::SplitGpt<N>)"};
  auto cfg = epl::Config::from_args(argc, argv, ranks, steps, warmup, layers, dim, heads, context, batch, only, calibration, confirm, json,
                                    tensor);
  if (cfg.help_requested()) {
    std::fputs(cfg.usage("bench_strategies", "Every valid strategy combination of a GPT, predicted by the planner and measured.").c_str(), stdout);
    return 0;
  }
  const gpt::Shape shape{.vocab = 256, .context = cfg.get(context), .layers = cfg.get(layers), .heads = cfg.get(heads), .dim = cfg.get(dim)};
  EPL_CHECK(shape.dim % shape.heads == 0, "--dim=", shape.dim, " is not a multiple of --heads=", shape.heads);
  const std::int64_t rows = cfg.get(batch);
  const auto ds = random_tokens(shape.vocab);
  const auto model = gpt::make_gpt(shape);
  const auto split2 = gpt::make_split_gpt<2>(shape);
  const auto split4 = gpt::make_split_gpt<4>(shape);
  std::vector<int> degrees;
  {
    const std::string text = cfg.get(tensor);
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, end - at);
      EPL_CHECK(item == "1" || item == "2" || item == "4", "--tensor=", text, ": ", item, " is not a split degree this bench has a "
                "model type for; give some of 1, 2, 4");
      degrees.push_back(std::stoi(item));
      at = end + 1;
    }
    EPL_CHECK(!degrees.empty(), "--tensor is empty; give some of 1, 2, 4");
  }
  auto searched = [&](int t) { return std::find(degrees.begin(), degrees.end(), t) != degrees.end(); };

  // The probe: each unit's bytes and times on one device, one thread (cached); each model type its own.
  const std::string key = "gpt vocab " + std::to_string(shape.vocab) + " context " + std::to_string(shape.context) + " layers " +
                          std::to_string(shape.layers) + " heads " + std::to_string(shape.heads) + " dim " + std::to_string(shape.dim) +
                          " on " + cpu_name();
  auto probe_of = [&](const auto& m, const std::string& file, epl::DType matmul) {
    if (auto cached = epl::plan::load_profile(file, key)) return *cached;
    epl::device::Cpu probe(63, 1);
    epl::data::WindowLoader loader(ds, shape.context, 4, 11);
    const auto b = loader.next(probe);
    auto p = epl::plan::profile(m, probe, b.inputs, b.targets, 5, matmul);
    epl::plan::save_profile(p, file, key);
    return p;
  };
  // Every rank must search the same profiles, or their plan lists differ (MPI processes would each
  // probe their own): one process probes (rank 0, or the thread ranks' process before they start)
  // and writes the files; the other processes wait for them and read them.
  const std::vector<std::pair<std::string, int>> files{{cfg.get(calibration), 1}, {cfg.get(calibration) + ".amp", 1},
                                                        {cfg.get(calibration) + ".tp2", 2}, {cfg.get(calibration) + ".tp4", 4}};
  auto probe_all = [&] {
    (void)probe_of(model, files[0].first, epl::DType::kF32);
    (void)probe_of(model, files[1].first, epl::DType::kBF16);
    if (searched(2)) (void)probe_of(split2, files[2].first, epl::DType::kF32);
    if (searched(4)) (void)probe_of(split4, files[3].first, epl::DType::kF32);
  };
  auto read = [&](std::size_t i) {
    if (files[i].second > 1 && !searched(files[i].second)) return epl::plan::Profile{};
    for (int waited = 0;; ++waited) {  // written whole (temp then rename): a file that is there is complete
      if (auto p = epl::plan::load_profile(files[i].first, key)) return *p;
      EPL_CHECK(waited < 3000, "bench_strategies: rank 0 wrote no profile ", files[i].first, " in 10 minutes");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  };
  const bool processes = epl::started_by_mpi();
  if (!processes) probe_all();

  const int world_ranks = static_cast<int>(cfg.get(ranks));
  return epl::launch(cfg, [&](epl::Context& ctx) {
    auto& world = ctx.world();
    if (processes && ctx.rank() == 0) probe_all();
    const epl::plan::Profile prof = read(0), amp_prof = read(1), prof2 = read(2), prof4 = read(3);
    world.barrier();
    const int n = world.size();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const epl::Config base;
    const epl::bench::CombinationOptions measure{.warmup = static_cast<int>(cfg.get(warmup)), .steps = static_cast<int>(cfg.get(steps))};
    // Each plan trained by its model type (its split degree), in the order given.
    auto run = [&](const std::vector<epl::plan::Estimate>& plans) {
      std::vector<epl::bench::Measured> out(plans.size());
      auto by_type = [&]<class Model>(int t, auto make) {
        std::vector<epl::plan::Estimate> mine;
        std::vector<std::size_t> where;
        for (std::size_t i = 0; i < plans.size(); ++i)
          if (plans[i].candidate.tensor == t) {
            mine.push_back(plans[i]);
            where.push_back(i);
          }
        if (mine.empty()) return;
        const auto got = epl::bench::combinations<Model, epl::optim::AdamW, Policy>(
            ctx, base, mine, make, epl::optim::AdamW({.lr = 1e-3}),
            [&](epl::data::Shard shard) {
              return [loader = epl::data::WindowLoader(ds, shape.context, rows, 3, shard), &cpu = ctx.cpu()]() mutable { return loader.next(cpu); };
            },
            measure);
        for (std::size_t i = 0; i < got.size(); ++i) out[where[i]] = got[i];
      };
      by_type.template operator()<gpt::Gpt>(1, [&] { return gpt::make_gpt(shape); });
      by_type.template operator()<gpt::SplitGpt<2>>(2, [&] { return gpt::make_split_gpt<2>(shape); });
      by_type.template operator()<gpt::SplitGpt<4>>(4, [&] { return gpt::make_split_gpt<4>(shape); });
      return out;
    };
    // The calibration (cached): the links' α-β measured on this world, and the speed from one short
    // run of the plainest plan (data parallel over every rank, one micro-batch, no policy).
    epl::plan::Cluster cluster{.ranks = n, .cores = n > static_cast<int>(cores) ? static_cast<int>(cores) : 0};
    const std::string cluster_key = key + " on " + std::to_string(n) + " ranks, batch " + std::to_string(rows);
    double factor = 1, tensor_factor = 1;
    if (auto cached = epl::plan::load_cluster(cfg.get(calibration) + ".cluster", cluster_key, cluster)) {
      cluster = *cached;
    } else {
      cluster.data = cluster.pipeline = cluster.tensor = epl::measure_all_reduce(world);
      const auto uncalibrated = epl::plan::search<gpt::Gpt, Policy>(model, prof, cluster, rows, epl::optim::AdamW::kStateSlots);
      std::vector<epl::plan::Estimate> plain;
      for (const auto& e : uncalibrated.plans)
        if (plain.empty() && e.candidate.data == n && e.candidate.micro_batches == 1 && !e.candidate.policies.zero && !e.candidate.policies.recompute)
          plain.push_back(e);
      EPL_CHECK(!plain.empty(), "no plain data-parallel plan to calibrate with: use a batch that divides among ", n, " ranks");
      factor = epl::plan::calibrate(cluster, plain[0], run(plain)[0].seconds);
      // and the split group's link from one short run of a plain split plan (dp n/2 tp2, one stage, the most micro-batches)
      if (searched(2) && n % 2 == 0) {
        const auto split = epl::plan::search<gpt::SplitGpt<2>, Policy>(split2, prof2, cluster, rows, epl::optim::AdamW::kStateSlots);
        std::vector<epl::plan::Estimate> plain_split;
        for (const auto& e : split.plans)  // the most micro-batches: the most all-reduces to time
          if (e.candidate.pipeline == 1 && !e.candidate.policies.zero && !e.candidate.policies.recompute && !e.candidate.policies.amp &&
              (plain_split.empty() || e.candidate.micro_batches > plain_split[0].candidate.micro_batches))
            plain_split.assign(1, e);
        if (!plain_split.empty()) tensor_factor = epl::plan::calibrate_tensor(cluster, plain_split[0], run(plain_split)[0].seconds);
      }
      if (ctx.rank() == 0) epl::plan::save_cluster(cluster, cfg.get(calibration) + ".cluster", cluster_key);
    }
    std::vector<epl::plan::SearchResult> each;
    if (searched(1))
      each.push_back(epl::plan::search<gpt::Gpt, Policy>(model, prof, cluster, rows, epl::optim::AdamW::kStateSlots, {.amp_profile = &amp_prof}));
    if (searched(2) && n % 2 == 0)
      each.push_back(epl::plan::search<gpt::SplitGpt<2>, Policy>(split2, prof2, cluster, rows, epl::optim::AdamW::kStateSlots));
    if (searched(4) && n % 4 == 0)
      each.push_back(epl::plan::search<gpt::SplitGpt<4>, Policy>(split4, prof4, cluster, rows, epl::optim::AdamW::kStateSlots));
    auto found = epl::plan::merge(std::move(each));
    auto plans = found.plans;
    if (cfg.get(only) > 0 && static_cast<std::size_t>(cfg.get(only)) < plans.size()) plans.resize(static_cast<std::size_t>(cfg.get(only)));
    if (ctx.rank() == 0) {
      std::printf("bench_strategies: gpt (%lld parameters; vocab %lld, context %lld, %lld layers, dim %lld), global batch %lld, "
                  "%d ranks on %u cores of %s (%s); all-reduce α %.1f us, β %.2f GB/s; calibrated speed %.3f of the probe's%s; "
                  "split group's all-reduce α %.1f us, β %.2f GB/s (x%.2f by calibration)\n",
                  static_cast<long long>(prof.parameters()), static_cast<long long>(shape.vocab), static_cast<long long>(shape.context),
                  static_cast<long long>(shape.layers), static_cast<long long>(shape.dim), static_cast<long long>(rows), n, cores,
                  cpu_name().c_str(), cluster.cores ? "sharing the cores" : "a core each or more", cluster.data.alpha * 1e6,
                  cluster.data.beta / 1e9, cluster.speed, factor == 1 ? " (cached)" : "", cluster.tensor.alpha * 1e6, cluster.tensor.beta / 1e9,
                  tensor_factor);
      std::fputs(epl::plan::report(found, 8).c_str(), stdout);
      std::printf("measuring %zu combinations, %lld steps each...\n", plans.size(), static_cast<long long>(cfg.get(steps)));
      std::fflush(stdout);
    }
    const auto measured = run(plans);
    // The planner's first choice against the fastest measured, confirmed: those plans again in
    // alternating rounds (each round runs each once), medians.
    std::vector<std::size_t> by_time(measured.size());
    for (std::size_t i = 0; i < by_time.size(); ++i) by_time[i] = i;
    std::sort(by_time.begin(), by_time.end(), [&](auto a, auto b) { return measured[a].seconds < measured[b].seconds; });
    std::vector<epl::plan::Estimate> finalists{measured.empty() ? epl::plan::Estimate{} : measured[0].predicted};
    for (std::size_t i = 0; i < by_time.size() && finalists.size() < 4; ++i)
      if (by_time[i] != 0) finalists.push_back(measured[by_time[i]].predicted);
    std::vector<std::vector<double>> rounds(finalists.size());
    for (std::int64_t r = 0; r < cfg.get(confirm) && !measured.empty(); ++r) {
      const auto again = run(finalists);
      for (std::size_t i = 0; i < again.size(); ++i) rounds[i].push_back(again[i].seconds);
    }
    if (ctx.rank() != 0) return;
    auto mib = [](std::int64_t b) { return static_cast<double>(b) / 1048576.0; };
    std::printf("\n%-36s %10s %7s %9s %9s %6s %9s %9s %6s\n", "plan (planner's order)", "state MiB", "exact", "act pred", "act meas", "ratio",
                "ms pred", "ms meas", "ratio");
    int exact = 0, act_within = 0, time_within = 0;
    std::size_t fastest = 0;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const auto& m = measured[i];
      const auto& p = m.predicted;
      const bool same = m.state.parameters == p.state.parameters && m.state.gradients == p.state.gradients &&
                        m.state.optimizer_state == p.state.optimizer_state && m.state.host() == p.state.host();
      const double ar = m.activations > 0 ? static_cast<double>(p.activations) / static_cast<double>(m.activations) : 0;
      const double tr = p.seconds / m.seconds;
      exact += same;
      act_within += std::abs(ar - 1) <= 0.10;
      time_within += std::abs(tr - 1) <= 0.20;
      if (m.seconds < measured[fastest].seconds) fastest = i;
      std::printf("%-36s %10.3f %7s %9.3f %9.3f %6.2f %9.2f %9.2f %6.2f\n", p.candidate.str().c_str(), mib(p.state.device() + p.state.host()),
                  same ? "yes" : "NO", mib(p.activations), mib(m.activations), ar, 1e3 * p.seconds, 1e3 * m.seconds, tr);
    }
    const double first_vs_fastest = measured.empty() ? 0 : measured[0].seconds / measured[fastest].seconds;
    std::printf("\nstate bytes exact: %d of %zu; activation peak within 10%%: %d; step time within 20%%: %d; the planner's first choice "
                "(%s) measured %.2fx the fastest (%s) in the sweep\n",
                exact, measured.size(), act_within, time_within, measured.empty() ? "-" : measured[0].predicted.candidate.str().c_str(),
                first_vs_fastest, measured.empty() ? "-" : measured[fastest].predicted.candidate.str().c_str());
    // the confirmation: medians of alternating rounds
    double confirmed = 0;
    if (!rounds.empty() && !rounds[0].empty()) {
      std::printf("confirmed in %zu alternating rounds (medians):\n", rounds[0].size());
      double best = 1e30;
      for (std::size_t i = 0; i < rounds.size(); ++i) {
        auto v = rounds[i];
        std::sort(v.begin(), v.end());
        const double med = v[v.size() / 2];
        best = std::min(best, med);
        std::printf("  %-36s %9.2f ms%s\n", finalists[i].candidate.str().c_str(), 1e3 * med, i == 0 ? "  (the planner's first choice)" : "");
      }
      std::sort(rounds[0].begin(), rounds[0].end());
      confirmed = rounds[0][rounds[0].size() / 2] / best;
      std::printf("the planner's first choice is %.2fx the fastest of them\n", confirmed);
    }
    std::ostringstream out;
    out << "{\"bench\": \"strategies\", \"cpu\": \"" << json_escape(cpu_name()) << "\", \"ranks\": " << n
        << ", \"cores\": " << cores << ", \"parameters\": " << prof.parameters() << ", \"global_batch\": " << rows
        << ", \"alpha_s\": " << cluster.data.alpha << ", \"beta_bytes_per_s\": " << cluster.data.beta
        << ", \"tensor_alpha_s\": " << cluster.tensor.alpha << ", \"tensor_beta_bytes_per_s\": " << cluster.tensor.beta << ", \"state_exact\": " << exact
        << ", \"activations_within_10pc\": " << act_within << ", \"time_within_20pc\": " << time_within
        << ", \"calibrated_speed\": " << cluster.speed << ", \"first_choice_over_fastest_sweep\": " << first_vs_fastest
        << ", \"first_choice_over_fastest_confirmed\": " << confirmed << ", \"plans\": [";
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const auto& m = measured[i];
      const auto& p = m.predicted;
      out << (i ? ",\n  " : "\n  ") << "{\"plan\": \"" << p.candidate.str() << "\", \"state_predicted\": " << p.state.device() + p.state.host()
          << ", \"state_measured\": " << m.state.device() + m.state.host() << ", \"activations_predicted\": " << p.activations
          << ", \"activations_measured\": " << m.activations << ", \"seconds_predicted\": " << p.seconds
          << ", \"seconds_measured\": " << m.seconds << ", \"bubble\": " << p.bubble << ", \"flops\": " << p.flops
          << ", \"data_bytes\": " << p.data_bytes << ", \"pipeline_bytes\": " << p.pipeline_bytes
          << ", \"tensor_bytes\": " << p.tensor_bytes << ", \"tensor\": " << p.candidate.tensor << ", \"loss\": " << m.loss << "}";
    }
    out << "]}\n";
    epl::files::write_file(cfg.get(json), out.str(), "benchmark results file");
  }, {.ranks = world_ranks, .threads_per_rank = 1});
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_strategies: %s\n", e.what());
  return 2;
}
