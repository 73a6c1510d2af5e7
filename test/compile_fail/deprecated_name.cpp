// A program written against 0.1's names still compiles, with a warning naming the new one: made
// an error here (-Werror=deprecated-declarations), the build must fail saying what it is now.
#include <epl/epl.hpp>

namespace nn = epl::nn;
using Block = epl::Checkpoint<nn::Linear, nn::ReLU>;

int main() { return sizeof(Block) > 0 ? 0 : 1; }
