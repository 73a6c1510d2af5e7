#pragma once
// The multi-rank device matrix: every strategy and policy trained over thread ranks that each hold
// a device of type D (their buffers in device memory, moved through the ranks' lanes), against the
// same run on one device of type D and on the CPU. test/isolated runs it on device::Isolated in
// CI; test/cuda on thread ranks sharing one GPU (tools/gpu_check.sh).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "../examples/gpt/gpt.hpp"
#include "epl/comm/threads/run_threads.hpp"

namespace epl::test::matrix {

inline gpt::Shape shape() { return {.vocab = 32, .context = 8, .layers = 2, .heads = 4, .dim = 16}; }
constexpr int kSteps = 4;
constexpr std::int64_t kBatch = 8;

struct Run {
  std::vector<double> losses;
  std::map<std::int64_t, std::vector<double>> params;  // by ordinal: the part this rank holds
  std::map<std::int64_t, nn::Parameter> specs;          // how each is sharded
  std::vector<double> outputs;                         // trainer.predict on a held-out batch: this rank's rows, whole
  Shape output_shape;
  std::int64_t first_row = 0;                          // where they lie in the global batch
};

inline data::TokenDataset corpus() {
  std::vector<std::int32_t> t(4000);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * i + 3 * i) % 29);
  return data::TokenDataset::from_tokens(t, 32);
}

// Trains on device d over ctx (null: the device alone); the parameters read back from the device.
template <class Policy, class Model, class D>
Run train(Context* ctx, const D& d, const Config& cfg, Model model) {
  using T = Trainer<Model, optim::AdamW, Policy, nn::SoftmaxCrossEntropy, D>;
  const optim::AdamW opt({.lr = 0.01, .eps = 1e-3});
  const TrainerOptions o{.seed = 3, .clip_norm = 0.5};
  auto go = [&](T& t) {
    auto ds = corpus();
    data::WindowLoader loader(ds, 8, kBatch, 17, t.data_shard());
    Run r;
    for (int s = 0; s < kSteps; ++s) r.losses.push_back(t.step(loader.next(d)));
    data::WindowLoader held_out(ds, 8, kBatch, 29, t.data_shard());
    const Tensor y = t.predict(held_out.next(d).inputs);
    std::vector<float> out(static_cast<std::size_t>(y.numel()));
    d.download(y, out.data());
    r.outputs.assign(out.begin(), out.end());
    r.output_shape = y.shape();
    r.first_row = t.data_shard().first_of(kBatch);
    t.gather_parameters();
    nn::for_each_parameter(t.model(), [&](nn::Parameter& p) {
      if (!p.materialized()) return;
      std::vector<float> h(static_cast<std::size_t>(p.value.numel()));
      d.download(p.value, h.data());
      r.params[p.ordinal] = std::vector<double>(h.begin(), h.end());
      nn::Parameter spec = p;  // how it is sharded, without its tensors (they go with the rank's device)
      spec.value = Tensor{};
      spec.grad = Tensor{};
      r.specs[p.ordinal] = spec;
    });
    return r;
  };
  if (ctx) {
    T t(*ctx, d, cfg, std::move(model), opt, o);
    return go(t);
  }
  T t(d, cfg, std::move(model), opt, o);
  return go(t);
}

inline double rel(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}
inline std::vector<double> part_of(const nn::Parameter& spec, const std::vector<double>& whole) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < spec.numel(); ++i) out.push_back(whole.at(spec.global_index(i)));
  return out;
}

/// One row of the table the matrix prints.
struct Row {
  std::string name;
  int ranks;
  double loss_vs_one, params_vs_one, outputs_vs_one, loss_vs_cpu, seconds;
};
inline std::vector<Row>& table() {
  static std::vector<Row> rows;
  return rows;
}
inline void print_table(const char* device) {
  std::printf("\n%-44s %5s %14s %14s %14s %14s %8s\n", device, "ranks", "loss vs one", "params vs one", "predict vs one", "loss vs CPU",
              "seconds");
  for (const auto& r : table())
    std::printf("%-44s %5d %14.2e %14.2e %14.2e %14.2e %8.2f\n", r.name.c_str(), r.ranks, r.loss_vs_one, r.params_vs_one, r.outputs_vs_one,
                r.loss_vs_cpu, r.seconds);
  table().clear();
}

