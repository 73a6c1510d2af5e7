#pragma once
/// \file
/// \brief nn::CausalSelfAttention (multi-head, GPT-style) and nn::Mlp.
#include <cmath>

#include "epl/device/blas_args.hpp"
#include "epl/nn/activation.hpp"
#include "epl/nn/linear.hpp"

namespace epl {
inline namespace v0 {
namespace nn {

/// \brief Multi-head causal self-attention over x [batch, t, dim]:
///   qkv = x Wqkv^T + b  -> q, k, v [batch, heads, t, dim/heads]
///   o = softmax_causal(q k^T / sqrt(dim/heads)) v;  y = proj(merge heads of o).
class CausalSelfAttention {
 public:
  struct Options {
    std::int64_t dim = 0, heads = 1;
  };
  Linear qkv;   ///< dim -> 3 dim (q, k, v blocks of columns, heads inside each)
  Linear proj;  ///< dim -> dim

  CausalSelfAttention() = default;
  CausalSelfAttention(std::int64_t dim, std::int64_t heads)  // checked before the projections, which named a Linear
      : qkv(([&] {
              EPL_CHECK(dim > 0 && heads > 0, "CausalSelfAttention(dim ", dim, ", heads ", heads, "): both must be positive");
              EPL_CHECK(dim % heads == 0, "CausalSelfAttention(dim ", dim, ", heads ", heads, "): dim must be divisible by heads");
            }(),
             dim),
            3 * dim),
        proj(dim, dim),
        dim_(dim),
        heads_(heads) {}
  explicit CausalSelfAttention(Options o) : CausalSelfAttention(o.dim, o.heads) {}
  [[nodiscard]] Options options() const noexcept { return {dim_, heads_}; }
  [[nodiscard]] std::int64_t heads() const noexcept { return heads_; }

  /// \brief Runs as part `part` of a split group, by heads (before materialize): the fused
  /// projection holds this part's heads of q, of k and of v (column-parallel in three blocks),
  /// the output projection their columns (row-parallel), so the pair costs one all-reduce forward
  /// and one backward. The head count must divide by the parts.
  void parallelize(SplitPart part) {
    EPL_CHECK(heads_ % part.parts == 0, "CausalSelfAttention(dim ", dim_, ", heads ", heads_, "): ", heads_,
              " heads do not divide by the split degree ", part.parts, "; use a head count that is a multiple of ", part.parts,
              " or another epl::Split<N>");
    qkv.parallelize(Linear::Parallel::kColumn, part, 3);
    proj.parallelize(Linear::Parallel::kRow, part);
    part_ = part;
  }

  template <class V> void visit(V&& v) {
    v("qkv", qkv);
    v("proj", proj);
  }

  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    EPL_CHECK(dim_ > 0, "CausalSelfAttention() was default-constructed, with no sizes: construct it as CausalSelfAttention(dim, heads)");
    EPL_CHECK(x.rank() == 3 && x.dim(2) == dim_, "CausalSelfAttention(dim ", dim_, ") got input ", x.shape(),
              "; expected [batch, t, ", dim_, "]");
    const auto& d = ctx.device();
    // [b, t, 3 dim]: q | k | v, heads inside each (the whole sequence: qkv gathers a sequence part)
    Tensor h = nn::forward(qkv, ctx, x);
    // this rank's heads: all of them, or its part's inside a split group
    const auto b = h.dim(0), t = h.dim(1), hd = dim_ / heads_, heads = heads_ / part_.parts, dim = dim_ / part_.parts;
    if constexpr (fused_device<std::remove_cvref_t<decltype(d)>>) {
      // under AMP, on a device with fused attention: q, k and v rounded to the matmul type once,
      // as the unfused path rounds them for its GEMMs, and nothing of size t x t stored
      if (is_half(ctx.matmul())) {
        Tensor hh = ctx.empty(h.shape(), ctx.matmul()), oh = ctx.empty({b, t, dim}, ctx.matmul());
        Tensor stats = ctx.empty({b, heads, t}, DType::kF32);
        d.cast(h, hh);
        if (d.attention_causal(hh, oh, stats, heads, scale())) {
          Tensor merged = ctx.empty({b, t, dim}, x.dtype());
          d.cast(oh, merged);
          ctx.save(this, {hh, oh, stats}, kFused);
          return nn::forward(proj, ctx, merged);
        }
      }
    }
    if constexpr (heads_device<std::remove_cvref_t<decltype(d)>>) {
      // a device that runs a head at a time in its cache (device::Cpu), on the f32 operands,
      // rounding them for its products as the unfused path's GEMMs do: equal to it bit for bit
      Tensor merged = ctx.empty({b, t, dim}, x.dtype());
      if (d.attention_heads(h, merged, heads, scale(), ctx.matmul())) {
        ctx.save(this, {h}, kHeads);
        return nn::forward(proj, ctx, merged);
      }
    }
    Tensor q = ctx.empty({b, heads, t, hd}, x.dtype()), k = ctx.empty_like(q), v = ctx.empty_like(q);
    d.permute_heads(h, q, 0, true);
    d.permute_heads(h, k, dim, true);
    d.permute_heads(h, v, 2 * dim, true);
    const Shape batched{b * heads, t, hd};
    Tensor s = ctx.empty({b * heads, t, t}, x.dtype());
    causal_gemm(d, q.view(batched), false, k.view(batched), true, s, ctx.matmul(), device::Triangle::kLowerC);  // [bh, t, t]
    Tensor p = ctx.empty_like(s);
    d.softmax_causal(s, p, scale());
    Tensor o = ctx.empty(batched, x.dtype());
    causal_gemm(d, p, false, v.view(batched), false, o, ctx.matmul(), device::Triangle::kLowerA);  // [bh, t, hd]
    Tensor merged = ctx.empty({b, t, dim}, x.dtype());
    d.permute_heads(merged, o.view({b, heads, t, hd}), 0, false);
    ctx.save(this, {q, k, v, p});
    return nn::forward(proj, ctx, merged);
  }

  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    Tensor dmerged = nn::backward(proj, ctx, dy);  // [b, t, dim]
    Saved s = ctx.restore(this);
    const auto& d = ctx.device();
    if constexpr (fused_device<std::remove_cvref_t<decltype(d)>>) {
      if (s.aux == kFused) {
        const Tensor &hh = s[0], &oh = s[1], &stats = s[2];
        Tensor dout = ctx.empty(oh.shape(), oh.dtype()), dhh = ctx.empty_like(hh), dh = ctx.empty(hh.shape(), dmerged.dtype());
        d.cast(dmerged, dout);  // rounded as the unfused path rounds it for its GEMMs
        EPL_CHECK(d.attention_causal_backward(hh, oh, stats, dout, dhh, stats.dim(1), scale()),
                  "CausalSelfAttention: the fused attention's backward declined a shape its forward ran");
        d.cast(dhh, dh);
        return nn::backward(qkv, ctx, dh);
      }
    }
    if constexpr (heads_device<std::remove_cvref_t<decltype(d)>>) {
      if (s.aux == kHeads) {
        const Tensor& h = s[0];
        Tensor dh = ctx.empty(h.shape(), dmerged.dtype());
        EPL_CHECK(d.attention_heads_backward(h, dmerged, dh, heads_ / part_.parts, scale(), ctx.matmul()),
                  "CausalSelfAttention: the fused attention's backward declined what its forward ran");
        return nn::backward(qkv, ctx, dh);
      }
    }
    const Tensor &q = s[0], &k = s[1], &v = s[2], &p = s[3];
    const auto b = q.dim(0), t = q.dim(2), hd = q.dim(3), heads = q.dim(1), dim = heads * hd;
    const Shape batched{b * heads, t, hd};
    Tensor dout = ctx.empty(q.shape(), q.dtype());
    d.permute_heads(dmerged, dout, 0, true);
    Tensor dp = ctx.empty_like(p);
    causal_gemm(d, dout.view(batched), false, v.view(batched), true, dp, ctx.matmul(), device::Triangle::kLowerC);  // dP = dO V^T
    Tensor dv = ctx.empty_like(q);
    causal_gemm(d, p, true, dout.view(batched), false, dv.view(batched), ctx.matmul(), device::Triangle::kUpperA);  // dV = P^T dO
    Tensor ds = ctx.empty_like(p);
    d.softmax_causal_backward(p, dp, ds, scale());
    Tensor dq = ctx.empty_like(q), dk = ctx.empty_like(q);
    causal_gemm(d, ds, false, k.view(batched), false, dq.view(batched), ctx.matmul(), device::Triangle::kLowerA);  // dQ = dS K
    causal_gemm(d, ds, true, q.view(batched), false, dk.view(batched), ctx.matmul(), device::Triangle::kUpperA);   // dK = dS^T Q
    Tensor dh = ctx.empty({b, t, 3 * dim}, q.dtype());
    d.permute_heads(dh, dq, 0, false);
    d.permute_heads(dh, dk, dim, false);
    d.permute_heads(dh, dv, 2 * dim, false);
    return nn::backward(qkv, ctx, dh);
  }

 private:
  [[nodiscard]] double scale() const { return 1.0 / std::sqrt(static_cast<double>(dim_ / heads_)); }
  // The scores and probabilities are causal: on a device whose gemm_batched skips a triangle
  // (device::Cpu) up to half of attention's products are left out; elsewhere all are computed.
  template <class D>
  static void causal_gemm(const D& d, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, DType inputs,
                          device::Triangle tri) {
    if constexpr (requires { d.gemm_batched(a, ta, b, tb, c, 1.0, 0.0, inputs, tri); }) d.gemm_batched(a, ta, b, tb, c, 1.0, 0.0, inputs, tri);
    else d.gemm_batched(a, ta, b, tb, c, 1.0, 0.0, inputs);
  }
  // A device with fused causal attention (device::Cuda built with cuDNN's frontend).
  template <class D>
  static constexpr bool fused_device = requires(const D& d, const Tensor& t) {
    { d.attention_causal(t, t, t, std::int64_t{1}, 1.0) } -> std::same_as<bool>;
    { d.attention_causal_backward(t, t, t, t, t, std::int64_t{1}, 1.0) } -> std::same_as<bool>;
  };
  // A device that runs attention a head at a time on the compute type (device::Cpu).
  template <class D>
  static constexpr bool heads_device = requires(const D& d, const Tensor& t) {
    { d.attention_heads(t, t, std::int64_t{1}, 1.0, DType::kF32) } -> std::same_as<bool>;
    { d.attention_heads_backward(t, t, t, std::int64_t{1}, 1.0, DType::kF32) } -> std::same_as<bool>;
  };
  static bool is_half(DType t) { return t == DType::kBF16 || t == DType::kF16; }
  static constexpr std::uint64_t kFused = 1;  // Saved::aux of the fused path
  static constexpr std::uint64_t kHeads = 2;  // and of attention_heads' path
  std::int64_t dim_ = 0, heads_ = 1;
  SplitPart part_;
};

/// \brief The transformer feed-forward block: proj(GELU(fc(x))), dim -> hidden -> dim.
class Mlp {
 public:
  struct Options {
    std::int64_t dim = 0, hidden = 0;  ///< hidden 0: 4 dim
  };
  Linear fc;
  GELU act;
  Linear proj;

