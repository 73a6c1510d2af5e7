#pragma once
/// \file
/// \brief epl::files — how epl writes a file: never through a symbolic link, never over anything
/// but a regular file, never by truncating a file it did not create. Every writer of the library
/// (checkpoints, their lock and manifests, safetensors exports, traces, planner profiles,
/// benchmark results) goes through here.
///
/// The rule, and why each part holds it:
/// - A write is named relative to an open directory (files::Folder, openat): a path component
///   swapped for a link after it was checked cannot redirect the write.
/// - A new file is created with O_CREAT | O_EXCL | O_NOFOLLOW (files::NewFile), under a name no
///   one can guess (files::unique_name), so it never opens what was there: not a planted link,
///   not a FIFO (which would block), not another file.
/// - A finished file is renamed over its final name (NewFile::commit), and only over a regular
///   file or nothing: a link, a device node, a FIFO or a directory there is an error naming it.
///   A rename never follows a link at its target, so the race between that check and the rename
///   can only replace an entry of a folder the other party could already write.
/// - A file is read without following a link or waiting on a FIFO (files::read_file).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {
namespace files {

/// \brief What a folder entry is, its link not followed.
enum class Kind { kMissing, kRegular, kDirectory, kSymlink, kOther };

/// \brief A kind as words for a message ("a symbolic link").
inline const char* describe(Kind k) {
  switch (k) {
    case Kind::kMissing: return "missing";
    case Kind::kRegular: return "a regular file";
    case Kind::kDirectory: return "a directory";
    case Kind::kSymlink: return "a symbolic link";
    case Kind::kOther: return "a device, FIFO or socket";
  }
  return "?";
}

namespace detail {
inline Kind kind_of(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return Kind::kRegular;
  if (S_ISDIR(st.st_mode)) return Kind::kDirectory;
  if (S_ISLNK(st.st_mode)) return Kind::kSymlink;
  return Kind::kOther;
}
// The system's words for err, and what to do about the common ones.
inline std::string error_text(int err) {
  std::string text = std::strerror(err);
  switch (err) {
    case EACCES:
    case EPERM: return text + " (check its permissions: this process runs as uid " + std::to_string(::geteuid()) + ")";
    case ENOSPC:
    case EDQUOT: return text + " (the filesystem is full, or the quota spent: free space, or write elsewhere)";
    case EROFS: return text + " (a read-only filesystem: write elsewhere)";
    case EMFILE:
    case ENFILE: return text + " (too many open files: raise the limit, ulimit -n)";
    case EIO: return text + " (the disk or network filesystem failed: check it, then run again)";
    default: return text;
  }
}
}  // namespace detail

/// \brief A name no other process or thread picks: `.<base>.<pid>-<count>-<clock>.<suffix>`.
/// Creating it with O_EXCL is what makes it safe; the name only makes a clash unlikely.
inline std::string unique_name(std::string_view base, std::string_view suffix) {
  static std::atomic<std::uint64_t> counter{0};
  const auto clock = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
  char tail[80];
  std::snprintf(tail, sizeof tail, ".%ld-%llu-%llx.", static_cast<long>(::getpid()), static_cast<unsigned long long>(counter++),
                clock & 0xffffffffffull);
  std::string name;  // appended piece by piece: GCC 12 warns (-Wrestrict) on a chain of operator+
  name.reserve(base.size() + suffix.size() + 48);
  name.append(".").append(base).append(tail).append(suffix);
  return name;
}

/// \brief An open directory that writes and reads are named relative to. The folder's own path
/// may be a link (it is the user's choice of where to work); what epl makes and expects inside
/// it is checked not to be.
class Folder {
 public:
  Folder() = default;
  /// \brief Opens dir; `what` names it in errors ("checkpoint directory").
  Folder(const std::filesystem::path& dir, std::string what) : path_(dir), what_(std::move(what)) {
    const auto p = dir.empty() ? std::filesystem::path(".") : dir;
    fd_ = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EPL_CHECK(fd_ >= 0, "cannot open the ", what_, " ", p, ": ", detail::error_text(errno),
              errno == ENOTDIR ? "; it is not a directory" : "");
  }
  Folder(const Folder&) = delete;
  Folder& operator=(const Folder&) = delete;
  Folder(Folder&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), what_(std::move(o.what_)) {}
  Folder& operator=(Folder&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = std::exchange(o.fd_, -1);
      path_ = std::move(o.path_);
      what_ = std::move(o.what_);
    }
    return *this;
  }
  ~Folder() { close(); }

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

