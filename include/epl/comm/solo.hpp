#pragma once
/// \file
/// \brief comm::SoloCommunicator — a world of one rank: every collective is a copy of the rank's
/// own data (or nothing), and what it sends itself it receives. A single-device run is this world:
/// the same code as N ranks, with no thread, lock or timeout behind it (and no backend to compile).
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "epl/comm/communicator.hpp"
#include "epl/device/lane.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief The communicator of a world of one. Models comm::communicator.
class SoloCommunicator {
 public:
  /// Moves n bytes from src to dst wherever they live (a device's copy, in its stream's order).
  using Copy = std::function<void(void* dst, const void* src, std::size_t n)>;
  /// \brief Host memory only.
  SoloCommunicator() = default;
  /// \brief Host and device memory: buffers of a device are moved by `copy` (the world of one
  /// rank that trains on a GPU).
  explicit SoloCommunicator(Copy copy) : copy_(std::move(copy)) {}

  /// \brief Moves a device's buffers through its lane, unless made with a copy already.
  void attach(const std::shared_ptr<device::Lane>& lane) {
    if (copy_) return;
    copy_ = [lane](void* dst, const void* src, std::size_t n) { lane->copy_now(dst, src, n); };
  }
  /// Whether it moves buffers in space s: host memory always, a device's with a Copy.
  [[nodiscard]] bool reaches(MemorySpace s) const noexcept { return s == MemorySpace::kHost || copy_ != nullptr; }
  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] std::string_view name() const noexcept { return "solo"; }
  [[nodiscard]] CommStats stats() const noexcept { return {}; }  // a world of one moves nothing

  void all_reduce(const Buffer& in, const Buffer& out, ReduceOp) { copy(in, out, "all_reduce"); }
  Work all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    all_reduce(in, out, op);
    return Work::done();
  }
  void reduce_scatter(const Buffer& in, const Buffer& out, ReduceOp) { copy(in, out, "reduce_scatter"); }
  Work reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op) {
    reduce_scatter(in, out, op);
    return Work::done();
  }
  void all_gather(const Buffer& in, const Buffer& out) { copy(in, out, "all_gather"); }
  Work all_gather_async(const Buffer& in, const Buffer& out) {
    all_gather(in, out);
    return Work::done();
  }
  void broadcast(const Buffer&, int root) { check_rank(root, "broadcast"); }
  void reduce(const Buffer& in, const Buffer& out, ReduceOp, int root) {
    check_rank(root, "reduce");
    copy(in, out, "reduce");
  }
  void all_to_all(const Buffer& in, const Buffer& out) { copy(in, out, "all_to_all"); }
  void all_to_all_v(const Buffer& in, const std::vector<std::int64_t>& send, const Buffer& out, const std::vector<std::int64_t>& recv) {
    detail::check_all_to_all_counts(in, send, out, recv, 1, "solo");
    EPL_CHECK(send[0] == recv[0], "all_to_all_v on group 'solo': sends ", send[0], " elements to itself and receives ", recv[0]);
    if (send[0] > 0 && in.data != out.data) move(out, in, static_cast<std::size_t>(send[0]) * size_of(in.dtype));
  }
  void send(const Buffer& b, int dst, int tag) {
    check_rank(dst, "send");
    std::vector<char> bytes(b.bytes());
    if (!bytes.empty()) move(Buffer(bytes.data(), b.count, b.dtype), b, bytes.size());
    mailbox_.push_back({tag, b.dtype, std::move(bytes)});
  }
  void recv(const Buffer& b, int src, int tag) {
    check_rank(src, "recv");
    for (auto it = mailbox_.begin(); it != mailbox_.end(); ++it) {
      if (it->tag != tag) continue;
      EPL_CHECK(it->dtype == b.dtype && it->bytes.size() == b.bytes(), "recv on group 'solo': expected ", b.count, " ",
                name_of(b.dtype), " elements, the message holds ", it->bytes.size(), " bytes of ", name_of(it->dtype));
      if (!it->bytes.empty()) move(b, Buffer(it->bytes.data(), b.count, b.dtype), it->bytes.size());
      mailbox_.erase(it);
      return;
    }
    EPL_FAIL("recv on group 'solo' (a world of one rank) with tag ", tag, ": this rank sent itself no such message, and no other "
             "rank exists to send one");
  }
  Work isend(const Buffer& b, int dst, int tag) {
    send(b, dst, tag);
    return Work::done();
  }
  Work irecv(const Buffer& b, int src, int tag) {
    recv(b, src, tag);
    return Work::done();
  }
  void barrier() noexcept {}
  [[nodiscard]] SoloCommunicator split(int, int) const { return SoloCommunicator(copy_); }
  void cancel(const std::string&) noexcept {}

 private:
  struct Message {
    int tag;
    DType dtype;
    std::vector<char> bytes;
  };
  static void check_rank(int r, const char* op) {
    EPL_CHECK(r == 0, op, " on group 'solo' names rank ", r, ", but a world of one has rank 0 only");
  }
  void copy(const Buffer& in, const Buffer& out, const char* op) const {
    EPL_CHECK(in.count == out.count && in.dtype == out.dtype, op, " on group 'solo': input ", in.count, " ", name_of(in.dtype),
              " and output ", out.count, " ", name_of(out.dtype), " elements must match in a world of one");
    if (in.data != out.data && in.count > 0) move(out, in, in.bytes());
  }
  // n bytes from src to dst: memcpy between host buffers, the device's Copy where either is a device's.
  void move(const Buffer& dst, const Buffer& src, std::size_t n) const {
    if (dst.space == MemorySpace::kHost && src.space == MemorySpace::kHost) std::memcpy(dst.data, src.data, n);
    else {
      EPL_CHECK(copy_ != nullptr, "solo communicator: a buffer in device memory, and this world of one was made for host memory "
                "only; make it with the device's copy (comm::Communicator::solo(copy))");
      copy_(dst.data, src.data, n);
    }
  }
  std::deque<Message> mailbox_;
  Copy copy_;
};

static_assert(communicator<SoloCommunicator>);

}  // namespace comm
}  // namespace v0
}  // namespace epl
