// Trains a two-layer network for a few steps; exits non-zero unless the loss fell.
#include <epl/epl.hpp>
#include <cstdio>

namespace nn = epl::nn;
struct Net {
  nn::Linear fc1;
  nn::ReLU act;
  nn::Linear fc2;
};

int main() {
  epl::device::Cpu cpu;
  epl::Trainer<Net, epl::optim::SGD> trainer(cpu, epl::Config{}, Net{nn::Linear(4, 16), {}, nn::Linear(16, 3)},
                                             epl::optim::SGD({.lr = 0.5}));
  epl::Batch b{cpu.empty({6, 4}, epl::DType::kF32), cpu.empty({6}, epl::DType::kI32)};
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) b.inputs.span<float>()[i * 4 + j] = (i % 3 == j) ? 1.0f : 0.0f;
    b.targets.span<std::int32_t>()[i] = i % 3;
  }
  double first = trainer.step(b), last = first;
  for (int s = 0; s < 30; ++s) last = trainer.step(b);
  std::printf("consumer: loss %.4f -> %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}
