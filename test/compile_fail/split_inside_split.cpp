// Must not compile: an epl::Split inside an epl::Split. The one error is epl's static_assert
// (a second, misleading "no rule" error once followed it).
#include <epl/epl.hpp>

struct Net {
  epl::Split<2, epl::Split<2, epl::nn::Linear>> part;
};

int main() {
  epl::device::Cpu cpu;
  epl::Trainer<Net, epl::optim::SGD> t(cpu, epl::Config{}, Net{}, epl::optim::SGD({.lr = 0.1}));
}
