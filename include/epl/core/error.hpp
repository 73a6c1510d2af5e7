#pragma once
/// \file
/// \brief epl::Error and the checked-call macros every layer of the library throws through.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace epl {
inline namespace v0 {

/// \brief The one exception type of the library: what went wrong, where, and what to do.
///
/// The message reads "epl error at file:line: what [rank r]". Every check that guards user
/// input throws this; nothing in epl calls exit() or assert() on user input.
class Error : public std::runtime_error {
 public:
  Error(std::string what, const char* file, int line)
      : std::runtime_error(format(what, file, line)), detail_(std::move(what)) {}
  /// \brief The message without the location prefix.
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

 private:
  static std::string format(const std::string& what, const char* file, int line) {
    std::string where(file);
    if (auto slash = where.rfind("include/epl/"); slash != std::string::npos) where = where.substr(slash + 8);
    return "epl error at " + where + ":" + std::to_string(line) + ": " + what;
  }
  std::string detail_;
};

namespace detail {
/// Builds a message from any streamable pieces: EPL_CHECK(cond, "shape ", s, " ...").
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
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
