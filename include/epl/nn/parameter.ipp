#pragma once
/// \file
/// \brief The one definition of a parameter's copy, move and destruction (the header declares
/// them): included by that header in a header-only program, or compiled once into
/// epl::precompiled (core/linked.hpp).
#include "epl/nn/parameter.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

EPL_LINKED Parameter::Parameter(const Parameter&) = default;
EPL_LINKED Parameter::Parameter(Parameter&&) noexcept = default;
EPL_LINKED Parameter& Parameter::operator=(const Parameter&) = default;
EPL_LINKED Parameter& Parameter::operator=(Parameter&&) noexcept = default;
EPL_LINKED Parameter::~Parameter() = default;

}  // namespace nn
}  // namespace v0
}  // namespace epl
