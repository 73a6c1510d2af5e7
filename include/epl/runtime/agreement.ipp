#pragma once
/// \file
/// \brief The bodies of the run's agreement checks (the header declares them): included by that
/// header in a header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include "epl/runtime/agreement.hpp"

namespace epl {
inline namespace v0 {

EPL_LINKED void detail::add_model_facts(RunFacts& facts, const ModelFacts& found) {
  facts.add_number("the model's parameter count", static_cast<double>(found.parameters));
  facts.add_hash("the model's structure (layer types and parameter shapes)", found.structure, "a different model");
  for (const auto& [path, text] : found.options)
    facts.add_hash("the hyper-parameters of layer " + (path.empty() ? std::string("(the model)") : path),
                   hash_text(kFnvBasis, text), text.empty() ? "(none)" : text);
}

EPL_LINKED void add_config_facts(RunFacts& facts, const Config& cfg) {
  for (const auto& k : Config::keys()) {
    // given or not is part of a key's meaning (zero.level given empty is no ZeRO, unset the
    // program's epl::Zero<k>), and "" prints alike either way
    const bool given = cfg.source(k.name) != Config::Source::kDefault;
    const std::string v = cfg.value_text(k.name), shown = cfg.value_shown(k.name);  // compared whole, shown cut and escaped
    facts.add("config key " + std::string(k.name), detail::hash_text(given ? detail::kFnvBasis : 1099511628211ull, v),
              given ? shown + " given" : "not given, default " + shown);
  }
}

EPL_LINKED void check_agreement(comm::Communicator& group, const RunFacts& facts, std::string_view who, std::string_view fix) {
  if (group.size() == 1) return;
  const int n = group.size();
  std::int64_t count = static_cast<std::int64_t>(facts.values().size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  group.all_gather(comm::Buffer(&count, 1, DType::kI64), comm::Buffer(counts.data(), n, DType::kI64));
  // the facts every rank has (a model of more layers has more): compared first, so that the first
  // that differs (the structure, before any layer's options) is named, not the count
  const std::int64_t common = *std::min_element(counts.begin(), counts.end());
  std::vector<std::uint64_t> mine(facts.values().begin(), facts.values().begin() + common), all(static_cast<std::size_t>(n * common));
  group.all_gather(comm::Buffer(mine.data(), common, DType::kI64), comm::Buffer(all.data(), n * common, DType::kI64));
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (int r = 1; r < n; ++r) {
      const auto theirs = all[static_cast<std::size_t>(r) * mine.size() + i], first = all[i];
      if (theirs == first) continue;
      std::string values;
      if (facts.is_number(i))
        values = ": " + detail::concat(std::bit_cast<double>(theirs)) + " on rank " + std::to_string(r) + ", " +
                 detail::concat(std::bit_cast<double>(first)) + " on rank 0";
      else if (group.rank() == r || group.rank() == 0)
        values = " (this rank's: " + facts.shown()[i] + ")";
      EPL_FAIL(who, " ranks 0 and ", r, " disagree on ", facts.labels()[i], values, "; ", fix);
    }
  for (int r = 1; r < n; ++r)
    EPL_CHECK(counts[r] == counts[0], who, " rank ", r, " describes its run with ", counts[r], " facts, rank 0 with ", counts[0],
              "; every rank must run the same program");
}
namespace detail {

EPL_LINKED void check_batch_memory(const Tensor& inputs, const Tensor& targets, DeviceId device) {
  for (const Tensor* t : {&inputs, &targets}) {
    if (!t->defined()) continue;
    const DeviceId d = t->device();
    EPL_CHECK(host_reachable(device.kind) ? d.kind == device.kind : d == device, "the batch's ", t == &inputs ? "inputs are" : "targets are",
              " in ", d.str(), " memory, and this rank trains on ", device.str(), ": make the batch on this rank's device "
              "(loader.next(device), or device.upload)");
  }
}

EPL_LINKED void check_batch(const Tensor& inputs, const Tensor& targets, DeviceId device, int m, int ranks, bool uneven,
                            std::string_view m_from) {
  EPL_CHECK(inputs.defined() && targets.defined(), "the batch's ", !inputs.defined() ? "inputs are" : "targets are",
            " an undefined (empty) tensor: make them on this rank's device (device.empty, device.upload or loader.next)");
  const std::int64_t rows = detail::rows_of(inputs), n_targets = detail::rows_of(targets);
  EPL_CHECK(n_targets == rows, "batch has ", rows, " inputs but ", n_targets, " targets");
  check_batch_memory(inputs, targets, device);
  // a sequence of length 0 ([8, 0] ids) trained to a loss of nan, blamed on the learning rate (a stranger's finding)
  EPL_CHECK(rows == 0 || inputs.numel() > 0, "the batch's inputs ", inputs.shape(), " hold no values: each row needs at least one "
            "token or feature (a window of seq_len 1 or more)");
  EPL_CHECK(rows > 0, "the batch has no rows; give every step, evaluation and prediction at least one row",
            m > 1 ? " per micro-batch (pipeline.num_micro_batch = " + std::to_string(m) + ")" : std::string());
  EPL_CHECK(rows % m == 0, "this rank's batch of ", rows, " samples does not divide into pipeline.num_micro_batch = ", m, m_from,
            " micro-batches; make ", ranks > 1 && !uneven ? "the global batch a multiple of " + std::to_string(ranks * m) + " (" +
            std::to_string(ranks) + " data-parallel ranks x " + std::to_string(m) + " micro-batches)"
            : "the batch a multiple of " + std::to_string(m));
}
}  // namespace detail

EPL_LINKED const char* call_name(Call c) {
  switch (c) {
    case Call::kStep: return "trainer.step()";
    case Call::kSave: return "trainer.save()";
    case Call::kResume: return "trainer.resume()";
    case Call::kLoad: return "trainer.load()";
    case Call::kLoadSafetensors: return "trainer.load_safetensors()";
    case Call::kEvaluate: return "trainer.evaluate()";
    case Call::kPredict: return "trainer.predict()";
    case Call::kGather: return "trainer.gather_parameters()";
    case Call::kCheckReplicas: return "trainer.check_replicas()";
    case Call::kOwnedValues: return "trainer.with_owned_values() (epl::swap_ema)";
  }
  return "an unknown call";
}

EPL_LINKED void agree_on_call(comm::Communicator& world, Call call, std::int64_t step, std::int64_t rows, bool data_parallel, bool equal_rows, double learning_rate) {
  if (world.size() == 1) return;
  const int n = world.size();
  std::int64_t mine[4] = {static_cast<std::int64_t>(call), step, rows, std::bit_cast<std::int64_t>(learning_rate)};
  std::vector<std::int64_t> all(static_cast<std::size_t>(4 * n));
  try {
    world.all_gather(comm::Buffer(mine, 4, DType::kI64), comm::Buffer(all.data(), 4 * n, DType::kI64));
  } catch (const Error& e) {  // a peer that returned, died or called something else: say what this rank was doing
    EPL_FAIL(call_name(call), " at step ", step, " could not agree with the other ranks: ", e.detail(),
             "; ", kCollectiveCalls);
  }
  const auto at = [&](int r, int i) { return all[static_cast<std::size_t>(4 * r + i)]; };
  for (int r = 1; r < n; ++r) {
    EPL_CHECK(at(r, 0) == at(0, 0), "rank 0 called ", call_name(static_cast<Call>(at(0, 0))), " at step ", at(0, 1), " while rank ", r,
              " called ", call_name(static_cast<Call>(at(r, 0))), " at step ", at(r, 1), ": ", kCollectiveCalls,
              " (a save or gather_parameters on rank 0 only is the usual slip: call it on every rank)");
    EPL_CHECK(at(r, 1) == at(0, 1), call_name(call), ": rank ", r, " is at step ", at(r, 1), " and rank 0 at step ", at(0, 1),
              "; every rank must run the same steps (resume them all from one checkpoint)");
    if (call != Call::kStep) continue;
    EPL_CHECK(at(r, 3) == at(0, 3), "at step ", step, " rank ", r, " would update with learning rate ",
              std::bit_cast<double>(at(r, 3)), " and rank 0 with ", std::bit_cast<double>(at(0, 3)), "; every rank must apply the same "
              "rate (a TrainerOptions::lr_schedule that depends on the rank, or options().lr set on some ranks only)");
    if (!equal_rows) continue;  // uneven shares: StepGroups::place checks them
    EPL_CHECK(at(r, 2) == at(0, 2), "at step ", step, " ", data_parallel ? "data-parallel rank " : "rank ", r, " got a batch of ",
              at(r, 2), " rows and rank 0 one of ", at(0, 2), "; every rank must get an equal share of the global batch "
              "(data::WindowLoader with trainer.data_shard() does this)");
  }
}

EPL_LINKED void add_trainer_facts(RunFacts& facts, const TrainerOptions& o) {
  facts.add_number("TrainerOptions::seed", static_cast<double>(o.seed));
  facts.add_number("TrainerOptions::clip_norm", o.clip_norm);
  facts.add_number("TrainerOptions::dtype", static_cast<double>(o.dtype));
  facts.add_number("TrainerOptions::check_replicas_every", static_cast<double>(o.check_replicas_every));
  facts.add_number("TrainerOptions::amp_init_scale", o.amp_init_scale);
  facts.add_number("TrainerOptions::amp_growth_interval", static_cast<double>(o.amp_growth_interval));
  if (o.lr_schedule)  // a rule of the program's own: the same rates on every rank
    for (std::int64_t step : {1, 2, 10, 100, 1000, 10000})
      facts.add_number("TrainerOptions::lr_schedule(" + std::to_string(step) + ")", o.lr_schedule(step));
}
}  // namespace v0
}  // namespace epl
