// Must not compile: a model of layers walked as const. A layer names its members in visit(v),
// which is not a const member function; the error is epl's static_assert, which says to walk the
// model itself (g++ then adds the "discards qualifiers" of the call it stopped).
#include <epl/epl.hpp>

struct Net {
  epl::nn::Linear a{4, 2};
};

int main() {
  const Net net;
  return static_cast<int>(epl::nn::parameter_count(net));
}
