#pragma once
/// \file
/// \brief checkpoint::index_names — every parameter by the name checkpoints gave it before
/// aggregate fields took their declared names (2026-11), so that such a checkpoint still loads: a
/// legacy walk of its own, through nn::for_each_member as every walk of the model is.
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "epl/nn/parameter.hpp"
#include "epl/nn/tree.hpp"
#include "epl/nn/walk.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

namespace detail {
template <class N>
void index_walk(N& node, std::string& path, std::map<const nn::Parameter*, std::string>& out) {
  using T = std::remove_cvref_t<N>;
  if constexpr (std::is_same_v<T, nn::Parameter>) {
    out[&node] = path;
  } else {
    // an aggregate's fields were named by their index, the wrappers (nameless now) by their kind
    constexpr auto kind = nn::kind_of_v<T>;
    constexpr std::string_view wrapper = kind == nn::NodeKind::kSplit       ? "split"
                                         : kind == nn::NodeKind::kReplicate ? "replica"
                                         : kind == nn::NodeKind::kRecompute ? "recomputed"
                                                                            : "";
    std::size_t index = 0;
    nn::for_each_member(node, [&](std::string_view name, auto& member) {
      const auto size = path.size();
      path.append(path.empty() ? "" : ".");
      if constexpr (nn::visitable<T>) path.append(name.empty() ? wrapper : name);
      else path.append(std::to_string(index++));
      index_walk(member, path, out);
      path.resize(size);
    });
  }
}
}  // namespace detail

/// \brief Every parameter of model by the name checkpoints gave it before aggregate fields took
/// their declared names (2026-11): fields by index and the wrappers by kind, `2.0.0.1.qkv.weight`
/// and `0.split.1.0.weight` for today's `body.0.attn.1.qkv.weight` and `embed.tok.weight`. Such a
/// checkpoint loads by these names.
template <class Model>
std::map<const nn::Parameter*, std::string> index_names(Model& model) {
  std::map<const nn::Parameter*, std::string> out;
  std::string path;
  detail::index_walk(model, path, out);
  return out;
}

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
