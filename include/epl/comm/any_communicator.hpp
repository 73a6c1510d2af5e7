#pragma once
/// \file
/// \brief comm::Communicator — any communicator behind one type: a thread rank, an MPI process
/// or an NCCL rank, owned or borrowed.
///
/// Backends stay types of their own (each models comm::communicator); this handle is what the
/// layers above hold, so a Trainer, a mesh and a layer's context are written once rather than
/// instantiated per backend, and epl::launch picks the backend at run time. A collective is
/// microseconds to milliseconds of work, so the one virtual call per operation costs nothing
/// measurable. Each buffer's memory space is checked against the backend's: a host pointer
/// handed to NCCL is an error naming both, not a crash inside the library.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "epl/comm/communicator.hpp"
#include "epl/comm/solo.hpp"
#include "epl/core/timeline.hpp"
#include "epl/device/lane.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

namespace detail {
struct CommunicatorBase {
  virtual ~CommunicatorBase() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  virtual CommStats stats() const = 0;
  virtual MemorySpace space() const = 0;
  virtual bool reaches(MemorySpace s) const = 0;
  virtual bool checks_spaces() const = 0;
  virtual void attach(std::shared_ptr<device::Lane> lane) = 0;
  virtual void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) = 0;
  virtual Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) = 0;
  virtual void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) = 0;
  virtual Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) = 0;
  virtual void all_gather(const Buffer& in, const Buffer& out) = 0;
  virtual Work all_gather_async(const Buffer& in, const Buffer& out) = 0;
  virtual void broadcast(const Buffer& buf, int root) = 0;
  virtual void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) = 0;
  virtual void all_to_all(const Buffer& in, const Buffer& out) = 0;
  virtual void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send, const Buffer& out,
                            const std::vector<std::int64_t>& recv) = 0;
  virtual void send(const Buffer& buf, int dst, int tag) = 0;
  virtual void recv(const Buffer& buf, int src, int tag) = 0;
  virtual Work isend(const Buffer& buf, int dst, int tag) = 0;
  virtual Work irecv(const Buffer& buf, int src, int tag) = 0;
  virtual void barrier() = 0;
  virtual std::unique_ptr<CommunicatorBase> split(int color, int key) = 0;
  virtual void cancel(const std::string& reason) noexcept = 0;
};

// C held by value (owned) or by pointer (borrowed); `get()` is the backend either way.
template <class C, bool kOwned>
class CommunicatorModel final : public CommunicatorBase {
 public:
  using Stored = std::conditional_t<kOwned, C, C*>;
  // One constructor, not one per kOwned under `requires`: clang 14 instantiates both in an
  // explicit instantiation (src/precompiled.cpp), unsatisfied constraint or not.
  explicit CommunicatorModel(Stored c) : c_(std::move(c)) {}

  int rank() const override { return get().rank(); }
  int size() const override { return get().size(); }
  std::string name() const override { return std::string(get().name()); }
  CommStats stats() const override { return get().stats(); }
  MemorySpace space() const override { return space_of_v<C>; }
  bool reaches(MemorySpace s) const override {
    if constexpr (requires { get().reaches(s); }) return get().reaches(s);
    else return s == space_of_v<C>;
  }
  bool checks_spaces() const override {
    if constexpr (requires { C::kChecksSpacesInStep; }) return C::kChecksSpacesInStep;
    else return false;
  }
  void attach(std::shared_ptr<device::Lane> lane) override {
    if constexpr (requires { get().attach(lane); }) get().attach(std::move(lane));
    else
      EPL_CHECK(reaches(MemorySpace::kDevice), "the communicator of group '", name(), "' moves host memory only and cannot reach ",
                lane->device().str(), "'s buffers: train a GPU's ranks over thread ranks (comm::run_threads, each rank its own "
                "device on the shared GPU) or NCCL (one rank per GPU), or train this backend's ranks on their CPUs");
  }
  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) override { get().all_reduce(in, out, op); }
  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) override { return get().all_reduce_async(in, out, op); }
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) override { get().reduce_scatter(in, out, op); }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) override {
    return get().reduce_scatter_async(in, out, op);
  }
  void all_gather(const Buffer& in, const Buffer& out) override { get().all_gather(in, out); }
  Work all_gather_async(const Buffer& in, const Buffer& out) override { return get().all_gather_async(in, out); }
  void broadcast(const Buffer& buf, int root) override { get().broadcast(buf, root); }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) override { get().reduce(in, out, op, root); }
  void all_to_all(const Buffer& in, const Buffer& out) override { get().all_to_all(in, out); }
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send, const Buffer& out,
                    const std::vector<std::int64_t>& recv) override {
    get().all_to_all_v(in, send, out, recv);
  }
  void send(const Buffer& buf, int dst, int tag) override { get().send(buf, dst, tag); }
  void recv(const Buffer& buf, int src, int tag) override { get().recv(buf, src, tag); }
  Work isend(const Buffer& buf, int dst, int tag) override { return get().isend(buf, dst, tag); }
  Work irecv(const Buffer& buf, int src, int tag) override { return get().irecv(buf, src, tag); }
  void barrier() override { get().barrier(); }
  std::unique_ptr<CommunicatorBase> split(int color, int key) override {
    return std::make_unique<CommunicatorModel<C, true>>(get().split(color, key));
  }
  void cancel(const std::string& reason) noexcept override { get().cancel(reason); }

 private:
  C& get() const {
    if constexpr (kOwned) return const_cast<C&>(c_);
    else return *c_;
  }
  Stored c_;
};
}  // namespace detail

