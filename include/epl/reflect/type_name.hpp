#pragma once
/// \file
/// \brief reflect::type_name<T>() — a type's name at compile time, without RTTI (for messages and
/// model fingerprints). The spelling is the compiler's; within one build it is stable.
#include <string_view>

namespace epl {
inline namespace v0 {
namespace reflect {

template <class T>
constexpr std::string_view type_name() {
  std::string_view f = __PRETTY_FUNCTION__;  // "... type_name() [with T = X; ...]" (g++) or "[T = X]" (clang)
  auto start = f.find("T = ");
  if (start == std::string_view::npos) return f;
  start += 4;
  auto end = f.find_first_of(";]", start);
  return f.substr(start, end - start);
}

}  // namespace reflect
}  // namespace v0
}  // namespace epl
