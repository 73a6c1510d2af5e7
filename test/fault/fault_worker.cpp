// The program the fault-injection matrix runs (test/fault/fault.test.cpp): a small training run
// on 3 ranks, thread ranks or MPI processes (epl::launch), in which one rank fails in a chosen way
// at a chosen place:
//   --fault=throw|startup|stall|hang|kill|return|skip|nonstd
//   --where=forward|collective|optimizer|send|tensor|gather|save
//   --fault_rank=R --at_step=S --steps=N --communication.timeout=SECONDS [--checkpoint.dir=DIR]
// throw: an epl::Error; startup: an error before the first collective; stall: sleep for three
// timeouts, then go on; hang: sleep forever; kill: SIGKILL (MPI processes only); return: the rank
// returns from its training function before step S; skip: it skips step S and goes on; nonstd:
// `throw 42`, an exception that is no std::exception. Where:
//   forward, optimizer     in a layer's forward, in the optimizer's update (data parallel)
//   collective             where the step's gradient all-reduce starts (data parallel)
//   send                   a pipeline send between stages (the model cut into 3 stages)
//   tensor                 a tensor-parallel collective (an epl::Split<3, ...> part)
//   gather                 a ZeRO stage 3 gather of a unit's parameters (zero.level = v2)
//   save                   in the middle of writing a checkpoint, its shards written (saved every step)
// The communicator the trainer runs on injects the collective, send, tensor and gather faults.
#include <epl/epl.hpp>
#include <epl/runtime/launch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

namespace nn = epl::nn;
using epl::comm::Buffer;
using epl::comm::ReduceOp;

namespace {
struct Injector {
  std::string fault = "none", where = "forward";
  int rank = 1;
  std::int64_t at_step = 2;
  double timeout_s = 1;
  std::array<std::atomic<std::int64_t>, 64> step{};
  std::atomic<bool> fired{false};

  void hit(const char* here) {
    const int r = epl::current_rank();
    if (fault == "none" || where != here || r != rank || step[static_cast<std::size_t>(r)].load() != at_step) return;
    if (fired.exchange(true)) return;
    std::fprintf(stderr, "[rank %d] fault-worker: injecting '%s' in %s at step %lld\n", r, fault.c_str(), here,
                 static_cast<long long>(at_step));
    if (fault == "throw") EPL_FAIL("injected fault: throw in ", here, " at step ", at_step);
    if (fault == "stall") std::this_thread::sleep_for(std::chrono::duration<double>(3 * timeout_s));
    if (fault == "hang")
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (fault == "kill") std::raise(SIGKILL);
    if (fault == "nonstd") throw 42;
  }
  // Whether this rank leaves out step s (the return and skip faults, at the training loop).
  bool leaves_out(std::int64_t s, bool& stop) {
    const int r = epl::current_rank();
    if ((fault != "return" && fault != "skip") || r != rank || s != at_step) return false;
    std::fprintf(stderr, "[rank %d] fault-worker: %s at step %lld\n", r, fault == "return" ? "returning" : "skipping",
                 static_cast<long long>(s));
    stop = fault == "return";
    return true;
  }
};
Injector g_injector;

// A layer that is the identity, with the "forward" injection point.
struct Probe {
  template <class Ctx> epl::Tensor forward(Ctx&, const epl::Tensor& x) {
    g_injector.hit("forward");
    return x;
  }
  template <class Ctx> epl::Tensor backward(Ctx&, const epl::Tensor& dy) { return dy; }
};
struct Net {
  nn::Linear fc1;
  Probe probe;
  nn::ReLU act;
  nn::Linear fc2;
};
// The same with a column- and row-parallel pair split over the 3 ranks.
struct SplitNet {
  nn::Linear fc1;
  Probe probe;
  epl::Split<3, nn::Linear, nn::ReLU, nn::Linear> mlp;
};

// SGD with the "optimizer" injection point.
struct FaultySGD {
  using Options = epl::optim::SGD::Options;
  static constexpr int kStateSlots = 0;
  epl::optim::SGD inner;
  template <class D>
  void update(const D& d, const epl::Tensor& v, const epl::Tensor& g, std::span<const epl::Tensor> s, std::int64_t step) const {
    g_injector.hit("optimizer");
    inner.update(d, v, g, s, step);
  }
  [[nodiscard]] const Options& options() const noexcept { return inner.options(); }
};

// A communicator that forwards to another, with the "collective" injection point where a
// gradient all-reduce starts.
class FaultyComm {
 public:
  explicit FaultyComm(epl::comm::Communicator inner) : inner_(std::move(inner)) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::string name() const { return inner_.name(); }
  epl::comm::CommStats stats() const { return inner_.stats(); }
  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    g_injector.hit("tensor");  // a split part's forward or backward reduction (the data-parallel layouts reduce asynchronously)
    inner_.all_reduce(in, out, op);
  }
  epl::comm::Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    g_injector.hit("collective");
    return inner_.all_reduce_async(in, out, op);
  }
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) { inner_.reduce_scatter(in, out, op); }
  epl::comm::Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) { return inner_.reduce_scatter_async(in, out, op); }
  void all_gather(const Buffer& in, const Buffer& out) { inner_.all_gather(in, out); }
  epl::comm::Work all_gather_async(const Buffer& in, const Buffer& out) {
    g_injector.hit("gather");
    return inner_.all_gather_async(in, out);
  }
  void broadcast(const Buffer& b, int root) { inner_.broadcast(b, root); }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) { inner_.reduce(in, out, op, root); }
  void all_to_all(const Buffer& in, const Buffer& out) { inner_.all_to_all(in, out); }
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& s, const Buffer& out, const std::vector<std::int64_t>& r) {
    inner_.all_to_all_v(in, s, out, r);
  }
  void send(const Buffer& b, int dst, int tag) {
    g_injector.hit("send");
    inner_.send(b, dst, tag);
  }
  void recv(const Buffer& b, int src, int tag) { inner_.recv(b, src, tag); }
  epl::comm::Work isend(const Buffer& b, int dst, int tag) {
    g_injector.hit("send");
    return inner_.isend(b, dst, tag);
  }
  epl::comm::Work irecv(const Buffer& b, int src, int tag) { return inner_.irecv(b, src, tag); }
  void barrier() { inner_.barrier(); }
  FaultyComm split(int color, int key) { return FaultyComm(inner_.split(color, key)); }
  void cancel(const std::string& reason) noexcept { inner_.cancel(reason); }

 private:
  epl::comm::Communicator inner_;
};
static_assert(epl::comm::communicator<FaultyComm>);

