// Must NOT compile: a struct with a field that is not a layer, used as a model. The test
// expects the diagnostic to carry epl's message and name the offending field type.
#include <epl/epl.hpp>

struct NotALayerField { int width; };
struct Model {
  epl::nn::Linear fc;
  NotALayerField oops;
};

int main() {
  Model m{epl::nn::Linear(2, 2), {3}};
  epl::device::Cpu cpu;
  epl::nn::Pass<epl::device::Cpu> ctx(cpu);
  (void)epl::nn::forward(m, ctx, epl::Tensor{});
}