  Mlp() = default;
  explicit Mlp(std::int64_t dim, std::int64_t hidden = 0)  // checked before fc, which named a Linear
      : fc(([&] {
             EPL_CHECK(dim > 0 && hidden >= 0, "Mlp(dim ", dim, ", hidden ", hidden, "): dim must be positive and hidden positive or 0 "
                       "(0: 4 x dim)");
           }(),
            dim),
           hidden ? hidden : 4 * dim),
        proj(hidden ? hidden : 4 * dim, dim) {}
  explicit Mlp(Options o) : Mlp(o.dim, o.hidden) {}
  [[nodiscard]] Options options() const noexcept { return {fc.in_features(), fc.out_features()}; }

  /// \brief Runs as part `part` of a split group (before materialize): fc column-parallel, proj
  /// row-parallel, so the hidden activations stay split and the pair costs one all-reduce forward
  /// and one backward (Megatron-LM's MLP). The hidden size must divide by the parts.
  void parallelize(SplitPart part) {
    fc.parallelize(Linear::Parallel::kColumn, part);
    proj.parallelize(Linear::Parallel::kRow, part);
  }

  template <class V> void visit(V&& v) {
    v("fc", fc);
    v("proj", proj);
  }
  template <class Ctx>
  Tensor forward(Ctx& ctx, const Tensor& x) {
    return nn::forward(proj, ctx, nn::forward(act, ctx, nn::forward(fc, ctx, x)));
  }
  template <class Ctx>
  Tensor backward(Ctx& ctx, const Tensor& dy) {
    return nn::backward(fc, ctx, nn::backward(act, ctx, nn::backward(proj, ctx, dy)));
  }
};

}  // namespace nn
}  // namespace v0
}  // namespace epl
