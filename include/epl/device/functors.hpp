#pragma once
/// \file
/// \brief Element-wise functions for Device::map, the device-generic way to write element-wise
/// math in a layer of one's own: `ctx.device().map(y, epl::ops::Sigmoid{}, x)` runs on every
/// device (a loop on the CPU, a kernel on CUDA). A function of one's own is a struct with
/// `template <class T> EPL_HOST_DEVICE T operator()(T...) const`; the same code then compiles
/// for the host and, in a .cu translation unit, for the GPU.
#include <cmath>

#include "epl/core/host_device.hpp"

namespace epl {
inline namespace v0 {
namespace ops {

// One argument.
struct Exp {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { using std::exp; return exp(x); }
};
struct Log {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { using std::log; return log(x); }
};
struct Tanh {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { using std::tanh; return tanh(x); }
};
struct Sqrt {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { using std::sqrt; return sqrt(x); }
};
struct Neg {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { return -x; }
};
struct Square {
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { return x * x; }
};
struct Sigmoid {  ///< 1 / (1 + e^-x)
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { using std::exp; return T(1) / (T(1) + exp(-x)); }
};
struct Relu {
  // x <= 0, not x > 0: a NaN passes through (as PyTorch's relu), so bad data is not laundered to 0
  template <class T> EPL_HOST_DEVICE T operator()(T x) const { return x <= T(0) ? T(0) : x; }
};
// Two arguments.
struct Add {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a * b; }
};
struct Div {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a / b; }
};
struct Max {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a > b ? a : b; }
};
struct Min {
  template <class T> EPL_HOST_DEVICE T operator()(T a, T b) const { return a < b ? a : b; }
};
/// dy * s (1 - s) with s = sigmoid(x): the backward of Sigmoid from its output s.
struct SigmoidGradFromOutput {
  template <class T> EPL_HOST_DEVICE T operator()(T s, T dy) const { return dy * s * (T(1) - s); }
};
/// dy where x > 0, else 0: the backward of Relu from its input x.
struct ReluGrad {
  template <class T> EPL_HOST_DEVICE T operator()(T x, T dy) const { return x > T(0) ? dy : T(0); }
};

}  // namespace ops
}  // namespace v0
}  // namespace epl
