#pragma once
/// \file
/// \brief Central finite-difference gradient checks in double precision, for built-in and
/// user layers alike.
///
/// The scalar checked is L(x, θ) = Σ forward(x) ⊙ R for a fixed random R, so backward(R) must
/// return dL/dx and accumulate dL/dθ. Each checked element is compared as
/// |analytic − numeric| / max(1, |numeric|) (relative where large, absolute where small).
///
/// Every parameter gradient starts from a non-zero value G0 before backward, and the analytic
/// gradient is what backward *added*: a layer that overwrites grad instead of accumulating into
/// it (right for one pass, wrong for two micro-batches) fails, and the report says so.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "epl/device/cpu/cpu.hpp"
#include "epl/nn/layer.hpp"
#include "epl/param/arena.hpp"

namespace epl {
inline namespace v0 {
namespace testing {

/// \brief The pass context gradcheck runs layers in: device::CpuF64, no hooks. A layer that
/// takes `template <class Ctx> ... (Ctx& ctx, ...)` runs in it and in training alike.
using CheckPass = nn::Pass<device::CpuF64>;
/// \brief The name CheckPass had before 0.2 (kept for 0.2.x, removed in 0.3).
using CheckContext [[deprecated("renamed epl::testing::CheckPass; see CHANGELOG.md")]] = CheckPass;

struct GradcheckOptions {
  double step = 1e-6;       ///< finite-difference step h
  double tolerance = 1e-6;  ///< largest accepted error
  int max_per_tensor = 32;  ///< elements checked per tensor, spread evenly
  std::uint64_t seed = 7;   ///< projection R, and the pass seed (dropout masks repeat)
};

struct GradcheckResult {
  double max_error = 0;
  std::string worst;  ///< "input[i]" or "<parameter path>[i]" of the largest error
  int checked = 0;
  /// \brief Whether every checked element is within tolerance (an error that is not finite, from
  /// a NaN or an infinity in either gradient, never is).
  [[nodiscard]] bool ok(double tolerance) const { return checked > 0 && max_error <= tolerance; }
};

namespace detail {
inline std::vector<std::int64_t> probe_indices(std::int64_t n, int max) {
  std::vector<std::int64_t> idx;
  if (n <= max) for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  else if (max == 1) idx.push_back(0);
  else for (int j = 0; j < max; ++j) idx.push_back(j * (n - 1) / (max - 1));
  return idx;
}
/// The value every parameter gradient holds before backward: non-zero, varied, reproducible.
inline double grad_start(std::size_t i) { return 0.5 + 0.25 * static_cast<double>(i % 7); }

/// Checks d(loss)/d(t[i]) against `analytic` for probe indices of a host f64 tensor. With
/// `after` (the gradient as backward left it, started from grad_start), analytic = after - start.
inline void check_tensor(const Tensor& t, const Tensor& analytic, const std::string& name, const std::function<double()>& loss,
                         const GradcheckOptions& opt, GradcheckResult& r, bool started = false) {
  auto v = t.span<double>();
  auto a = analytic.span<double>();
  for (auto i : probe_indices(t.numel(), opt.max_per_tensor)) {
    const double keep = v[i];
    v[i] = keep + opt.step;
    const double up = loss();
    v[i] = keep - opt.step;
    const double down = loss();
    v[i] = keep;
    const double numeric = (up - down) / (2 * opt.step);
    const double added = started ? a[i] - grad_start(static_cast<std::size_t>(i)) : a[i];
    // a NaN compares false with every error: an error that is not finite fails the check, and is named
    const double err = std::isfinite(added) && std::isfinite(numeric) ? std::abs(added - numeric) / std::max(1.0, std::abs(numeric))
                                                                       : std::numeric_limits<double>::infinity();
    ++r.checked;
    if (err > r.max_error) {  // the first element that is not finite stays the one named
      r.max_error = err;
      r.worst = name + "[" + std::to_string(i) + "] analytic " + std::to_string(added) + " numeric " + std::to_string(numeric);
      if (std::isinf(err))
        r.worst += std::isfinite(numeric) ? ": the gradient backward gave is not finite"
                                          : ": the loss is not finite around this point (the forward gives nan or inf here; check at "
                                            "an input inside the layer's domain)";
      if (started && std::abs(a[i] - numeric) / std::max(1.0, std::abs(numeric)) <= opt.tolerance)
        r.worst += ": the gradient was overwritten, not accumulated; backward must add into grad (grad += ...), "
                   "since micro-batches accumulate there";
    }
  }
}
}  // namespace detail

/// \brief Checks layer's backward against finite differences at input x (f64, or an index
/// tensor whose gradient is not checked). The layer must be materialized in f64 on the CPU
/// (param::materialize(layer, device::CpuF64{}, {.dtype = DType::kF64})).
template <class L>
GradcheckResult gradcheck(L& layer, const Tensor& x, GradcheckOptions opt = {}) {
  EPL_CHECK(x.defined() && (x.dtype() == DType::kF64 || x.dtype() == DType::kI32 || x.dtype() == DType::kI64),
            "gradcheck needs an f64 input (or an index tensor, whose gradient is not checked), got ",
            x.defined() ? std::string(name_of(x.dtype())) : std::string("an undefined tensor"),
            ": make it with DType::kF64 and materialize the layer in f64 (param::materialize(layer, device::CpuF64{}, {.dtype = DType::kF64}))");
  EPL_CHECK(std::isfinite(opt.step) && opt.step > 0, "gradcheck: GradcheckOptions::step = ", opt.step, " is not a step; the "
            "finite differences need a small positive h (the default 1e-6)");
  EPL_CHECK(std::isfinite(opt.tolerance) && opt.tolerance >= 0, "gradcheck: GradcheckOptions::tolerance = ", opt.tolerance,
            " is not a tolerance; give a non-negative error (the default 1e-6)");
  EPL_CHECK(opt.max_per_tensor >= 1, "gradcheck: GradcheckOptions::max_per_tensor = ", opt.max_per_tensor, " checks nothing; give "
            "at least 1 element a tensor (the default 32)");
  EPL_CHECK(x.numel() > 0, "gradcheck: the input ", x.shape(), " has no elements; check at an input with rows");
  nn::visit_parameters(layer, [&](std::string_view name, nn::Parameter& p) {
    EPL_CHECK(p.materialized(), "gradcheck: parameter ", name, " has no values: materialize the layer in f64 first "
              "(param::materialize(layer, device::CpuF64{}, {.dtype = DType::kF64}))");
    EPL_CHECK(p.value.dtype() == DType::kF64, "gradcheck: parameter ", name, " is ", name_of(p.value.dtype()), "; materialize the "
              "layer in f64 (param::materialize(layer, device::CpuF64{}, {.dtype = DType::kF64}))");
  });
  device::CpuF64 cpu;
  const nn::PassOptions pass{true, opt.seed, 0, 0};
  auto run = [&](CheckPass& ctx) { return nn::forward(layer, ctx, x); };
  CheckPass probe(cpu, pass);
  Tensor y0 = run(probe);
  EPL_CHECK(y0.dtype() == DType::kF64, "gradcheck needs the layer materialized in f64, got ", name_of(y0.dtype()));
  Tensor proj = cpu.empty(y0.shape(), DType::kF64);
  auto key = stream_key(opt.seed, 99);
  for (std::int64_t i = 0; i < proj.numel(); ++i) proj.span<double>()[i] = normal01(key, static_cast<std::uint64_t>(i));
  auto loss = [&] {  // a fixed projection of the output, plus any loss the layer adds itself (an MoE's)
    CheckPass ctx(cpu, pass);
    Tensor y = run(ctx);
    double s = ctx.extra_loss();
    for (std::int64_t i = 0; i < y.numel(); ++i) s += y.span<double>()[i] * proj.span<double>()[i];
    return s;
  };

  nn::visit_parameters(layer, [&](std::string_view, nn::Parameter& p) {
    auto g = p.grad.span<double>();
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = detail::grad_start(i);
  });
  CheckPass ctx(cpu, pass);
  run(ctx);
  Tensor dx = nn::backward(layer, ctx, proj);
  EPL_CHECK(ctx.saved_count() == 0, "gradcheck: backward left ", ctx.saved_count(), " saved activation frames behind");

  GradcheckResult r;
  if (x.dtype() == DType::kF64) {
    EPL_CHECK(dx.defined() && dx.shape() == x.shape(), "backward returned ", dx.defined() ? dx.shape().str() : "nothing",
              " for an input of shape ", x.shape());
    detail::check_tensor(x, dx, "input", loss, opt, r);
  }
  nn::visit_parameters(layer, [&](std::string_view name, nn::Parameter& p) {
    Tensor analytic = cpu.empty(p.shape, DType::kF64);
    cpu.copy(p.grad, analytic);  // the walk below perturbs values, never gradients
    detail::check_tensor(p.value, analytic, std::string(name), loss, opt, r, true);
  });
  return r;
}

}  // namespace testing
}  // namespace v0
}  // namespace epl
