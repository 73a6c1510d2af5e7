// The renamed class templates (epl::Checkpoint, nn::Checkpoint, nn::Context) warn too where the
// compiler honours [[deprecated]] on an alias template (GCC; clang 14 accepts it silently).
#include <epl/epl.hpp>

namespace nn = epl::nn;
using Block = epl::Checkpoint<nn::Linear, nn::ReLU>;

int main() { return sizeof(Block) > 0 ? 0 : 1; }
