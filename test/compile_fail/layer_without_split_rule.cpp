// Must not compile: a layer with no split rule inside epl::Split. The one error is epl's
// static_assert, naming the missing rule (and the layer type in the instantiation).
#include <epl/epl.hpp>

struct Scale {  // a layer of one's own, with no epl::split_rule
  template <class Ctx> epl::Tensor forward(Ctx&, const epl::Tensor& x) { return x; }
  template <class Ctx> epl::Tensor backward(Ctx&, const epl::Tensor& dy) { return dy; }
};
struct Model {
  epl::Split<2, epl::nn::Linear, Scale> part;
};

int main() {
  Model m{epl::Split<2, epl::nn::Linear, Scale>(epl::nn::Linear(4, 4), Scale{})};
  epl::strategy::SplitContext sc{{0, 2}};
  (void)m.part.shard(sc);
}
