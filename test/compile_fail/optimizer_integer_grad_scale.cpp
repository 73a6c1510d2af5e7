// Must not compile: an optimizer whose update takes a sixth argument that is not a double. The
// Updater passes the gradient's factor there (AMP's unscale times the clip coefficient, such as
// 1/65536), which an integer would truncate to 0: the parameters would silently stop training.
#include <epl/optim/optimizer.hpp>
struct IntegerFactor {
  struct Options {
    double lr = 0.1;
  };
  static constexpr int kStateSlots = 0;
  template <class D>
  void update(const D& d, const epl::Tensor& value, const epl::Tensor& grad, std::span<const epl::Tensor>, std::int64_t,
              std::int64_t factor = 1) const {
    d.sgd_update(value, grad, opt.lr, 0.0, static_cast<double>(factor));
  }
  [[nodiscard]] const Options& options() const noexcept { return opt; }
  Options opt;
};
int main() {
  epl::optim::Updater<IntegerFactor> u(IntegerFactor{});
  return static_cast<int>(u.steps());
}