/// \brief Any communicator (comm::communicator), owned or borrowed, behind one type. Models
/// comm::communicator itself; move-only.
class Communicator {
 public:
  Communicator() = default;
  /// \brief Takes ownership of a backend communicator.
  template <communicator C>
    requires(!std::is_same_v<std::remove_cvref_t<C>, Communicator> && !std::is_lvalue_reference_v<C>)
  explicit Communicator(C&& c) : impl_(std::make_unique<detail::CommunicatorModel<C, true>>(std::move(c))) {}
  /// \brief Refers to a backend communicator that outlives this handle.
  template <communicator C>
  static Communicator borrow(C& c) {
    Communicator h;
    h.impl_ = std::make_unique<detail::CommunicatorModel<C, false>>(&c);
    return h;
  }

  /// \brief The world of one rank (a single-device run) on host memory.
  static Communicator solo() { return Communicator(SoloCommunicator{}); }
  /// \brief The world of one rank on a device's memory: `copy` moves bytes in the device's order
  /// (device::Cuda::copy_bytes), host memory as well.
  static Communicator solo(SoloCommunicator::Copy copy) { return Communicator(SoloCommunicator(std::move(copy))); }

  /// \brief The world of one rank on device d: a device with `copy_bytes` (a GPU) moves its buffers
  /// with it, in its stream's order; host memory otherwise.
  template <class D>
  static Communicator solo_on(const D& d) {
    if constexpr (requires { d.copy_bytes(nullptr, nullptr, std::size_t{0}); })
      return solo([&d](void* dst, const void* src, std::size_t n) { d.copy_bytes(dst, src, n); });
    else return solo();
  }

  [[nodiscard]] bool valid() const noexcept { return impl_ != nullptr; }
  [[nodiscard]] int rank() const { return impl().rank(); }
  [[nodiscard]] int size() const { return impl().size(); }
  [[nodiscard]] std::string name() const { return impl().name(); }
  [[nodiscard]] CommStats stats() const { return impl().stats(); }
  /// \brief Where the buffers this backend moves natively live (a solo world made with a device's
  /// copy, and NCCL through staging, reach the other space too: reaches()).
  [[nodiscard]] MemorySpace space() const { return impl().space(); }
  /// \brief Whether this communicator moves buffers in space s.
  [[nodiscard]] bool reaches(MemorySpace s) const { return impl().reaches(s); }
  /// \brief This rank's device buffers move through `lane` (the device's: device.lane()) from now
  /// on, in this group and the groups split from it later: thread ranks that share a GPU move its
  /// memory without the host. A backend that reaches device memory by itself (NCCL, a world of
  /// one made with the device's copy) keeps its way; one that cannot reach it (MPI) is an error
  /// naming the fix. A Trainer built on a device with a lane attaches it.
  void attach(std::shared_ptr<device::Lane> lane) {
    EPL_CHECK(lane != nullptr, "attach: no lane given (a device's lane())");
    impl().attach(std::move(lane));
  }

