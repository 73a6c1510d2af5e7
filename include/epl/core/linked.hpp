#pragma once
/// \file
/// \brief EPL_LINKED: marks a function that does not depend on the user's model (the
/// configuration's parsing, the plan's arithmetic, a handshake) whose body lives in an .ipp file
/// beside its header, so that a program linked with epl::precompiled compiles none of it: its
/// translation units see the declaration and call the library's one definition.
///
///   - header-only (no EPL_PRECOMPILED): `inline`, and the header includes its .ipp;
///   - a program linked with epl::precompiled (EPL_PRECOMPILED), and that library's other
///     sources: not inline, and the .ipp is not included (EPL_LINKED_BODIES is 0);
///   - src/precompiled.cpp (EPL_PRECOMPILED_DEFINITIONS): not inline, the .ipp included: the one
///     definition the programs link.
///
/// A header ends with `#if EPL_LINKED_BODIES` / `#include "....ipp"` / `#endif`, and EPL_LINKED
/// stands where `inline` would on the declaration and on the definition. A template that does not
/// depend on the model goes in runtime/model_free.hpp's list instead.
#if defined(EPL_PRECOMPILED_DEFINITIONS)
#define EPL_LINKED
#define EPL_LINKED_BODIES 1
#elif defined(EPL_PRECOMPILED)
#define EPL_LINKED
#define EPL_LINKED_BODIES 0
// A translation unit given EPL_PRECOMPILED by hand, in a program that does not link the library,
// fails to link; this reference makes the first undefined name say why.
namespace epl {
inline namespace v0 {
namespace detail {
extern const int link_epl_precompiled_or_drop_EPL_PRECOMPILED;
[[gnu::used]] inline const int* const precompiled_is_linked = &link_epl_precompiled_or_drop_EPL_PRECOMPILED;
}  // namespace detail
}  // namespace v0
}  // namespace epl
#else
#define EPL_LINKED inline
#define EPL_LINKED_BODIES 1
#endif
