// The C++ half of the PyTorch round trip (test/checkpoint/torch_round_trip.py is the other):
//
//   torch_round_trip export DIR   trains examples/gpt's model split 2 ways (epl::Split<2>, 2 thread
//                                 ranks) for 3 steps, saves a checkpoint and exports its weights
//                                 as DIR/model.safetensors; writes an evaluation batch
//                                 (DIR/batch.txt) and epl's evaluate loss on it (DIR/epl_loss.txt)
//   torch_round_trip import DIR   starts the unsplit model from DIR/torch.safetensors (PyTorch wrote
//                                 it) and checks its evaluate loss on the batch against
//                                 DIR/torch_loss.txt (PyTorch's), within 1e-5 relative
//
// The Python half loads model.safetensors into its own GPT by name with
// load_state_dict(strict=True) and reproduces epl_loss.txt; then it writes torch.safetensors.
#include "../../examples/gpt/gpt.hpp"
#include "epl/comm/threads/run_threads.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
const gpt::Shape kShape{.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16};
constexpr std::int64_t kRows = 4;

epl::Batch read_batch(const std::filesystem::path& file, const epl::device::Cpu& cpu) {
  std::ifstream in(file);
  std::int64_t rows = 0, cols = 0;
  in >> rows >> cols;
  EPL_CHECK(in.good() && rows > 0 && cols > 0, file, " does not begin with the batch's rows and columns");
  std::vector<std::int32_t> ids(static_cast<std::size_t>(2 * rows * cols));
  for (auto& v : ids) in >> v;
  EPL_CHECK(!in.fail(), file, " holds fewer than ", ids.size(), " ids");
  epl::Batch b{cpu.empty({rows, cols}, epl::DType::kI32), cpu.empty({rows, cols}, epl::DType::kI32)};
  cpu.upload(ids.data(), b.inputs);
  cpu.upload(ids.data() + rows * cols, b.targets);
  return b;
}

double read_number(const std::filesystem::path& file) {
  std::ifstream in(file);
  double v = NAN;
  in >> v;
  EPL_CHECK(!in.fail(), file, " holds no number");
  return v;
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
  EPL_CHECK(out.good(), "cannot write ", file);
}

int export_trained(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::int32_t> ids(3000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * i + 7 * i + i / 5) % 31);
  const auto ds = epl::data::TokenDataset::from_tokens(ids, kShape.vocab);
  epl::comm::run_threads(2, [&](epl::comm::ThreadCommunicator& c) {
    epl::Context ctx(c, c.rank());
    epl::Trainer<gpt::SplitGpt<2>, epl::optim::AdamW> t(ctx, epl::Config{}, gpt::make_split_gpt<2>(kShape),
                                                       epl::optim::AdamW({.lr = 1e-2}), {.seed = 3});
    epl::data::WindowLoader loader(ds, kShape.context, kRows, 5, t.data_shard());
    for (int s = 0; s < 3; ++s) (void)t.step(loader.next(ctx.cpu()));
    const auto saved = t.save(dir / "checkpoints");
    const epl::Batch eval = loader.next(ctx.cpu());
    const double loss = t.evaluate(eval);
    if (c.rank() != 0) return;
    std::string batch = std::to_string(eval.inputs.dim(0)) + " " + std::to_string(eval.inputs.dim(1)) + "\n";
    for (const epl::Tensor* x : {&eval.inputs, &eval.targets}) {
      for (std::int32_t v : x->span<std::int32_t>()) batch += std::to_string(v) + " ";
      batch += "\n";
    }
    write_text(dir / "batch.txt", batch);
    char b[64];
    std::snprintf(b, sizeof b, "%.9g\n", loss);
    write_text(dir / "epl_loss.txt", b);
    const auto n = epl::checkpoint::export_safetensors(saved, dir / "model.safetensors");
    std::string names;
    for (const auto& name : t.parameter_names()) names += " " + name;
    std::printf("exported %zu tensors of a 2-way split model:%s\nepl evaluate loss %.9g\n", n, names.c_str(), loss);
  });
  return 0;
}

int import_torch(const std::filesystem::path& dir) {
  auto ctx = epl::Context::solo();
  epl::Trainer<gpt::Gpt, epl::optim::AdamW> t(ctx, epl::Config{}, gpt::make_gpt(kShape), epl::optim::AdamW({.lr = 1e-2}), {.seed = 4});
  const epl::Batch eval = read_batch(dir / "batch.txt", ctx.cpu());
  const double before = t.evaluate(eval);
  t.load_safetensors(dir / "torch.safetensors");
  const double loss = t.evaluate(eval), want = read_number(dir / "torch_loss.txt");
  const double rel = std::abs(loss - want) / std::abs(want);
  std::printf("epl from PyTorch's weights: evaluate loss %.9g, PyTorch's %.9g (relative difference %.2e; %.9g before loading)\n", loss,
              want, rel, before);
  EPL_CHECK(rel < 1e-5 && std::abs(before - want) > 1e-3, "the loss of PyTorch's weights in epl differs from PyTorch's");
  std::printf("PyTorch's weights load into epl by name and give PyTorch's loss\n");
  return 0;
}
}  // namespace

int main(int argc, char** argv) try {
  EPL_CHECK(argc == 3, "usage: torch_round_trip export|import DIR");
  const std::string mode = argv[1];
  if (mode == "export") return export_trained(argv[2]);
  if (mode == "import") return import_torch(argv[2]);
  EPL_FAIL("usage: torch_round_trip export|import DIR");
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
