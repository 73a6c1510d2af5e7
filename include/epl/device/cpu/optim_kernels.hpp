#pragma once
/// \file
/// \brief Optimizer update kernels (PyTorch's update rules, so results compare one to one).
#include <cmath>
#include <cstdint>

#include "epl/device/cpu/elementwise.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

// Every update reads the gradient as gs g: gs is the step's factor (AMP's unscale times the clip
// coefficient), applied as the gradient is read instead of in passes of its own over it.

/// p -= lr (gs g + wd p)
template <class T> void sgd_update(T* p, const T* g, std::int64_t n, T lr, T wd, T gs) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T> P(p + o, len);
    P -= lr * (ConstArrayMap<T>(g + o, len) * gs + wd * P);
  });
}
/// d = gs g + wd p; v = mu v + d; p -= lr (nesterov ? d + mu v : v)
template <class T> void momentum_update(T* p, const T* g, T* v, std::int64_t n, T lr, T mu, T wd, bool nesterov, T gs) {
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T> P(p + o, len), V(v + o, len);
    const BlockArray<T> d = ConstArrayMap<T>(g + o, len) * gs + wd * P;
    V = mu * V + d;
    if (nesterov) P -= lr * (d + mu * V); else P -= lr * V;
  });
}
/// AdamW (decoupled decay): p *= 1 - lr wd; m, v moments of gs g; p -= lr mhat / (sqrt(vhat) + eps).
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2, T eps, T wd,
                  std::int64_t step, T gs) {
  const T bc1 = T(1) - std::pow(beta1, T(step)), bc2 = T(1) - std::pow(beta2, T(step));
  const T step_size = lr / bc1, rbc2 = T(1) / std::sqrt(bc2);
  chunked(n, [&](std::int64_t o, std::int64_t len) {
    ArrayMap<T> P(p + o, len), M(m + o, len), V(v + o, len);
    const auto G = ConstArrayMap<T>(g + o, len) * gs;  // read where used: cheaper than a block of it stored
    P *= T(1) - lr * wd;
    M = beta1 * M + (T(1) - beta1) * G;
    V = beta2 * V + (T(1) - beta2) * G.square();
    P -= step_size * M / (V.sqrt() * rbc2 + eps);
  });
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
