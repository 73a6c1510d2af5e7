// Must not compile: an epl::Pipeline as a field of the model rather than the model itself (its
// stages once ran as plain layers, data parallel, without a word). The one error names the fix.
#include <epl/epl.hpp>
namespace nn = epl::nn;
struct Net {
  nn::Linear in;
  using Stage = epl::Replicate<1, nn::Linear>;
  epl::Pipeline<Stage, Stage> body;
};
int main() {
  epl::Context ctx = epl::Context::solo();
  epl::Trainer<Net, epl::optim::SGD> t(ctx, epl::Config{}, Net{nn::Linear(2, 2), decltype(Net::body)(Net::Stage(nn::Linear(2, 2)), Net::Stage(nn::Linear(2, 2)))}, epl::optim::SGD({}));
  (void)t;
}