  /// \brief Records every blocking collective of this handle as a span on `t`'s communication lane,
  /// named for the operation and `label` (the group's name when empty): "all_reduce tensor", category
  /// "all_reduce"; null stops. Asynchronous collectives are recorded by whoever waits for them (the
  /// reducers), sends and receives by the pipeline's executor.
  void set_timeline(Timeline* t, std::string label = {}) {
    timeline_ = t;
    label_ = std::move(label);
  }

  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp op) {
    const SpanScope span = traced("all_reduce");
    impl(in, out, "all_reduce").all_reduce(in, out, op);
  }
  void all_reduce(const Buffer& inout, ReduceOp op) { all_reduce(inout, inout, op); }
  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return impl(in, out, "all_reduce").all_reduce_async(in, out, op);
  }
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp op) {
    const SpanScope span = traced("reduce_scatter");
    impl(in, out, "reduce_scatter").reduce_scatter(in, out, op);
  }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    return impl(in, out, "reduce_scatter").reduce_scatter_async(in, out, op);
  }
  void all_gather(const Buffer& in, const Buffer& out) {
    const SpanScope span = traced("all_gather");
    impl(in, out, "all_gather").all_gather(in, out);
  }
  Work all_gather_async(const Buffer& in, const Buffer& out) { return impl(in, out, "all_gather").all_gather_async(in, out); }
  void broadcast(const Buffer& buf, int root) {
    const SpanScope span = traced("broadcast");
    impl(buf, buf, "broadcast").broadcast(buf, root);
  }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp op, int root) {
    const SpanScope span = traced("reduce");
    impl(in, out, "reduce").reduce(in, out, op, root);
  }
  void all_to_all(const Buffer& in, const Buffer& out) {
    const SpanScope span = traced("all_to_all");
    impl(in, out, "all_to_all").all_to_all(in, out);
  }
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send, const Buffer& out, const std::vector<std::int64_t>& recv) {
    const SpanScope span = traced("all_to_all");
    impl(in, out, "all_to_all").all_to_all_v(in, send, out, recv);
  }
  void send(const Buffer& buf, int dst, int tag) { impl(buf, buf, "send").send(buf, dst, tag); }
  void recv(const Buffer& buf, int src, int tag) { impl(buf, buf, "recv").recv(buf, src, tag); }
  Work isend(const Buffer& buf, int dst, int tag) { return impl(buf, buf, "send").isend(buf, dst, tag); }
  Work irecv(const Buffer& buf, int src, int tag) { return impl(buf, buf, "recv").irecv(buf, src, tag); }
  void barrier() {
    const SpanScope span = traced("barrier");
    impl().barrier();
  }
  [[nodiscard]] Communicator split(int color, int key) {
    Communicator h;
    h.impl_ = impl().split(color, key);
    return h;
  }
  void cancel(const std::string& reason) noexcept {
    if (impl_) impl_->cancel(reason);
  }

 private:
  detail::CommunicatorBase& impl() const {
    EPL_CHECK(impl_ != nullptr, "use of an empty comm::Communicator (default-constructed or moved from)");
    return *impl_;
  }
  detail::CommunicatorBase& impl(const Buffer& a, const Buffer& b, const char* op) const {
    auto& c = impl();
    for (const Buffer* x : {&a, &b}) {
      EPL_CHECK(x->count >= 0, op, " on group '", c.name(), "': a buffer of ", x->count, " elements; an element count is never negative");
      // a backend that checks spaces inside its collective fails every rank of the group in step
      EPL_CHECK(x->count == 0 || c.reaches(x->space) || c.checks_spaces(), op, " on group '", c.name(), "': a buffer in ", name_of(x->space),
                " memory passed to a communicator of ", name_of(c.space()), " memory (",
                c.space() == MemorySpace::kDevice ? "NCCL moves device memory: copy host values to the device first"
                : c.name() == "solo" ? "a world of one made by Communicator::solo() moves host memory; make it with the device's "
                                       "copy, Communicator::solo(copy), to move a device's buffers"
                                     : "this backend moves host memory: copy device values to the host first",
                ")");
    }
    return c;
  }
  // A span of `op` on this group while tracing; nothing (one branch) otherwise.
  [[nodiscard]] SpanScope traced(const char* op) const {
    return SpanScope(timeline_, timeline_ ? std::string(op) + " " + (label_.empty() ? impl().name() : label_) : std::string(), op,
                     Span::Lane::kCommunication);
  }
  std::unique_ptr<detail::CommunicatorBase> impl_;
  Timeline* timeline_ = nullptr;
  std::string label_;
};

static_assert(communicator<Communicator>);

// A program linked with epl::precompiled (EPL_PRECOMPILED) takes the type-erased models of the
// host backends from that library instead of compiling every collective of each backend itself.
#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)
extern template class detail::CommunicatorModel<SoloCommunicator, true>;
extern template class detail::CommunicatorModel<SoloCommunicator, false>;
#endif

}  // namespace comm
}  // namespace v0
}  // namespace epl
