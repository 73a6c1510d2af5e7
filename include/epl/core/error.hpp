#pragma once
/// \file
/// \brief epl::Error and the checked-call macros every layer of the library throws through.
#include <atomic>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include "epl/core/linked.hpp"

namespace epl {
inline namespace v0 {

namespace detail {
/// The world rank of the calling thread, or -1 outside a rank. Thread ranks, MPI processes and
/// the communication worker threads of a rank set it, so every message can name its rank.
inline int& this_rank() noexcept {
  static thread_local int rank = -1;
  return rank;
}
}  // namespace detail

/// \brief Marks the calling thread as working for a rank while it lives (restores on exit).
class RankScope {
 public:
  explicit RankScope(int rank) noexcept : saved_(detail::this_rank()) { detail::this_rank() = rank; }
  ~RankScope() { detail::this_rank() = saved_; }
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int saved_;
};

/// \brief The world rank of the calling thread (-1 outside a rank).
inline int current_rank() noexcept { return detail::this_rank(); }

/// \brief The one exception type of the library: what went wrong, where, and what to do.
///
/// The message reads "[rank r] epl error at file:line: what" (the prefix only on a thread that
/// works for a rank), so a line printed by any rank of a job names the rank it came from. Every
/// check that guards user input throws this; nothing in epl calls exit() or assert() on user input
/// but Config::from_args, which prints the message and exits 2 on a bad command line.
class Error : public std::runtime_error {
 public:
  /// \brief `what` raised at file:line; a program's own code (a layer's check, say) gives the
  /// message alone, `throw epl::Error("...")`, and is located where it throws. (__builtin_FILE,
  /// not std::source_location: clang 14 has no source_location with libstdc++ 12.)
  explicit Error(std::string what, const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : std::runtime_error(format(what, file, line)), detail_(std::move(what)), rank_(current_rank()) {}
  /// \brief The message without the rank and location prefixes (with the layer's path, once named).
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  /// \brief The world rank that raised it (-1: not raised on a rank).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// \brief The message: "[rank r] epl error at file:line: " and the detail.
  [[nodiscard]] const char* what() const noexcept override { return text_.empty() ? std::runtime_error::what() : text_.c_str(); }

  /// \brief The layer it left through: nn::forward and nn::backward record the innermost leaf
  /// layer an error leaves, by its address and a key of its type (nn::layer_key); null where it
  /// was not raised inside a layer's pass.
  [[nodiscard]] const void* layer() const noexcept { return layer_; }
  [[nodiscard]] const void* layer_key() const noexcept { return layer_key_; }
  /// \brief Records the layer and pass ("forward", "backward") it leaves; only the first (the innermost) is kept.
  void left_layer(const void* layer, const void* key, const char* pass) noexcept {
    if (layer_ || named_) return;
    layer_ = layer;
    layer_key_ = key;
    pass_ = pass;
  }
  /// \brief Names the recorded layer by its path in the model (nn::name_layer finds it): the
  /// detail then reads "in the forward of layer `blocks.1.fc`: " and what it said. Once only.
  EPL_LINKED void name_layer(std::string_view path);

 private:
  EPL_LINKED static std::string format(const std::string& what, const char* file, int line);
  std::string detail_;
  std::string text_;  // the message once a layer is named (else runtime_error's)
  int rank_;
  const void* layer_ = nullptr;
  const void* layer_key_ = nullptr;
  const char* pass_ = nullptr;
  bool named_ = false;
};

namespace detail {
/// text on one line: its control characters written as C escapes (\n, \t, \r, \x1b), so that a
/// value holding a newline neither breaks a message nor a listing (epl-checkpoint show).
EPL_LINKED std::string printable(std::string_view text);
/// One piece of a message; a path quoted as the standard library prints it, with its control
/// characters escaped (a file name may hold a newline or a terminal's escape).
template <class Part>
void append_part(std::ostringstream& out, const Part& part) {
  if constexpr (requires { part.native(); part.has_filename(); }) out << '"' << printable(part.string()) << '"';  // a std::filesystem::path
  else out << part;
}
/// Builds a message from any streamable pieces: EPL_CHECK(cond, "shape ", s, " ...").
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (append_part(out, parts), ...);
  return out.str();
}

/// A message prefixed with the rank it comes from ("[rank 3] ..."), once.
EPL_LINKED std::string with_rank(int rank, const std::string& what);

/// Failures found where nothing may throw (a destructor that writes the run's trace at its end):
/// printed there and counted here, so that epl::launch still ends the run with a failure status.
inline std::atomic<int>& unthrown_failures() noexcept {
  static std::atomic<int> n{0};
  return n;
}

/// A user-supplied value for a message: quoted, and cut after 64 characters with its length, so
/// a megabyte of bad input is not repeated whole in the error; its control characters escaped.
EPL_LINKED std::string quoted(std::string_view text, std::size_t keep = 64);
}  // namespace detail

}  // namespace v0
}  // namespace epl

/// Throws epl::Error with the concatenated message when cond is false.
#define EPL_CHECK(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) throw ::epl::Error(::epl::detail::concat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (false)

/// Throws epl::Error unconditionally.
#define EPL_FAIL(...) throw ::epl::Error(::epl::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// The bodies: in every program that includes this header, or once in epl::precompiled (core/linked.hpp).
#if EPL_LINKED_BODIES
#include "epl/core/error.ipp"
#endif
