// epl::precompiled's second translation unit: the second part of runtime/model_free.hpp's list,
// the Trainer's model-free half (detail::TrainerCore) for each optimizer and gradient sync and the
// built-in layers' forward and backward in each sync's passes on the CPU. It is compiled as a
// program is (EPL_PRECOMPILED: the device, the backends and the first part of the list are
// src/precompiled.cpp's), beside that file, so that a parallel build makes the library in the time
// of the longer of the two.
#define EPL_PRECOMPILED_RUN_SOURCE
#include "epl/runtime/trainer.hpp"

namespace epl {
inline namespace v0 {
namespace detail {
// what each program linked with this library compares its own headers' layout with, before main
std::uint64_t precompiled_model_free_layout() { return model_free_layout(); }
}  // namespace detail
}  // namespace v0
}  // namespace epl
