#pragma once
/// \file
/// \brief comm::MpiStore — the Store that bootstraps NCCL among MPI processes (part of epl::mpi).
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "epl/comm/mpi/communicator.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief A Store over MPI: the root's set() and every other rank's get() of the same key are
/// one broadcast (so each is collective over the communicator: the root sets, the others get,
/// in the same order everywhere). Bootstraps NCCL among MPI processes.
class MpiStore {
 public:
  explicit MpiStore(MpiCommunicator& comm, int root = 0) : comm_(&comm), root_(root) {
    EPL_CHECK(root >= 0 && root < comm.size(), "MpiStore: root ", root, " is not a rank of a group of ", comm.size());
  }
  /// \brief At the root: publishes value to the ranks calling get(key).
  void set(const std::string& key, const std::vector<char>& value) {
    EPL_CHECK(comm_->rank() == root_, "MpiStore::set(\"", key, "\") on rank ", comm_->rank(), "; only the root (rank ", root_,
              ") sets, the others get");
    exchange(key, const_cast<std::vector<char>&>(value));
  }
  /// \brief On every rank but the root: receives what the root set under key.
  std::vector<char> get(const std::string& key) {
    EPL_CHECK(comm_->rank() != root_, "MpiStore::get(\"", key, "\") on the root; the root sets the value");
    std::vector<char> value;
    exchange(key, value);
    return value;
  }

 private:
  void exchange(const std::string& key, std::vector<char>& value) {
    std::int64_t header[2] = {static_cast<std::int64_t>(std::hash<std::string>{}(key) >> 1), static_cast<std::int64_t>(value.size())};
    const std::int64_t mine = header[0];
    comm_->broadcast(Buffer(header, 2, DType::kI64), root_);
    EPL_CHECK(header[0] == mine, "MpiStore: rank ", comm_->rank(), " asked for key \"", key,
              "\" while the root published another key; set and get must pair up in the same order");
    // The bytes travel as whole int32 words (MPI collectives here take typed elements); memcpy
    // only when there are bytes to copy, since an empty vector's data() may be null.
    std::vector<std::int32_t> words(static_cast<std::size_t>((header[1] + 3) / 4));
    if (words.empty()) {
      value.clear();
      return;
    }
    if (!value.empty()) std::memcpy(words.data(), value.data(), value.size());
    comm_->broadcast(Buffer(words.data(), static_cast<std::int64_t>(words.size()), DType::kI32), root_);
    value.resize(static_cast<std::size_t>(header[1]));
    std::memcpy(value.data(), words.data(), value.size());
  }
  MpiCommunicator* comm_;
  int root_;
};

}  // namespace comm
}  // namespace v0
}  // namespace epl
