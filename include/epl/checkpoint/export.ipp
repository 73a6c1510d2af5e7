#pragma once
/// \file
/// \brief The definition of checkpoint::export_safetensors (an .ipp: included only at the end of
/// checkpoint/export.hpp, unless the program links epl::precompiled, which compiles it once).
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "epl/checkpoint/safetensors.hpp"

namespace epl {
inline namespace v0 {
namespace checkpoint {

template <class Unused>
std::size_t export_safetensors(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& out, std::string_view kept) {
  std::error_code ec;
  EPL_CHECK(!out.empty(), "export_safetensors: no file to write is named; name one (model.safetensors)");
  EPL_CHECK(!std::filesystem::is_directory(out, ec), "the safetensors file to write, ", out, ", is a directory; name a file in it "
            "(", out / "model.safetensors", ")");
  // written as a temporary file of a name no one can guess, renamed over `out` only where that is
  // a regular file or nothing (epl/core/files.hpp): never through a link, never over a device
  const files::Folder folder = files::folder_of(out, "safetensors file to write");
  const files::Kind there = folder.kind(out.filename().string());
  EPL_CHECK(there == files::Kind::kMissing || there == files::Kind::kRegular, "the safetensors file to write, ", out, ", is ",
            files::describe(there), ": epl writes its files only in place of a regular file; remove it, or name another path");
  EPL_CHECK(std::filesystem::exists(checkpoint_dir, ec), "export_safetensors: the checkpoint ", checkpoint_dir,
            " does not exist; name a checkpoint's directory, a step-NNNNNNNN that Trainer::save wrote");
  EPL_CHECK(std::filesystem::is_directory(checkpoint_dir, ec), "export_safetensors: the checkpoint ", checkpoint_dir,
            " is a file, not a directory; name a checkpoint's directory, a step-NNNNNNNN that Trainer::save wrote");
  EPL_CHECK(std::filesystem::exists(checkpoint_dir / kManifest, ec) || !newest(checkpoint_dir), "export_safetensors: ", checkpoint_dir,
            " is a directory of checkpoints, not one checkpoint; name one of its steps, the newest is ", *newest(checkpoint_dir));
  EPL_CHECK(std::filesystem::exists(checkpoint_dir / kManifest, ec), "export_safetensors: ", checkpoint_dir,
            " is not a checkpoint (it has no ", kManifest, "); name a checkpoint's directory, a step-NNNNNNNN that Trainer::save wrote");
  const auto inside = std::filesystem::weakly_canonical(out, ec).parent_path(), from = std::filesystem::weakly_canonical(checkpoint_dir, ec);
  EPL_CHECK(inside != from, "the safetensors file ", out, " would be written into the checkpoint ", checkpoint_dir,
            " it is read from; write it elsewhere");
  const Reader r(checkpoint_dir);
  std::string header = "{\"__metadata__\":{\"format\":\"pt\",\"epl.step\":\"" + std::to_string(r.manifest().step) + "\"}";
  std::uint64_t at = 0;
  std::vector<std::string> names;
  const auto source = [&](const std::string& name) { return kept.empty() ? name : kept_name(name, kept); };
  // what else it keeps beside the weights: the optimizer's slots (never weights) and the policies' states
  EPL_CHECK(!optimizer_slot(kept), "export_safetensors: \"", kept, "\" is the optimizer's state slot ", kept.substr(5),
            " (AdamW's moments, Momentum's velocity), not weights; export the weights (\"\") or the average of them that epl::Ema "
            "keeps (\"ema\")");
  std::set<std::string, std::less<>> policies;
  for (const auto& [name, t] : r.manifest().tensors)
    if (const auto mark = name.find('@'); mark != std::string::npos && !optimizer_slot(std::string_view(name).substr(mark + 1)))
      policies.insert(name.substr(mark + 1));
  std::string listed;
  for (const auto& p : policies) listed += (listed.empty() ? "\"" : ", \"") + p + "\"";
  EPL_CHECK(kept.empty() || policies.contains(kept), "export_safetensors: the checkpoint ", checkpoint_dir,
            " was saved without the state asked for (\"", kept, "\"; it keeps ", listed.empty() ? "none but the optimizer's" : listed,
            "; the average of the weights, \"ema\", is saved by a run with epl::Ema); export its weights (\"\") or a state it keeps");
  for (const auto& [name, t] : r.manifest().tensors) {
    if (name.find('@') != std::string::npos) continue;
    EPL_CHECK(r.manifest().tensors.count(source(name)), "export_safetensors: the checkpoint ", checkpoint_dir, " holds no ", source(name),
              ": it was saved without the state asked for (\"", kept, "\"; the average of the weights is saved by a run with epl::Ema); "
              "export its weights without it");
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.shape.numel()) * size_of(t.dtype);
    header += "," + detail::json_string(name) + ":{\"dtype\":\"" + detail::safetensors_dtype(t.dtype) + "\",\"shape\":[";
    for (int d = 0; d < t.shape.rank(); ++d) header += (d ? "," : "") + std::to_string(t.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + bytes) + "]}";
    at += bytes;
    names.push_back(name);
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // the data starts 8-byte aligned
  files::NewFile file = files::NewFile::temporary(folder, out.filename().string(), "safetensors file");
  ShardWriter w(file);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  (void)w.add("", {}, {}, 0, 0, len, 8);
  (void)w.add("", {}, {}, 0, 0, header.data(), header.size());
  for (const auto& name : names) {
    const auto bytes = r.whole(source(name));
    // a file load_safetensors (and a resume) would refuse is not written (the file is committed whole, or not at all)
    detail::check_finite(bytes, r.manifest().tensors.at(source(name)).dtype, "export_safetensors: checkpoint " + checkpoint_dir.string(),
                         source(name), "a NaN or infinite value, which a load refuses (saved after training diverged, or written by hand); "
                         "export an earlier step's checkpoint");
    (void)w.add(name, {}, {}, 0, 0, bytes.data(), bytes.size());
  }
  file.commit(out.filename().string());
  return names.size();
}

}  // namespace checkpoint
}  // namespace v0
}  // namespace epl
