// Must not compile: a policy given to the Trainer bare, not in an epl::Policies<...> list. The one
// error names the fix.
#include <epl/epl.hpp>
namespace nn = epl::nn;
struct Net {
  nn::Linear a;
};
int main() {
  epl::Context ctx = epl::Context::solo();
  epl::Trainer<Net, epl::optim::SGD, epl::Zero<3>> t(ctx, epl::Config{}, Net{nn::Linear(2, 2)}, epl::optim::SGD({}));
  (void)t;
}
