#pragma once
/// \file
/// \brief What every rank of a group must learn together: each rank's text (all_gather_text), and
/// whether an operation succeeded on all of them (on_every_rank), so that a failure on one rank
/// fails the operation on every rank with its message instead of leaving the others waiting in
/// their next collective.
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "epl/comm/any_communicator.hpp"

namespace epl {
inline namespace v0 {

namespace detail {
/// Every rank's text, in rank order, on every rank of group (two all_gathers: lengths, then the
/// bytes padded to the longest).
inline std::vector<std::string> all_gather_text(comm::Communicator& group, const std::string& mine) {
  const int n = group.size();
  std::int64_t len = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n));
  group.all_gather(comm::Buffer(&len, 1, DType::kI64), comm::Buffer(lens.data(), n, DType::kI64));
  const std::int64_t words = (*std::max_element(lens.begin(), lens.end()) + 7) / 8;
  std::vector<std::uint64_t> padded(static_cast<std::size_t>(std::max<std::int64_t>(words, 1)), 0),
      all(static_cast<std::size_t>(n) * padded.size());
  std::memcpy(padded.data(), mine.data(), mine.size());
  group.all_gather(comm::Buffer(padded.data(), static_cast<std::int64_t>(padded.size()), DType::kI64),
                   comm::Buffer(all.data(), static_cast<std::int64_t>(all.size()), DType::kI64));
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r)
    texts.emplace_back(reinterpret_cast<const char*>(all.data() + static_cast<std::size_t>(r) * padded.size()),
                       static_cast<std::size_t>(lens[static_cast<std::size_t>(r)]));
  return texts;
}

/// Runs fn on every rank of group and then agrees on the outcome, so that an error on one rank
/// ends the operation on all of them: the failing rank rethrows its error, the others fail with it
/// (on thread ranks only the first error a process sees is printed, so each carries the cause).
template <class Fn>
void on_every_rank(comm::Communicator& group, const std::string& what, Fn&& fn) {
  std::exception_ptr error;
  std::string message;
  try {
    fn();
  } catch (const Error& e) {
    error = std::current_exception();
    message = e.what();
  } catch (const std::exception& e) {  // a filesystem error, say: named with what failed
    message = concat(what, " failed: ", e.what());
    error = std::make_exception_ptr(Error(message, __FILE__, __LINE__));
  }
  const auto all = all_gather_text(group, message);
  if (error) std::rethrow_exception(error);
  for (int r = 0; r < group.size(); ++r)
    EPL_CHECK(all[static_cast<std::size_t>(r)].empty(), what, " failed on rank ", r, ": ", all[static_cast<std::size_t>(r)]);
}
}  // namespace detail

}  // namespace v0
}  // namespace epl