/// n thread ranks, each with its own device (make(rank)), trained with Policy and cfg on
/// make_model(); every rank's losses and parameter parts equal one device's (RefPolicy and `base`, the
/// same global batch) within tol, and the CPU's losses within cpu_tol; together the ranks hold every
/// parameter.
template <class Policy, class RefPolicy = Policy, class MakeDevice, class MakeModel, class MakeRef>
void expect_equal(const char* name, int n, const Config& cfg, const Config& base, MakeDevice&& make, MakeModel&& make_model,
                  MakeRef&& make_ref, double tol, double cpu_tol) {
  const std::string what = std::string(name) + " on " + std::to_string(n) + " ranks";
  CAPTURE(what);
  const auto one_device = make(100);
  const Run one = train<RefPolicy>(nullptr, *one_device, base, make_ref());
  const device::Cpu cpu(101);
  const Run host = train<RefPolicy>(nullptr, cpu, base, make_ref());
  std::vector<Run> runs(static_cast<std::size_t>(n));
  const auto start = std::chrono::steady_clock::now();
  comm::run_threads(n, [&](comm::ThreadCommunicator& c) {
    const auto d = make(c.rank());
    Context ctx(c, 110 + c.rank());
    runs[static_cast<std::size_t>(c.rank())] = train<Policy>(&ctx, *d, cfg, make_model());
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::set<std::int64_t> held;
  double worst_loss = 0, worst_params = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto& run = runs[static_cast<std::size_t>(r)];
    worst_loss = std::max(worst_loss, rel(run.losses, one.losses));
    for (const auto& entry : run.params) {
      const std::int64_t ordinal = entry.first;
      CAPTURE(ordinal);
      worst_params = std::max(worst_params, rel(entry.second, part_of(run.specs.at(ordinal), one.params.at(ordinal))));
      held.insert(ordinal);
    }
  }
  CHECK(held.size() == one.params.size());
  // every rank's prediction is the one device's on its rows (the whole vocabulary, every stage)
  double worst_outputs = 0;
  const std::int64_t per_row = static_cast<std::int64_t>(one.outputs.size()) / kBatch;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto& run = runs[static_cast<std::size_t>(r)];
    Shape want = one.output_shape;
    want[0] = run.output_shape[0];
    CHECK(run.output_shape == want);
    REQUIRE(static_cast<std::int64_t>(run.outputs.size()) == run.output_shape[0] * per_row);
    const auto from = one.outputs.begin() + run.first_row * per_row;
    worst_outputs = std::max(worst_outputs, rel(run.outputs, std::vector<double>(from, from + static_cast<std::ptrdiff_t>(run.outputs.size()))));
  }
  CHECK(worst_outputs < tol);
  CHECK(worst_loss < tol);
  CHECK(worst_params < tol);
  const double vs_cpu = rel(one.losses, host.losses);
  CHECK(vs_cpu < cpu_tol);
  CHECK(one.losses.back() < one.losses.front());  // it learns
  table().push_back({name, n, worst_loss, worst_params, worst_outputs, vs_cpu, seconds});
}

inline Config micro(std::int64_t m) {
  Config c;
  c.set(keys::num_micro_batch, m);
  return c;
}
inline Config pipeline(int stages, std::int64_t m, const char* schedule) {
  Config c = micro(m);
  c.set(keys::num_stages, stages).set(keys::auto_parallel, true).set(keys::pipeline_strategy, schedule);
  return c;
}

// The MoE GPT: each block's feed-forward a mixture of 4 experts (top-2), split across ranks.
template <class Ffn>
struct MoeBlock {
  nn::Residual<nn::LayerNorm, nn::CausalSelfAttention> attn;
  nn::Residual<Ffn> ffn;
};
template <class Ffn>
struct MoeGpt {
  gpt::Embed embed;
  MoeBlock<Ffn> b0, b1;
  gpt::Head head;
};
using PlainFfn = nn::Seq<nn::LayerNorm, nn::MoE>;
template <int N>
using SplitFfn = Split<N, nn::LayerNorm, nn::MoE>;
inline nn::MoE::Options moe_options(double capacity, double aux) {
  return {.dim = 16, .hidden = 24, .experts = 4, .top_k = 2, .capacity_factor = capacity, .aux_weight = aux};
}
template <class Ffn>
MoeGpt<Ffn> make_moe_gpt(double capacity = 2.0, double aux = 0.05) {
  const auto s = shape();
  auto g = gpt::make_gpt(s);
  auto block = [&] {
    return MoeBlock<Ffn>{nn::Residual<nn::LayerNorm, nn::CausalSelfAttention>(nn::LayerNorm(s.dim), nn::CausalSelfAttention(s.dim, s.heads)),
                         nn::Residual<Ffn>(Ffn(nn::LayerNorm(s.dim), nn::MoE(moe_options(capacity, aux))))};
  };
  return {g.embed, block(), block(), g.head};
}

