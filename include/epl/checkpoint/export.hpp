#pragma once
/// \file
/// \brief checkpoint::export_safetensors, declared without the checkpoint I/O stack: <epl/epl.hpp>
/// includes this, and a program linked with epl::precompiled takes the definition from that
/// library; otherwise checkpoint/export.ipp, included at the end, defines it (over
/// checkpoint/safetensors.hpp, which includes this header in turn: a loop of a header and its
/// definitions, as device/cpu/cpu.hpp's and cpu.ipp's).
#include <cstddef>
#include <filesystem>
#include <string_view>

namespace epl {
inline namespace v0 {
namespace checkpoint {

/// \brief Writes the weights of a checkpoint (its tensors without optimizer state: those named
/// with an '@') as a safetensors file, named as the model names its parameters
/// (`body.0.attn.1.qkv.weight`), which PyTorch's load_state_dict reads into a model of the same
/// architecture. Returns the number of tensors written. With `kept` ("ema"), each parameter's values
/// are the policy state saved beside it, `<parameter>@ema` (the average of the weights, epl::Ema),
/// under the parameter's own name.
/// Declared a template (of nothing) only so that epl::precompiled can compile it once.
template <class Unused = void>
std::size_t export_safetensors(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& out, std::string_view kept = {});

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl

// the definition, unless epl::precompiled compiled it
#if defined(EPL_PRECOMPILED) && !defined(EPL_PRECOMPILED_SOURCE)
extern template std::size_t epl::checkpoint::export_safetensors<void>(const std::filesystem::path&, const std::filesystem::path&,
                                                                     std::string_view);
#else
#include "epl/checkpoint/export.ipp"
#endif