  /// \brief What entry `name` is, its link not followed.
  [[nodiscard]] Kind kind(std::string_view name) const {
    struct stat st {};
    if (::fstatat(fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      EPL_CHECK(errno == ENOENT, "cannot inspect ", path_ / name, ": ", detail::error_text(errno));
      return Kind::kMissing;
    }
    return detail::kind_of(st);
  }
  /// \brief The sub-directory `name`, which must be a directory and not a link to one.
  [[nodiscard]] Folder sub(std::string_view name, std::string what) const {
    Folder f;
    f.path_ = path_ / name;
    f.what_ = std::move(what);
    f.fd_ = ::openat(fd_, std::string(name).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (f.fd_ < 0) {
      const int err = errno;
      const Kind k = kind(name);
      EPL_CHECK(k == Kind::kDirectory, "the ", f.what_, " ", f.path_, " is ", describe(k),
                k == Kind::kMissing ? "" : " where epl expects a directory of its own; move it aside");
      EPL_FAIL("cannot open the ", f.what_, " ", f.path_, ": ", detail::error_text(err));
    }
    return f;
  }
  /// \brief Makes a new directory under a unique name built from `base` and `suffix`; returns the name.
  [[nodiscard]] std::string make_unique_dir(std::string_view base, std::string_view suffix) const {
    for (int attempt = 0;; ++attempt) {
      std::string name = unique_name(base, suffix);
      if (::mkdirat(fd_, name.c_str(), 0755) == 0) return name;
      EPL_CHECK(errno == EEXIST && attempt < 100, "cannot create a directory in the ", what_, " ", path_, ": ", detail::error_text(errno),
                "; give a directory this process can write");
    }
  }
  /// \brief Renames entry `from` to `to` (both here): replaces `to` only if it is missing, a regular
  /// file or (when `directory` is true) an empty directory; anything else is an error naming it.
  void rename(std::string_view from, std::string_view to) const {
    EPL_CHECK(::renameat(fd_, std::string(from).c_str(), fd_, std::string(to).c_str()) == 0, "cannot rename ", path_ / from, " to ",
              path_ / to, ": ", detail::error_text(errno));
  }
  /// \brief Removes entry `name` and, when it is a real directory, everything under it; a link is
  /// removed itself, never followed. Missing is fine.
  void remove_tree(std::string_view name) const {
    const std::string n(name);
    if (::unlinkat(fd_, n.c_str(), 0) == 0 || errno == ENOENT) return;
    if (errno != EISDIR && errno != EPERM) EPL_FAIL("cannot remove ", path_ / name, ": ", detail::error_text(errno));
    {
      const Folder inside = sub(name, what_);
      for (const auto& e : inside.list()) inside.remove_tree(e);
    }
    EPL_CHECK(::unlinkat(fd_, n.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT, "cannot remove ", path_ / name, ": ",
              detail::error_text(errno));
  }
  /// \brief The names of the entries (not "." and ".."); an error reading the folder is an error,
  /// never an empty list.
  [[nodiscard]] std::vector<std::string> list() const {
    const int again = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // fdopendir takes the descriptor over
    EPL_CHECK(again >= 0, "cannot list the ", what_, " ", path_, ": ", detail::error_text(errno));
    DIR* d = ::fdopendir(again);
    if (d == nullptr) {
      const int err = errno;
      ::close(again);
      EPL_FAIL("cannot list the ", what_, " ", path_, ": ", detail::error_text(err));
    }
    std::vector<std::string> names;
    int err = 0;
    while (true) {
      errno = 0;
      const dirent* e = ::readdir(d);
      if (e == nullptr) {
        err = errno;
        break;
      }
      const std::string_view n(e->d_name);
      if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(d);
    EPL_CHECK(err == 0, "reading the ", what_, " ", path_, " failed: ", detail::error_text(err));
    return names;
  }
  /// \brief Makes renames into this folder durable (a no-op where the filesystem cannot).
  void sync() const { (void)::fsync(fd_); }

 private:
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::filesystem::path path_;
  std::string what_;
};

/// \brief A file this process creates, never one that was there: O_CREAT | O_EXCL | O_NOFOLLOW
/// in a Folder. Destroyed before commit() or keep(), it removes itself (a failed write leaves
/// nothing behind).
class NewFile {
 public:
  /// \brief Creates `name` in folder (which must not hold it): for a folder this run made.
  NewFile(const Folder& folder, std::string name, std::string what) : folder_(&folder), name_(std::move(name)), what_(std::move(what)) {
    fd_ = ::openat(folder.fd(), name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    EPL_CHECK(fd_ >= 0, "cannot create the ", what_, " ", folder / name_, ": ", detail::error_text(errno),
              errno == EEXIST ? " (something is already there; epl does not write over what it did not make)" : "");
  }
  /// \brief A temporary file beside `final_name` in folder, to commit() over it when written.
  static NewFile temporary(const Folder& folder, std::string_view final_name, std::string what) {
    for (int attempt = 0;; ++attempt) {
      std::string name = unique_name(final_name, "tmp");
      const int fd = ::openat(folder.fd(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd >= 0) return NewFile(folder, std::move(name), std::move(what), fd);
      // the folder is open, so ENOENT is the filesystem refusing new names (procfs, sysfs), not a missing folder
      EPL_CHECK(errno == EEXIST && attempt < 100, "cannot create a file in ", folder.path(), " for the ", what, " ", folder / final_name,
                ": ", errno == ENOENT ? std::string("the folder takes no new files (a system folder such as /proc?)") : detail::error_text(errno),
                "; give a path in a folder this process can write");
    }
  }
  NewFile(const NewFile&) = delete;
  NewFile& operator=(const NewFile&) = delete;
  NewFile(NewFile&& o) noexcept
      : folder_(o.folder_), name_(std::move(o.name_)), what_(std::move(o.what_)), fd_(std::exchange(o.fd_, -1)),
        bytes_(o.bytes_), done_(std::exchange(o.done_, true)) {}
  ~NewFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) (void)::unlinkat(folder_->fd(), name_.c_str(), 0);
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::filesystem::path path() const { return *folder_ / name_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return bytes_; }

  /// \brief Appends n bytes.
  void write(const void* data, std::uint64_t n) {
    const auto* b = static_cast<const char*>(data);
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t w = ::write(fd_, b + done, n - done);
      EPL_CHECK(w > 0 || errno == EINTR, "writing the ", what_, " ", path(), " failed: ", detail::error_text(errno));
      if (w > 0) done += static_cast<std::uint64_t>(w);
    }
    bytes_ += n;
  }
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// \brief Flushes the file to the disk and closes it; returns its size.
  std::uint64_t sync() {
    EPL_CHECK(::fsync(fd_) == 0, "flushing the ", what_, " ", path(), " failed: ", detail::error_text(errno));
    const int rc = ::close(std::exchange(fd_, -1));
    EPL_CHECK(rc == 0, "closing the ", what_, " ", path(), " failed: ", detail::error_text(errno));
    return bytes_;
  }
  /// \brief Keeps the file under its own name (a file made in a folder this run made).
  void keep() {
    if (fd_ >= 0) sync();
    done_ = true;
  }
  /// \brief Syncs it and renames it over `final_name` in its folder: only over a regular file or
  /// nothing. A link, a device node, a FIFO or a directory there is an error naming it, and the
  /// temporary file is removed.
  void commit(std::string_view final_name) {
    if (fd_ >= 0) sync();
    const Kind k = folder_->kind(final_name);
    EPL_CHECK(k == Kind::kMissing || k == Kind::kRegular, "the ", what_, " ", *folder_ / final_name, " is ", describe(k),
              ": epl writes its files only in place of a regular file; remove it, or name another path");
    folder_->rename(name_, final_name);
    done_ = true;
    folder_->sync();
  }

 private:
  NewFile(const Folder& folder, std::string name, std::string what, int fd)
      : folder_(&folder), name_(std::move(name)), what_(std::move(what)), fd_(fd) {}
  const Folder* folder_;
  std::string name_, what_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  bool done_ = false;
};

/// \brief The folder a file path lies in, opened; the path's last part must be a file name.
inline Folder folder_of(const std::filesystem::path& file, std::string_view what) {
  EPL_CHECK(!file.empty() && file.has_filename(), "the ", what, " ", file.empty() ? std::string("\"\"") : file.string(),
            " names no file; give a path that ends in a file name");
  std::error_code ec;
  const auto folder = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(folder, ec))
    EPL_FAIL("the folder of the ", what, " ", file, ", ", folder,
             std::filesystem::exists(folder, ec) ? ", is not a directory; name a file in an existing folder"
                                                 : ", does not exist; create it, or name a file in an existing folder");
  return Folder(folder, "folder of the " + std::string(what));
}

/// \brief Checks now that `file` can be written later by write_file: its folder exists and takes a
/// new file, and the file is missing or a regular file. Nothing is left behind.
inline void check_writable(const std::filesystem::path& file, std::string_view what) {
  const Folder folder = folder_of(file, what);
  const Kind k = folder.kind(file.filename().string());
  EPL_CHECK(k == Kind::kMissing || k == Kind::kRegular, "the ", what, " ", file, " is ", describe(k),
            ": epl writes its files only in place of a regular file; remove it, or name another path");
  (void)NewFile::temporary(folder, file.filename().string(), std::string(what));  // made and removed
}

/// \brief Writes `text` to `file` whole or not at all (a temporary file renamed over it), never
/// through a link or over anything but a regular file. `what` names it in errors ("trace file").
inline void write_file(const std::filesystem::path& file, std::string_view text, std::string_view what) {
  const Folder folder = folder_of(file, what);
  NewFile f = NewFile::temporary(folder, file.filename().string(), std::string(what));
  f.write(text);
  f.commit(file.filename().string());
}

/// \brief A regular file in folder, read whole; a link, a FIFO or a device there is an error naming
/// it (opened without following a link, and without waiting for a FIFO's writer).
inline std::string read_file(const Folder& folder, std::string_view name, std::string_view what) {
  const int fd = ::openat(folder.fd(), std::string(name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const Kind k = folder.kind(name);
    EPL_CHECK(k == Kind::kRegular || k == Kind::kMissing, "the ", what, " ", folder / name, " is ", describe(k),
              " where epl expects a regular file of its own; move it aside");
    EPL_FAIL("cannot open the ", what, " ", folder / name, ": ", detail::error_text(err));
  }
  std::string text;
  struct stat st {};
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  int err = 0;
  if (regular) {
    char block[1 << 16];
    for (ssize_t n; (n = ::read(fd, block, sizeof block)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        break;
      }
      text.append(block, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  EPL_CHECK(regular, "the ", what, " ", folder / name, " is ", describe(detail::kind_of(st)),
            " where epl expects a regular file of its own; move it aside");
  EPL_CHECK(err == 0, "reading the ", what, " ", folder / name, " failed: ", detail::error_text(err));
  return text;
}

}  // namespace files
}  // namespace v0
}  // namespace epl