// Trains model on ctx for `steps` steps, each rank on its data-parallel share's rows.
template <class Model, class Policy = epl::Policies<>>
void train(epl::Context& ctx, const epl::Config& cfg, Model model, std::int64_t steps) {
  const int r = ctx.rank();
  epl::TrainerOptions o;
  o.checkpoint_phase = [](std::string_view phase) {
    if (phase == "shards written") g_injector.hit("save");
  };
  epl::Trainer<Model, FaultySGD, Policy> trainer(ctx, cfg, std::move(model), FaultySGD{epl::optim::SGD({.lr = 0.1})}, o);
  const std::int64_t rows = 6;
  const int shard = trainer.data_shard().rank;  // the ranks of a split group or a pipeline read the same rows
  epl::Tensor x = ctx.cpu().empty({rows, 8}, epl::DType::kF32), y = ctx.cpu().empty({rows}, epl::DType::kI32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.span<float>()[i] = static_cast<float>(epl::uniform01(5, static_cast<std::uint64_t>(i + 100 * shard)));
  for (std::int64_t i = 0; i < rows; ++i) y.span<std::int32_t>()[i] = static_cast<std::int32_t>(i % 4);
  for (std::int64_t s = trainer.steps() + 1; s <= steps; ++s) {
    g_injector.step[static_cast<std::size_t>(r)] = s;
    bool stop = false;
    if (g_injector.leaves_out(s, stop)) {
      if (stop) return;
      continue;
    }
    (void)trainer.step({x, y});
  }
}
}  // namespace

int main(int argc, char** argv) try {
  const epl::Flag<std::string> fault{"fault", "none", "what goes wrong", {.choices = {"none", "throw", "startup", "stall", "hang", "kill", "return", "skip", "nonstd"}}};
  const epl::Flag<std::string> where{"where", "forward", "where it goes wrong",
                                     {.choices = {"forward", "collective", "optimizer", "send", "tensor", "gather", "save"}}};
  const epl::Flag<std::int64_t> fault_rank{"fault_rank", 1, "the rank that fails", {.min = 0, .max = 63}};
  const epl::Flag<std::int64_t> at_step{"at_step", 2, "the step in which it fails", {.min = 1}};
  const epl::Flag<std::int64_t> steps{"steps", 4, "steps to train", {.min = 1}};
  const epl::Flag<std::string> run_id{"run_id", "", "a marker to find this run's processes by"};
  const epl::Flag<std::int64_t> launch_ranks{"launch_ranks", 0, "LaunchOptions::ranks (unchecked here: launch checks it)"};
  const epl::Flag<std::int64_t> launch_threads{"launch_threads", 0, "LaunchOptions::threads_per_rank (unchecked here: launch checks it)"};
  auto cfg = epl::Config::from_args(argc, argv, fault, where, fault_rank, at_step, steps, run_id, launch_ranks, launch_threads);
  g_injector.fault = cfg.get(fault);
  g_injector.where = cfg.get(where);
  g_injector.rank = static_cast<int>(cfg.get(fault_rank));
  g_injector.at_step = cfg.get(at_step);
  g_injector.timeout_s = cfg.get(epl::keys::timeout);
  return epl::launch(cfg, [&](epl::Context& launched) {
    const int r = launched.rank();
    if (g_injector.fault == "startup" && r == g_injector.rank) EPL_FAIL("injected fault: failed at start-up, before any collective");
    epl::Context ctx(epl::comm::Communicator(FaultyComm(epl::comm::Communicator::borrow(launched.world()))), r, 1);
    const std::string at = g_injector.where;
    epl::Config c = cfg;
    auto net = [] { return Net{nn::Linear(8, 16), {}, {}, nn::Linear(16, 4)}; };
    if (at == "send") {  // cut into 3 pipeline stages
      c.set("pipeline.num_stages", 3);
      c.set("auto.auto_parallel", true);
      c.set("pipeline.num_micro_batch", 3);
      train(ctx, c, net(), cfg.get(steps));
    } else if (at == "tensor") {
      train(ctx, c, SplitNet{nn::Linear(8, 16), {}, epl::Split<3, nn::Linear, nn::ReLU, nn::Linear>(nn::Linear(16, 24), {}, nn::Linear(24, 4))},
            cfg.get(steps));
    } else if (at == "gather") {
      c.set("zero.level", "v2");
      train<Net, epl::Policies<epl::Zero<3>>>(ctx, c, net(), cfg.get(steps));
    } else {
      train(ctx, c, net(), cfg.get(steps));
    }
    std::fprintf(stderr, "[rank %d] fault-worker: finished %lld steps\n", r, static_cast<long long>(cfg.get(steps)));
  }, {.ranks = static_cast<int>(cfg.get(launch_ranks)), .threads_per_rank = static_cast<int>(cfg.get(launch_threads))});
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
