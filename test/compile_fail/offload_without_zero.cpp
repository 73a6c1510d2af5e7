// epl::Offload<V0> without epl::Zero<3>: the weights are streamed by stage 3's gathers.
#include <epl/epl.hpp>

int main() {
  using P = epl::Policies<epl::Offload<epl::offload::V0>>;
  return P::zero::kStage;
}