/// The whole matrix on devices made by make(rank): tol against one device of the type, cpu_tol of
/// that device against the CPU, amp_tol for bf16 mixed precision.
template <class MakeDevice>
void run_all(MakeDevice&& make, double tol, double cpu_tol, double amp_tol) {
  auto gpt = [] { return gpt::make_gpt(shape()); };
  for (int n : {2, 4}) {
    // data parallel and its policies
    expect_equal<Policies<>>("Replicate (data parallel)", n, micro(1), micro(1), make, gpt, gpt, tol, cpu_tol);
    expect_equal<Policies<Zero<1>>, Policies<>>("ZeRO 1", n, micro(2), micro(2), make, gpt, gpt, tol, cpu_tol);
    expect_equal<Policies<Zero<2>>, Policies<>>("ZeRO 2", n, micro(2), micro(2), make, gpt, gpt, tol, cpu_tol);
    expect_equal<Policies<Zero<3>>, Policies<>>("ZeRO 3", n, micro(1), micro(1), make, gpt, gpt, tol, cpu_tol);
    Config off = micro(1);
    off.set(keys::zero_level, "v2").set(keys::offload_level, "v0");
    expect_equal<Policies<Zero<3>, Offload<offload::V0>>, Policies<>>("ZeRO 3 + CPU offload", n, off, micro(1), make, gpt, gpt, tol, cpu_tol);
    Config rc = micro(2);
    rc.set(keys::checkpoint_type, "auto");
    expect_equal<Policies<>>("recompute (gradient checkpointing)", n, rc, rc, make, gpt, gpt, tol, cpu_tol);
    Config amp = micro(1);
    amp.set(keys::amp_level, "O1");
    expect_equal<Policies<Amp<amp::BF16>>>("AMP bf16", n, amp, amp, make, gpt, gpt, amp_tol, amp_tol);
    // pipelines, every schedule
    for (const char* schedule : {"GPipe", "PreferBackward", "ZeroBubble"})
      expect_equal<Policies<>>(schedule, n, pipeline(2, 4, schedule), micro(4), make, gpt, gpt, tol, cpu_tol);
    expect_equal<Policies<>>("Interleaved", n, pipeline(2, 4, "Interleaved").set(keys::num_virtual_stages, 4), micro(4), make, gpt,
                             gpt, tol, cpu_tol);
    if (n == 4) {
      expect_equal<Policies<>>("PP x DP (1F1B)", n, pipeline(2, 2, "PreferBackward"), micro(2), make, gpt, gpt, tol, cpu_tol);
      expect_equal<Policies<Zero<3>>, Policies<>>("PP x ZeRO 3 x DP (GPipe)", n, pipeline(2, 2, "GPipe"), micro(2), make, gpt, gpt,
                                                  tol, cpu_tol);
    }
    // Split: tensor (with the vocabulary-parallel head), sequence, MoE experts, and with data parallel
    if (n == 2) {
      expect_equal<Policies<>>("Split tensor + vocabulary", n, micro(2), micro(2), make, [] { return gpt::make_split_gpt<2>(shape()); }, gpt, tol,
                               cpu_tol);
      expect_equal<Policies<>>("Split sequence parallel", n, micro(2).set(keys::sequence_parallel, true), micro(2), make,
                               [] { return gpt::make_split_gpt<2>(shape()); }, gpt, tol, cpu_tol);
      expect_equal<Policies<>>("Split MoE experts", n, micro(2), micro(2), make, [] { return make_moe_gpt<SplitFfn<2>>(); },
                               [] { return make_moe_gpt<PlainFfn>(); }, tol, cpu_tol);
    } else {
      expect_equal<Policies<>>("Split tensor + vocabulary", n, micro(2), micro(2), make, [] { return gpt::make_split_gpt<4>(shape()); }, gpt, tol,
                               cpu_tol);
      expect_equal<Policies<>>("Split x DP", n, micro(2), micro(2), make, [] { return gpt::make_split_gpt<2>(shape()); }, gpt, tol, cpu_tol);
      expect_equal<Policies<>>("Split MoE experts", n, micro(2), micro(2), make, [] { return make_moe_gpt<SplitFfn<4>>(); },
                               [] { return make_moe_gpt<PlainFfn>(); }, tol, cpu_tol);
    }
  }
}

}  // namespace epl::test::matrix
