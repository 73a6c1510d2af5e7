// The C++ half of the safetensors test (test/checkpoint/read_safetensors.py reads the other):
// trains examples/gpt's model on 2 thread ranks under ZeRO stage 3 (each rank holds slices of
// every parameter), saves a checkpoint, exports its weights as a safetensors file, and writes the
// trained parameters as the trainer holds them, gathered, one line each:
//   name dim0 dim1 ...: v0 v1 ... (every value, %.9g: f32 exactly)
//   export_safetensors DIR   ->   DIR/model.safetensors, DIR/reference.txt
#include "../../examples/gpt/gpt.hpp"
#include "epl/comm/threads/run_threads.hpp"
#include "epl/core/files.hpp"

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) try {
  EPL_CHECK(argc == 2, "usage: export_safetensors DIR");
  const std::filesystem::path dir = argv[1];
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const gpt::Shape shape{.vocab = 32, .context = 8, .layers = 2, .heads = 2, .dim = 16};
  std::string reference;
  epl::comm::run_threads(2, [&](epl::comm::ThreadCommunicator& c) {
    epl::Context ctx(c, c.rank());
    epl::Config cfg;
    cfg.set("zero.level", "v2");
    epl::Trainer<gpt::Gpt, epl::optim::AdamW, epl::Policies<epl::Zero<3>>> t(ctx, cfg, gpt::make_gpt(shape),
                                                                             epl::optim::AdamW({.lr = 1e-2}), {.seed = 9});
    std::vector<std::int32_t> ids(2000);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * i + 3 * i) % 29);
    const auto ds = epl::data::TokenDataset::from_tokens(ids, 32);
    epl::data::WindowLoader loader(ds, 8, 8, 3, t.data_shard());
    for (int s = 0; s < 3; ++s) (void)t.step(loader.next(ctx.cpu()));
    const auto saved = t.save(dir / "checkpoints");
    t.gather_parameters();
    if (c.rank() != 0) return;
    epl::nn::visit_parameters(t.model(), [&](std::string_view name, epl::nn::Parameter& p) {
      reference += std::string(name);
      for (int d = 0; d < p.shape.rank(); ++d) reference += " " + std::to_string(p.shape[d]);
      reference += ":";
      char b[32];
      for (float v : p.value.span<float>()) {
        std::snprintf(b, sizeof b, " %.9g", static_cast<double>(v));
        reference += b;
      }
      reference += "\n";
    });
    const auto n = epl::checkpoint::export_safetensors(saved, dir / "model.safetensors");
    std::printf("exported %zu tensors of %s\n", n, saved.c_str());
  });
  epl::files::write_file(dir / "reference.txt", reference, "reference file");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
