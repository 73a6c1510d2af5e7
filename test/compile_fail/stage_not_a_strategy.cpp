// Must not compile: a Pipeline stage given as a plain layer rather than a strategy. The one error
// is epl's static_assert, which says to wrap the layer as epl::Replicate<1, Layer>.
#include <epl/epl.hpp>

int main() {
  epl::Pipeline<epl::nn::Linear, epl::Replicate<1, epl::nn::Linear>> model;
  (void)model;
}
