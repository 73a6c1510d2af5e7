#pragma once
/// \file
/// \brief The bodies of the error helpers (the header declares them): included by that header in a
/// header-only program, or compiled once into epl::precompiled (core/linked.hpp).
#include <algorithm>

#include "epl/core/error.hpp"

namespace epl {
inline namespace v0 {
namespace detail {

EPL_LINKED std::string with_rank(int rank, const std::string& what) {
  const std::string prefix = "[rank " + std::to_string(rank) + "]";
  return what.rfind(prefix, 0) == 0 ? what : prefix + " " + what;
}

EPL_LINKED std::string quoted(std::string_view text, std::size_t keep) {
  std::string out = "\"" + printable(text.substr(0, keep));
  if (text.size() <= keep) return out.append("\"");
  return out.append("...\" (").append(std::to_string(text.size())).append(" characters)");
}

EPL_LINKED std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (u < 0x20 || u == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else out += ch;
  }
  return out;
}
}  // namespace detail

EPL_LINKED void Error::name_layer(std::string_view path) {
  if (named_ || !layer_) return;
  named_ = true;
  if (path.empty()) return;  // the model is the layer itself: its type already says which
  const std::string whole = std::runtime_error::what();
  const std::string prefix = whole.substr(0, whole.size() - std::min(whole.size(), detail_.size()));  // rank and location
  detail_ = "in the " + std::string(pass_ ? pass_ : "pass") + " of layer `" + std::string(path) + "`: " + detail_;
  text_ = prefix + detail_;
}

EPL_LINKED std::string Error::format(const std::string& what, const char* file, int line) {
  std::string where(file);
  if (auto slash = where.rfind("include/epl/"); slash != std::string::npos) where = where.substr(slash + 8);
  std::string prefix = current_rank() >= 0 ? "[rank " + std::to_string(current_rank()) + "] " : std::string();
  return prefix + "epl error at " + where + ":" + std::to_string(line) + ": " + what;
}
}  // namespace v0
}  // namespace epl
