#pragma once
/// \file
/// \brief nn::Linear: y = x W^T + b over the last dimension.
#include <cmath>

#include "epl/nn/layer.hpp"
#include "epl/nn/tensor_parallel.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief A fully connected layer. W is [out, in] (PyTorch's layout, so a column-parallel
/// shard is a contiguous block of rows), b is [out]. Input [..., in] -> output [..., out].
/// Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).
///
/// Inside epl::Split it runs tensor-parallel (Megatron-LM's pairs): column-parallel, it holds
/// rows of W and b and gives its part of the output's last dimension, and its backward sums the
/// input gradient over the group (one all-reduce); row-parallel, it takes its part of the input's
/// last dimension, holds those columns of W, sums the output over the group (one all-reduce) and
/// adds the whole b.
///
/// With sequence parallelism (split.sequence_parallel) the activations between tensor-parallel
/// blocks are sharded along the sequence: column-parallel, it all-gathers its input's sequence
/// parts and reduce-scatters its input gradient back to them; row-parallel, it reduce-scatters its
/// output into sequence parts (adding b to its part) and all-gathers its output gradient. Each
/// replaces an all-reduce by a reduce-scatter and an all-gather: the same bytes.
class Linear {
 public:
  /// \brief How the layer runs in a split group.
  enum class Parallel : std::uint8_t { kNone, kColumn, kRow };
  struct Options {
    std::int64_t in = 0, out = 0;
    bool bias = true;
  };
  Parameter weight;  ///< [out, in]
  Parameter bias;    ///< [out]; empty shape when built without bias

