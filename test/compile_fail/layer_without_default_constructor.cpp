// Must NOT compile, quickly: a model holding a layer that has no default constructor. Boost.PFR
// counted such a struct's fields by trying every count up to its size in bits (a stranger's model
// of two Linears took minutes and 23 GB of the compiler's memory); epl names the struct first.
#include <epl/epl.hpp>

struct NoDefault {
  epl::nn::Parameter w;
  explicit NoDefault(int) : w(epl::Shape{3}, epl::nn::Init::zeros()) {}
  template <class V>
  void visit(V&& v) {
    v("w", w);
  }
  template <class Ctx>
  epl::Tensor forward(Ctx&, const epl::Tensor& x) {
    return x;
  }
  template <class Ctx>
  epl::Tensor backward(Ctx&, const epl::Tensor& d) {
    return d;
  }
};
struct Net {
  epl::nn::Linear a;
  NoDefault n;
  epl::nn::Linear b;
};

int main() {
  epl::Config cfg;
  epl::device::Cpu cpu;
  epl::Trainer<Net, epl::optim::SGD> t(cpu, cfg, Net{epl::nn::Linear(4, 3), NoDefault(1), epl::nn::Linear(3, 3)}, epl::optim::SGD({}));
}
