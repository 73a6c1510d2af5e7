#pragma once
/// \file
/// \brief Store — how ranks find each other before they can talk: a key-value board with a
/// blocking, timed get. It carries bootstrap data such as NCCL's unique id. Backends: in
/// process (thread ranks), a shared directory (processes on one machine or a shared file
/// system, keyed per run), and MPI (comm/mpi/store.hpp).
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epl/core/error.hpp"
#include "epl/core/files.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

/// \brief S satisfies store if set(key, bytes) publishes and get(key) waits for a value.
template <class S>
concept store = requires(S& s, const std::string& k, const std::vector<char>& v) {
  s.set(k, v);
  { s.get(k) } -> std::same_as<std::vector<char>>;
};

/// \brief Threads of one process.
class InProcessStore {
 public:
  explicit InProcessStore(std::chrono::milliseconds timeout = std::chrono::seconds(300)) : timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& value) {
    {
      std::lock_guard lock(mutex_);
      values_[key] = value;
    }
    cv_.notify_all();
  }
  std::vector<char> get(const std::string& key) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout_, [&] { return values_.count(key) > 0; }))
      EPL_FAIL("store key \"", key, "\" was not published within ", timeout_.count(), " ms; the rank that sets it did not start or failed");
    return values_[key];
  }

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> values_;
};

/// \brief Files in a directory every rank can see, under a per-run key so that two runs
/// sharing the directory never read each other's values. A value is written to a temporary
/// name and renamed, so a reader never sees half a value.
class FileStore {
 public:
  FileStore(std::filesystem::path dir, std::string run_key, std::chrono::milliseconds timeout = std::chrono::seconds(300))
      : dir_(std::move(dir)), run_(std::move(run_key)), timeout_(timeout) {
    EPL_CHECK(!run_.empty() && run_.find('/') == std::string::npos, "FileStore: the run key \"", run_,
              "\" must be non-empty and contain no '/'");
    std::filesystem::create_directories(dir_);
  }
  void set(const std::string& key, const std::vector<char>& value) {
    // a temporary file of its own renamed into place (epl/core/files.hpp): a reader never sees
    // half a value, and nothing is written through a link planted in the shared directory
    const files::Folder folder(dir_, "store directory");
    const std::string name = file(key).filename().string();
    files::NewFile f = files::NewFile::temporary(folder, name, "store value");
    f.write(value.data(), value.size());
    f.commit(name);
  }
  std::vector<char> get(const std::string& key) {
    const files::Folder folder(dir_, "store directory");
    const std::string name = file(key).filename().string();
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (folder.kind(name) == files::Kind::kMissing) {
      if (std::chrono::steady_clock::now() >= deadline)
        EPL_FAIL("FileStore: key \"", key, "\" of run \"", run_, "\" did not appear in ", dir_, " within ", timeout_.count(),
                 " ms; the rank that sets it did not start, failed, or uses another directory or run key");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string text = files::read_file(folder, name, "store value");  // a link or a FIFO there is an error, not a hang
    return {text.begin(), text.end()};
  }
  /// \brief Removes this run's files.
  void clear() {
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      if (e.path().filename().string().rfind(run_ + ".", 0) == 0) std::filesystem::remove(e.path());
  }

 private:
  std::filesystem::path file(const std::string& key) const {
    std::string safe = key;
    for (char& ch : safe)
      if (ch == '/') ch = '_';
    return dir_ / (run_ + "." + safe);
  }
  std::filesystem::path dir_;
  std::string run_;
  std::chrono::milliseconds timeout_;
};

static_assert(store<InProcessStore>);
static_assert(store<FileStore>);

}  // namespace comm
}  // namespace v0
}  // namespace epl
