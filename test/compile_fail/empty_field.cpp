// Must NOT compile: an empty struct as a field of an aggregate inside the model. The diagnostic
// names the empty type (it once named only the outermost aggregate, a stranger's finding).
#include <epl/epl.hpp>

struct Placeholder {};
struct Block {
  epl::nn::Linear fc;
  Placeholder later;
};
struct Model {
  Block block;
  epl::nn::Linear head;
};

int main() {
  epl::Config cfg;
  epl::device::Cpu cpu;
  epl::Trainer<Model, epl::optim::SGD> t(cpu, cfg, Model{}, epl::optim::SGD({}));
}