  Linear() = default;  ///< an empty layer; aggregates of layers need one (see docs/architecture.md)
  Linear(std::int64_t in, std::int64_t out, bool with_bias = true)
      : weight((check_sizes(in, out), Shape{out, in}), Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        bias(with_bias ? Shape{out} : Shape{0}, Init::uniform(1.0 / std::sqrt(static_cast<double>(in)))),
        opt_{in, out, with_bias} {}
  explicit Linear(Options o) : Linear(o.in, o.out, o.bias) {}

  [[nodiscard]] const Options& options() const noexcept { return opt_; }
  [[nodiscard]] std::int64_t in_features() const noexcept { return opt_.in; }
  [[nodiscard]] std::int64_t out_features() const noexcept { return opt_.out; }

  template <class V> void visit(V&& v) {
    v("weight", weight);
    if (opt_.bias) v("bias", bias);
  }

  /// \brief Runs column- or row-parallel as part `part` of a split group (before materialize).
  /// Column-parallel outputs may come in `blocks` blocks (a fused q|k|v projection), each split.
  void parallelize(Parallel mode, SplitPart part, std::int64_t blocks = 1) {
    const std::string what = "Linear(" + std::to_string(opt_.in) + " -> " + std::to_string(opt_.out) + ")";
    if (mode == Parallel::kColumn) {
      weight.shard_along(0, part.index, part.parts, what + ".weight (its outputs)", blocks);
      if (opt_.bias) bias.shard_along(0, part.index, part.parts, what + ".bias", blocks);
    } else if (mode == Parallel::kRow) {
      weight.shard_along(1, part.index, part.parts, what + ".weight (its inputs)");
    }
    mode_ = mode;
    part_ = part;
  }
  [[nodiscard]] Parallel parallel() const noexcept { return mode_; }
  /// \brief Column-parallel: all-gather the parts of the output so every rank holds all of it
  /// (when what follows needs the whole last dimension). Backward then takes its part of the
  /// output gradient, with no communication.
  void gather_output(bool on) { gather_ = on; }
  [[nodiscard]] bool gathers_output() const noexcept { return gather_; }
  /// \brief Column-parallel: leave the input gradient as this part's share for the caller to
  /// reduce (a colocated split's reduce-scatter does, instead of this layer's all-reduce).
  void defer_input_grad_reduction(bool on) { defer_dx_ = on; }
  [[nodiscard]] bool input_grad_deferred() const noexcept { return defer_dx_; }
  /// \brief Column-parallel: the input comes as this rank's sequence part; gather it whole
  /// (forward) and reduce-scatter the input gradient to the part (backward).
  void gather_sequence_input(bool on) { seq_in_ = on; }
  [[nodiscard]] bool gathers_sequence_input() const noexcept { return seq_in_; }
  /// \brief Row-parallel: give this rank's sequence part of the summed output (a reduce-scatter
  /// instead of the all-reduce); backward gathers the output gradient's parts.
  void scatter_sequence_output(bool on) { seq_out_ = on; }
  [[nodiscard]] bool scatters_sequence_output() const noexcept { return seq_out_; }
  /// \brief The output features this rank computes (all of them unless column-parallel).
  [[nodiscard]] std::int64_t local_out() const noexcept { return mode_ == Parallel::kColumn ? opt_.out / part_.parts : opt_.out; }
  /// \brief The input features this rank takes (all of them unless row-parallel).
  [[nodiscard]] std::int64_t local_in() const noexcept { return mode_ == Parallel::kRow ? opt_.in / part_.parts : opt_.in; }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x_in) {
    EPL_CHECK(opt_.in > 0, "Linear() was default-constructed, with no sizes: construct it as Linear(in, out)");
    // its output is this rank's columns: a pass without the split group (a model run by hand) would
    // hand them on as the whole output, silently (a stranger's logits of 2 columns for 4 classes)
    if (mode_ == Parallel::kColumn && part_.parts > 1) (void)detail::tensor_group(ctx, "a column-parallel Linear");
    EPL_CHECK(x_in.shape().back() == local_in(), "Linear(", opt_.in, " -> ", opt_.out, ") got input ", x_in.shape(),
              "; its last dimension must be ", local_in(), mode_ == Parallel::kRow ? " (its part of the split input)" : "");
    const auto& d = ctx.device();
    // the whole input from the sequence parts, kept for backward (no second gather there)
    const Tensor x = seq_in_ ? sequence_gather(ctx, x_in, part_, "a column-parallel Linear") : x_in;
    Tensor y = ctx.empty(x.shape().with_back(local_out()), x.dtype());
    using Dev = std::remove_cvref_t<decltype(d)>;
    // the bias added by the GEMM itself where the device can (device::Cuda's epilogue), unless it
    // must come after a row-parallel layer's sum
    const bool bias_in_gemm = gemm_adds_bias<Dev> && opt_.bias && mode_ != Parallel::kRow;
    if constexpr (gemm_adds_bias<Dev>) {
      if (bias_in_gemm) d.gemm_bias(x, false, weight.value, true, y, bias.value, ctx.matmul());
      else d.gemm(x, false, weight.value, true, y, 1, 0, ctx.matmul());
    } else {
      d.gemm(x, false, weight.value, true, y, 1, 0, ctx.matmul());  // [rows, in] x [in, out]
    }
    if (mode_ == Parallel::kRow && seq_out_) y = sequence_reduce_scatter(ctx, y, part_, "a row-parallel Linear");  // this part of the sum
    else if (mode_ == Parallel::kRow) tensor_all_reduce(ctx, y, "a row-parallel Linear");  // the partial products' sum
    if (opt_.bias && !bias_in_gemm) d.add_row_vector(y, bias.value);
    ctx.save(this, {x});
    return gather_ ? gather_columns(ctx, y) : y;
  }

  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy_in) {
    Saved s = ctx.restore(this);
    const Tensor& x = s[0];
    const auto& d = ctx.device();
    const Tensor dy = gather_ ? own_columns(ctx, dy_in)
                      : seq_out_ ? sequence_gather(ctx, dy_in, part_, "a row-parallel Linear") : dy_in;
    // now, or in a zero-bubble schedule's W pass (which holds x and dy until then)
    nn::weight_gradient(ctx, [this, dev = &d, dy, x, inputs = ctx.matmul()] {
      dev->gemm(dy, true, x, false, weight.grad, 1, 1, inputs);  // dW += dy^T x: [out, rows] x [rows, in]
      if (opt_.bias) dev->sum_rows(dy, bias.grad, 1);
    });
    Tensor dx = ctx.empty_like(x);
    d.gemm(dy, false, weight.value, false, dx, 1, 0, ctx.matmul());     // dx = dy W: [rows, out] x [out, in]
    if (mode_ == Parallel::kColumn && seq_in_) return sequence_reduce_scatter(ctx, dx, part_, "a column-parallel Linear");
    if (mode_ == Parallel::kColumn && !defer_dx_) tensor_all_reduce(ctx, dx, "a column-parallel Linear");  // the parts' shares of dx
    return dx;
  }

 private:
  // before the parameters are made: Shape{out, in} of a negative size named no layer (a stranger's finding)
  static void check_sizes(std::int64_t in, std::int64_t out) {
    EPL_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): both sizes must be positive");
  }
  // A device whose GEMM can add a bias (c = op(a) op(b) + bias in one pass).
  template <class D>
  static constexpr bool gemm_adds_bias = requires(const D& d, const Tensor& t) { d.gemm_bias(t, false, t, true, t, t, DType::kF32); };
  // [..., out / N] parts -> [..., out] on every rank
  template <class Ctx>
  Tensor gather_columns(Ctx& ctx, const Tensor& part) const {
    return nn::gather_columns(ctx.device(), detail::tensor_group(ctx, "a column-parallel Linear"), part);
  }
  // [..., out] -> this rank's columns [..., out / N]
  template <class Ctx>
  Tensor own_columns(Ctx& ctx, const Tensor& whole) const {
    const std::int64_t rows = whole.shape().rows(), cols = opt_.out / part_.parts;
    Tensor mine = ctx.empty(whole.shape().with_back(cols), whole.dtype());
    ctx.device().permute_heads(whole.view({1, rows, opt_.out}), mine.view({1, 1, rows, cols}), part_.index * cols, true);
    return mine;
  }
  Options opt_{0, 0, false};
  Parallel mode_ = Parallel::kNone;
  SplitPart part_;
  bool gather_ = false, defer_dx_ = false, seq_in_ = false, seq_out_ = false;
};

/// \brief A Linear whose sizes are in its type: `nn::SizedLinear<784, 256>` is `nn::Linear(784, 256)`
/// built by its default constructor, so an aggregate of them is the model with no factory, and
/// its costs are known at compile time (strategy::static_cost): plan::fits, plan::fits_v and
/// plan::static_search plan the model itself, with no hand-written twin. TokensPerRow states
/// how many tokens a row (a sample) holds, for the activation bytes a row (1: a row is one vector).
template <std::int64_t In, std::int64_t Out, bool Bias = true, std::int64_t TokensPerRow = 1>
class SizedLinear : public Linear {
  static_assert(In > 0 && Out > 0 && TokensPerRow > 0, "epl: nn::SizedLinear<In, Out>: both sizes (and TokensPerRow) must be positive");
  static_assert(In <= (std::int64_t{1} << 31) && Out <= (std::int64_t{1} << 31) && TokensPerRow <= (std::int64_t{1} << 28),
                "epl: nn::SizedLinear<In, Out>: In and Out at most 2^31 and TokensPerRow at most 2^28, so that its costs count in "
                "64 bits");

 public:
  static constexpr std::int64_t kIn = In, kOut = Out, kTokensPerRow = TokensPerRow;
  static constexpr bool kBias = Bias;
  SizedLinear() : Linear(In, Out, Bias) {}
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
