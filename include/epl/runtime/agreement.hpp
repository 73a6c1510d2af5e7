#pragma once
/// \file
/// \brief What the ranks of a run must agree on, checked rather than assumed: the model they
/// built (structure, shapes and hyper-parameters such as a head count), the configuration, the
/// trainer's and the optimizer's settings, and each step's batch share. A rank that differs is
/// named with both values, before a step trains on it.
#include <bit>
#include <cstring>
#include <string>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "epl/comm/any_communicator.hpp"
#include "epl/config/config.hpp"
#include "epl/config/run_options.hpp"
#include "epl/core/hash.hpp"
#include "epl/nn/layer.hpp"
#include "epl/reflect/type_name.hpp"
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {

/// \brief A list of named facts about a rank's run, each a 64-bit value and how to show it.
class RunFacts {
 public:
  void add(std::string label, std::uint64_t value, std::string shown, bool number = false) {
    labels_.push_back(std::move(label));
    values_.push_back(value);
    shown_.push_back(std::move(shown));
    number_.push_back(number);
  }
  /// A number, shown for both ranks when they differ.
  void add_number(std::string label, double v) { add(std::move(label), std::bit_cast<std::uint64_t>(v), detail::concat(v), true); }
  [[nodiscard]] bool is_number(std::size_t i) const { return number_.at(i); }
  void add_hash(std::string label, std::uint64_t h, std::string what) { add(std::move(label), h, std::move(what)); }
  [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
  [[nodiscard]] const std::vector<std::uint64_t>& values() const noexcept { return values_; }
  [[nodiscard]] const std::vector<std::string>& shown() const noexcept { return shown_; }

 private:
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> values_;
  std::vector<std::string> shown_;
  std::vector<bool> number_;
};

/// \brief Facts about a model: its parameter count, its structure (every node's path and type,
/// every parameter's shape) and each layer's hyper-parameters (its options(), as
/// nn::options_text: a rank that differs is told which layer and what it has).
namespace detail {
// add_model_facts' visitor: a type of its own, not a lambda of each model's, so that every layer
// type's walk is compiled once whatever model holds it.
struct ModelFacts {
  std::uint64_t structure = detail::kFnvBasis;
  std::int64_t parameters = 0;
  std::vector<std::pair<std::string, std::string>> options;
  template <class N>
  void operator()(std::string_view path, N& node) {
    using T = std::remove_cvref_t<N>;
    structure = hash_text(hash_text(structure, path), reflect::type_name<T>());
    if constexpr (std::is_same_v<T, nn::Parameter>) {
      const Shape g = node.global_shape();
      for (int i = 0; i < g.rank(); ++i) structure = hash_value(structure, g[i]);
      parameters += g.numel();
    }
    if constexpr (requires { node.options(); }) options.emplace_back(std::string(path), nn::options_text(node.options()));
  }
};
// What add_model_facts found, told to facts.
EPL_LINKED void add_model_facts(RunFacts& facts, const ModelFacts& found);
}  // namespace detail

template <class M>
void add_model_facts(RunFacts& facts, M& model) {
  detail::ModelFacts found;
  nn::visit_nodes(model, found);
  detail::add_model_facts(facts, found);
}

/// \brief Facts about the EPL configuration keys (program flags may differ between ranks).
EPL_LINKED void add_config_facts(RunFacts& facts, const Config& cfg);

/// \brief Facts about an optimizer: its type and each field of its options.
template <class O>
void add_optimizer_facts(RunFacts& facts, const O& opt) {
  facts.add_hash("the optimizer", detail::hash_text(detail::kFnvBasis, reflect::type_name<O>()), std::string(reflect::type_name<O>()));
  using Options = std::remove_cvref_t<decltype(opt.options())>;
  if constexpr (reflect::is_reflectable_v<Options>) {
    const Options options = opt.options();
    reflect::for_each_field(options, [&](const auto& f, auto index) {
      using F = std::remove_cvref_t<decltype(f)>;
      if constexpr (std::is_arithmetic_v<F>)  // named as declared (lr), where a stranger read "field 0"
        facts.add_number(std::string(reflect::field_name_v<Options, decltype(index)::value>) + " of the optimizer's options (" +
                             std::string(reflect::type_name<O>()) + "::Options)",
                         static_cast<double>(f));
    });
  }
}

/// \brief All-gathers every rank's facts over group and fails, naming the first fact on which a
/// rank differs from rank 0 with both values, unless all agree. `who` says what the ranks are;
/// `fix` what the error tells the user to do.
EPL_LINKED void check_agreement(comm::Communicator& group, const RunFacts& facts, std::string_view who,
                                std::string_view fix = "every rank must build the same model and train it with the same settings");

namespace detail {
inline std::int64_t rows_of(const Tensor& t) { return t.defined() && t.rank() > 0 ? t.dim(0) : 0; }

/// \brief A batch must be in the memory of the device this rank trains on: host memory of any CPU
/// device for a CPU, this very device for a GPU or device::Isolated (another GPU's memory, or
/// another rank's on a shared GPU, is not ordered with this rank's stream).
EPL_LINKED void check_batch_memory(const Tensor& inputs, const Tensor& targets, DeviceId device);

/// \brief What a step checks of this rank's batch before any collective reads it: as many targets
/// as inputs, in this rank's device's memory, at least one row, and rows that divide into the
/// micro-batches (m) the way `ranks` data-parallel shares (equal unless `uneven`) need. An
/// evaluation checks the same with m = 1 and one share. m_from: where m came from, for the message
/// (" (EPL_PIPELINE_NUM_MICRO_BATCH in the environment)"), or empty.
EPL_LINKED void check_batch(const Tensor& inputs, const Tensor& targets, DeviceId device, int m, int ranks, bool uneven,
                            std::string_view m_from = {});
}  // namespace detail

/// \brief While it lives, this thread trains on device `id`: a second thread that claims the same
/// device (thread ranks sharing one device object, or one GPU slot) is an error naming it. Host
/// memory needs no claim (CPU ranks may share an index).
class DeviceClaim {
 public:
  explicit DeviceClaim(DeviceId id) : id_(id) {
    if (host_reachable(id.kind)) return;
    std::lock_guard lock(mutex());
    auto& [owner, count] = claims()[id];
    EPL_CHECK(count == 0 || owner == std::this_thread::get_id(), id.str(), " is trained on by two threads at once (thread ranks "
              "sharing one device object, or one GPU slot): give each thread rank a device of its own, device::Cuda(index, slot) with "
              "a slot per rank (device::Isolated(index) with an index per rank)");
    owner = std::this_thread::get_id();
    ++count;
    held_ = true;
  }
  ~DeviceClaim() {
    if (!held_) return;
    std::lock_guard lock(mutex());
    if (--claims()[id_].second == 0) claims().erase(id_);
  }
  DeviceClaim(const DeviceClaim&) = delete;
  DeviceClaim& operator=(const DeviceClaim&) = delete;

 private:
  static std::mutex& mutex() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::map<DeviceId, std::pair<std::thread::id, int>>& claims() {
    static auto* c = new std::map<DeviceId, std::pair<std::thread::id, int>>;
    return *c;
  }
  DeviceId id_;
  bool held_ = false;
};

/// \brief The trainer's calls that are collectives over the world.
enum class Call : std::int64_t { kStep = 1, kSave, kResume, kLoad, kEvaluate, kGather, kCheckReplicas, kOwnedValues, kLoadSafetensors, kPredict };
EPL_LINKED const char* call_name(Call c);

/// \brief The first collective of each of the trainer's collective calls: all-gathers (call,
/// step, rows) over the world, so that a call made on some ranks only (a save on rank 0 alone)
/// fails at once on every rank, naming it, instead of waiting out communication.timeout in
/// collectives that do not match; a step also checks that every rank got a batch of as many rows
/// (equal shares of the global batch, unless `equal_rows` is false: uneven devices) and will update
/// with the same learning rate. `data_parallel` says the world is one data-parallel group (its ranks
/// are named so in the message).
/// What a call made on some ranks only is told.
inline constexpr const char* kCollectiveCalls =
    "step, evaluate, predict, save, resume, load, load_safetensors, gather_parameters, check_replicas and with_owned_values (epl::swap_ema) "
    "are collectives that every rank calls, in the same "
    "order";

EPL_LINKED void agree_on_call(comm::Communicator& world, Call call, std::int64_t step, std::int64_t rows, bool data_parallel, bool equal_rows = true, double learning_rate = 0);

/// \brief Facts about a trainer's options, for the ranks' agreement check.
EPL_LINKED void add_trainer_facts(RunFacts& facts, const TrainerOptions& o);

/// \brief Everything the ranks of a run must agree on: the model, the configuration keys, the
/// optimizer and the trainer's options.
template <class M, class O>
RunFacts run_facts(M& model, const Config& cfg, const O& optimizer, const TrainerOptions& o) {
  RunFacts facts;
  add_model_facts(facts, model);
  add_config_facts(facts, cfg);
  add_optimizer_facts(facts, optimizer);
  add_trainer_facts(facts, o);
  return facts;
}

}  // namespace v0
}  // namespace epl

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/runtime/agreement.ipp"
#endif
