#pragma once
/// \file
/// \brief comm::SoloCommunicator — a world of one rank: every collective is a copy of the rank's
/// own data (or nothing), and what it sends itself it receives. A single-device run is this world:
/// the same code as N ranks, with no thread, lock or timeout behind it (and no backend to compile).
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "epl/comm/communicator.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief The communicator of a world of one. Models comm::communicator.
class SoloCommunicator {
 public:
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
    if (send[0] > 0 && in.data != out.data) std::memcpy(out.data, in.data, static_cast<std::size_t>(send[0]) * size_of(in.dtype));
  }
  void send(const Buffer& b, int dst, int tag) {
    check_rank(dst, "send");
    const auto* p = static_cast<const char*>(b.data);
    mailbox_.push_back({tag, b.dtype, std::vector<char>(p, p + b.bytes())});
  }
  void recv(const Buffer& b, int src, int tag) {
    check_rank(src, "recv");
    for (auto it = mailbox_.begin(); it != mailbox_.end(); ++it) {
      if (it->tag != tag) continue;
      EPL_CHECK(it->dtype == b.dtype && it->bytes.size() == b.bytes(), "recv on group 'solo': expected ", b.count, " ",
                name_of(b.dtype), " elements, the message holds ", it->bytes.size(), " bytes of ", name_of(it->dtype));
      std::memcpy(b.data, it->bytes.data(), it->bytes.size());
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
  [[nodiscard]] SoloCommunicator split(int, int) const { return {}; }
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
  static void copy(const Buffer& in, const Buffer& out, const char* op) {
    EPL_CHECK(in.count == out.count && in.dtype == out.dtype, op, " on group 'solo': input ", in.count, " ", name_of(in.dtype),
              " and output ", out.count, " ", name_of(out.dtype), " elements must match in a world of one");
    if (in.data != out.data && in.count > 0) std::memcpy(out.data, in.data, in.bytes());
  }
  std::deque<Message> mailbox_;
};

static_assert(communicator<SoloCommunicator>);

}  // namespace comm
}  // namespace v0
}  // namespace epl
