#pragma once
// A GEMM against a plain double-precision loop over its (rounded) operands, for the CPU
// device's tests and for each of its kernels'.
#include <functional>

#include "../helpers.hpp"

namespace epl::test {
// op(A)[i, k] for A stored row-major as [m, k] or, transposed, [k, m].
inline double at(const std::vector<double>& a, bool t, std::int64_t rows, std::int64_t cols, std::int64_t i, std::int64_t k) {
  return t ? a[k * rows + i] : a[i * cols + k];
}
// x rounded to the nearest `inputs` value (bf16, f16: what AMP's GEMM multiplies), else x
inline double rounded(double x, DType inputs) {
  if (inputs == DType::kBF16) return static_cast<float>(static_cast<bfloat16>(static_cast<float>(x)));
  if (inputs == DType::kF16) return static_cast<float>(static_cast<half>(static_cast<float>(x)));
  return x;
}
// c = 0.5 op(a) op(b) + beta c, multiplied as the device (or `multiply`) does it
using Multiply = std::function<void(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha, double beta,
                                    DType inputs)>;
template <class T>
void check_gemm(bool ta, bool tb, std::int64_t m = 5, std::int64_t n = 7, std::int64_t k = 3, double beta = 2.0,
                DType inputs = DType::kF32, const Multiply& multiply = {}, double alpha = 0.5) {
  Tensor a = test::random<T>(ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = test::random<T>(tb ? Shape{n, k} : Shape{k, n}, 2);
  Tensor c = test::random<T>({m, n}, 3);
  auto av = test::values<T>(a), bv = test::values<T>(b), cv = test::values<T>(c);
  for (auto& x : av) x = rounded(x, inputs);
  for (auto& x : bv) x = rounded(x, inputs);
  if (multiply) multiply(a, ta, b, tb, c, alpha, beta, inputs);
  else test::cpu64().gemm(a, ta, b, tb, c, alpha, beta, inputs);
  std::vector<double> expect(m * n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += at(av, ta, m, k, i, p) * at(bv, tb, k, n, p, j);
      expect[i * n + j] = alpha * s + (beta == 0 ? 0.0 : beta * cv[i * n + j]);
    }
  // f32 sums k products: its rounding grows with k (1.1e-5 at k = 1601)
  CHECK(test::max_rel_diff(test::values<T>(c), expect) < (sizeof(T) == 4 ? 1e-5 * std::max(1.0, k / 800.0) : 1e-13));
}
}  // namespace epl::test
