// epl-checkpoint: reads the checkpoints a Trainer saves (include/epl/checkpoint/checkpoint.hpp).
//   epl-checkpoint show DIR              the step, scalars, configuration the run used, tensors and
//                                        files of a checkpoint, every piece read and its checksum checked,
//                                        and NaN or infinite values named (status 2: a resume refuses them)
//   epl-checkpoint export DIR OUT        its weights as a safetensors file (PyTorch's
//                                        safetensors.torch.load_file reads it)
//   epl-checkpoint export --ema DIR OUT  the average of its weights (a run with epl::Ema), named as
//                                        the weights
// DIR is a step-N directory, or a checkpoint.dir, whose newest complete checkpoint is used.
#include <epl/checkpoint/safetensors.hpp>

#include <cstdio>
#include <string>

namespace {
std::filesystem::path checkpoint_in(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / epl::checkpoint::kManifest)) return dir;
  EPL_CHECK(std::filesystem::exists(dir), dir, " does not exist: name a step-N directory that a save wrote, or the checkpoint.dir "
            "that holds them");
  EPL_CHECK(std::filesystem::is_directory(dir), dir, " is a file, not a directory: name a step-N directory that a save wrote, or the "
            "checkpoint.dir that holds them");
  auto newest = epl::checkpoint::newest(dir);
  // a step directory that lost its manifest is named as one (the reader says what it lacks), not as
  // a folder of no checkpoints (a stranger's finding)
  if (!newest && dir.filename().string().starts_with("step-")) (void)epl::checkpoint::Reader(dir);
  EPL_CHECK(newest.has_value(), "no checkpoint in ", dir, ": name a step-N directory that a save wrote, or the checkpoint.dir "
            "that holds them");
  return *newest;
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string command = argc > 1 ? argv[1] : "";
  const auto asks_help = [&](int i) { return argc > i && (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h"); };
  const bool help = command == "--help" || command == "-h" || command == "help" || asks_help(2);
  if (command == "show" && argc == 3 && !help) {
    const auto dir = checkpoint_in(argv[2]);
    const epl::checkpoint::Reader r(dir);
    const auto& m = r.manifest();
    std::printf("%s: step %lld, %zu tensors in %zu pieces, %zu files\n", dir.c_str(), static_cast<long long>(m.step), m.tensors.size(),
                m.pieces.size(), m.files.size());
    using epl::detail::printable;  // a value holding a newline stays on its line
    for (const auto& [k, v] : m.scalars) std::printf("  %s = %s\n", k.c_str(), printable(v).c_str());
    for (const auto& [k, v] : m.config) {  // what the run was given, and where, or defaulted
      const auto from = m.given.find(k);
      std::printf("  config %s = %s%s\n", k.c_str(), printable(v).c_str(),
                  from == m.given.end() ? "" : (" (" + from->second + ")").c_str());
    }
    std::uint64_t bytes = 0;
    std::size_t not_finite = 0;
    for (const auto& [name, t] : m.tensors) {
      const auto whole = r.whole(name);  // every piece read, its checksum checked
      bytes += whole.size();
      std::printf("  %-40s %s %s\n", name.c_str(), std::string(epl::name_of(t.dtype)).c_str(), epl::detail::concat(t.shape).c_str());
      if (const auto bad = epl::checkpoint::detail::first_out_of_domain(whole, t.dtype)) {  // checksums signed after training diverged: a resume refuses it
        std::printf("    holds %g at element %zu: NaN or infinite\n", bad->second, bad->first);
        ++not_finite;
      }
    }
    std::printf("every piece's checksum holds (%llu bytes)\n", static_cast<unsigned long long>(bytes));
    if (not_finite > 0) {
      std::fprintf(stderr, "epl-checkpoint: %zu tensor%s of %s hold%s NaN or infinite values (saved after training diverged, or "
                   "written by hand): a resume refuses it; resume from an earlier step's checkpoint\n", not_finite, not_finite == 1 ? "" : "s",
                   dir.c_str(), not_finite == 1 ? "s" : "");
      return 2;
    }
    return 0;
  }
  const bool ema = command == "export" && argc == 5 && std::string(argv[2]) == "--ema";
  if (command == "export" && (argc == 4 || ema) && !help) {
    const auto dir = checkpoint_in(argv[ema ? 3 : 2]);
    const char* out = argv[ema ? 4 : 3];
    const auto n = epl::checkpoint::export_safetensors(dir, out, ema ? "ema" : "");
    std::printf("wrote %zu tensors%s of %s to %s\n", n, ema ? " (the average of the weights)" : "", dir.c_str(), out);
    return 0;
  }
  if (!help && command != "show" && command != "export")  // a command it does not know is named, not only the usage shown
    std::fprintf(stderr, "epl-checkpoint: %s\n", command.empty() ? "no command given" : ("unknown command \"" + command + "\"").c_str());
  else if (!help)
    std::fprintf(stderr, "epl-checkpoint: %s takes %s\n", command.c_str(), command == "show" ? "one DIR" : "[--ema] DIR OUT.safetensors");
  std::fputs("usage: epl-checkpoint show DIR\n       epl-checkpoint export [--ema] DIR OUT.safetensors\n"
             "--ema: the average of the weights a run with epl::Ema kept, under the weights' names\n"
             "DIR: a step-N checkpoint directory, or the checkpoint.dir that holds them (its newest is used)\n",
             help ? stdout : stderr);
  return help ? 0 : 2;
} catch (const epl::Error& e) {
  std::fprintf(stderr, "epl-checkpoint: %s\n", e.detail().c_str());  // the user's file, not where epl noticed it
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "epl-checkpoint: %s\n", e.what());
  return 2;
}
