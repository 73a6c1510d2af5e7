#pragma once
/// \file
/// \brief testing::Throttled<D> — device D made `factor` times slower in its GEMMs (the bulk of a
/// training step's time): after each GEMM it keeps its core busy for (factor - 1) times what the
/// GEMM took. It simulates a slower device among faster ones on one machine (uneven devices,
/// cluster.rank_speeds; bench/uneven). Every other operation is D's.
#include <chrono>

#include "epl/core/error.hpp"
#include "epl/core/tensor.hpp"

namespace epl {
inline namespace v0 {
namespace testing {

template <class D>
class Throttled : public D {
 public:
  /// \param factor how many times slower its GEMMs run (1: as D)
  template <class... Args>
  explicit Throttled(double factor, Args&&... args) : D(std::forward<Args>(args)...), factor_(factor) {
    EPL_CHECK(factor >= 1, "testing::Throttled: factor ", factor, " must be at least 1 (a device is only made slower)");
  }
  [[nodiscard]] double factor() const noexcept { return factor_; }

  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
            DType inputs = DType::kF32) const {
    const auto t0 = std::chrono::steady_clock::now();
    D::gemm(a, ta, b, tb, c, alpha, beta, inputs);
    hold(t0);
  }
  void gemm_batched(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1, double beta = 0,
                    DType inputs = DType::kF32) const {
    const auto t0 = std::chrono::steady_clock::now();
    D::gemm_batched(a, ta, b, tb, c, alpha, beta, inputs);
    hold(t0);
  }

 private:
  // Busy until (factor) times the time since t0 has passed: the core stays taken, as real work would take it.
  void hold(std::chrono::steady_clock::time_point t0) const {
    if (factor_ <= 1) return;
    const auto took = std::chrono::steady_clock::now() - t0;
    const auto until = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(took * factor_);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  double factor_;
};

}  // namespace testing
}  // namespace v0
}  // namespace epl
