#pragma once
/// \file
/// \brief The bodies of policy::decide and the policies' key table (the header declares them):
/// included by that header in a header-only program, or compiled once into epl::precompiled
/// (core/linked.hpp).
#include "epl/policy/setup.hpp"

namespace epl {
inline namespace v0 {
namespace policy {

EPL_LINKED Setup decide(const Keys& k, const Compiled& c, const Facts& f) { return detail::decide_each(k, c, f, Homes{}); }

EPL_LINKED std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> out;
  [&]<class... H>(List<H...>) {
    ([&] {
      if constexpr (requires { H::config_keys(); })
        for (auto& k : H::config_keys()) out.push_back(std::move(k));
    }(), ...);
  }(Homes{});
  return out;
}
}  // namespace policy
}  // namespace v0
}  // namespace epl
