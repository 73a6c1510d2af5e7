// Must not compile: a Trainer on a device without the layer-norm kernels fails with one
// static_assert that names the missing capability (not a page of errors from inside the layers).
#include <epl/epl.hpp>
namespace nn = epl::nn;
// A device that lacks the layer-norm kernels.
struct NoNormDevice : epl::device::Cpu {
  using epl::device::Cpu::Cpu;
  template <class... A> void layer_norm(A&&...) const = delete;
};
struct Net { nn::Linear fc; nn::LayerNorm ln; };
int main() {
  NoNormDevice d;
  epl::Trainer<Net, epl::optim::SGD, epl::Policies<>, nn::SoftmaxCrossEntropy, NoNormDevice> t(d, epl::Config{}, Net{nn::Linear(2, 2), nn::LayerNorm(2)}, epl::optim::SGD({}));
  epl::Batch b;
  t.step(b);
}
