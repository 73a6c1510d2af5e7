// Must not compile: a class layer whose Parameter is private and which has no visit(v). epl
// cannot see the member, so the parameter would be silently left out of training (a new user's
// layer trained 67 of its 131 parameters and failed in a GEMM naming neither). The one error is
// epl's static_assert, naming visit (and the layer type in the instantiation).
#include <epl/epl.hpp>

class Gate {
 public:
  Gate() = default;
  explicit Gate(std::int64_t n) : scale_({n}, epl::nn::Init::ones()) {}
  template <class Ctx> epl::Tensor forward(Ctx&, const epl::Tensor& x) { return x; }
  template <class Ctx> epl::Tensor backward(Ctx&, const epl::Tensor& dy) { return dy; }

 private:
  epl::nn::Parameter scale_;
};
struct Net {
  epl::nn::Linear in{4, 4};
  Gate gate{4};
};

int main() {
  epl::device::Cpu cpu;
  epl::Trainer<Net, epl::optim::SGD> t(cpu, epl::Config{}, Net{}, epl::optim::SGD({.lr = 0.1}));
}
