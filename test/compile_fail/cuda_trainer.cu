// Must not compile until the CUDA device has every layer kernel: a Trainer on device::Cuda fails
// with one static_assert naming the first capability it lacks (it once gave five nvcc errors).
#include <epl/epl.hpp>
#include <epl/device/cuda/cuda.cuh>
namespace nn = epl::nn;
struct Net { nn::Linear fc; nn::LayerNorm ln; };
int main() {
  epl::device::Cuda gpu(0);
  epl::Trainer<Net, epl::optim::SGD, epl::Policies<>, nn::SoftmaxCrossEntropy, epl::device::Cuda> t(gpu, epl::Config{}, Net{nn::Linear(2, 2), nn::LayerNorm(2)}, epl::optim::SGD({}));
  epl::Batch b;
  t.step(b);
}
