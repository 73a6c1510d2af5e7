#pragma once
/// \file
/// \brief Kernels of the built-in layers: layer norm, causal softmax, embedding, cross-entropy,
/// dropout and the head permutation of attention. Inputs are validated by the caller.
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "epl/core/random.hpp"
#include "epl/device/cpu/elementwise.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cpu {

template <class T> using RowMap = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T> using ConstRowMap = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

inline std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols)); }

/// y = (x - mean) * rstd * gamma + beta per row of [rows, cols]; saves mean and rstd per row.
template <class T>
void layer_norm(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                std::int64_t rows, std::int64_t cols, T eps) {
  ConstRowMap<T> g(gamma, cols), b(beta, cols);
  parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      ConstRowMap<T> xr(x + r * cols, cols);
      T mu = xr.mean();
      T var = (xr - mu).square().mean();
      T rs = T(1) / std::sqrt(var + eps);
      mean[r] = mu;
      rstd[r] = rs;
      RowMap<T>(y + r * cols, cols) = (xr - mu) * rs * g + b;
    }
  });
}
/// Rows a chunk of layer_norm_backward's takes: its parameter gradients are summed over the
/// chunk's rows in a buffer of their own, then the chunks' sums in order, so the result does not
/// depend on the thread count.
inline constexpr std::int64_t kLayerNormChunkRows = 32;
/// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma, xhat = (x - mean) rstd;
/// dgamma += sum_r dy xhat, dbeta += sum_r dy. One pass over x and dy from memory, two over a row
/// in L1 (its two means, then dx and its chunk's sums of dy xhat and dy); the chunks' sums are
/// then added in order.
template <class T>
void layer_norm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                         T* dx, T* dgamma, T* dbeta, std::int64_t rows, std::int64_t cols) {
  const std::int64_t chunks = (rows + kLayerNormChunkRows - 1) / kLayerNormChunkRows;
  // chunk c's sums of dy xhat at row 2c, of dy at 2c + 1: the calling thread's buffer, which the
  // workers reach through `sums` (a thread_local named inside them would be their own)
  static thread_local std::vector<T> buffer;
  buffer.resize(static_cast<std::size_t>(std::max<std::int64_t>(std::ssize(buffer), 2 * chunks * cols)));
  T* const sums = buffer.data();
  ConstRowMap<T> g(gamma, cols);
  const T inv_n = T(1) / static_cast<T>(cols);
  parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      RowMap<T> dg(sums + 2 * c * cols, cols), db(sums + (2 * c + 1) * cols, cols);
      dg.setZero(), db.setZero();
      for (std::int64_t r = c * kLayerNormChunkRows, end = std::min(rows, r + kLayerNormChunkRows); r < end; ++r) {
        ConstRowMap<T> dyr(dy + r * cols, cols), xr(x + r * cols, cols);
        const T mu = mean[r], rs = rstd[r];
        const T m1 = (dyr * g).sum() * inv_n, m2 = (dyr * g * (xr - mu)).sum() * rs * inv_n;
        RowMap<T>(dx + r * cols, cols) = rs * (dyr * g - m1 - (xr - mu) * (rs * m2));
        dg += dyr * ((xr - mu) * rs);
        db += dyr;
      }
    }
  });
  RowMap<T> dg(dgamma, cols), db(dbeta, cols);
  for (std::int64_t c = 0; c < chunks; ++c) {
    dg += ConstRowMap<T>(sums + 2 * c * cols, cols);
    db += ConstRowMap<T>(sums + (2 * c + 1) * cols, cols);
  }
}

/// Row i of a causal softmax over t columns: p = softmax(scale * s) on columns 0..i, 0 above
/// the diagonal. s may be p. Reads s's columns up to i + 1 rounded up to 16 (within the row):
/// exp runs on whole vectors to there, since Eigen takes a row's last n % 16 through scalar
/// std::exp, which cost the kernel as much as the vectors (#39); the masked scores'
/// exponentials are zeroed, whatever they were.
template <class T>
void softmax_causal_row(const T* s, T* p, std::int64_t i, std::int64_t t, T scale) {
  const std::int64_t n = i + 1, w = std::min(t, (n + 15) / 16 * 16);
  const T mx = ConstRowMap<T>(s, n).maxCoeff() * scale;
  RowMap<T>(p, w) = exp_of(ConstRowMap<T>(s, w) * scale - mx);
  if (n < t) RowMap<T>(p + n, t - n).setZero();
  RowMap<T> pr(p, n);
  pr /= pr.sum();
}
/// Row i of softmax_causal's backward: ds = scale * p (dp - sum(dp p)) on columns 0..i, 0 above
/// the diagonal. dp may be ds.
template <class T>
void softmax_causal_backward_row(const T* p, const T* dp, T* ds, std::int64_t i, std::int64_t t, T scale) {
  const std::int64_t n = i + 1;
  ConstRowMap<T> pr(p, n), dpr(dp, n);
  const T dot = (pr * dpr).sum();
  RowMap<T>(ds, n) = scale * pr * (dpr - dot);
  if (n < t) RowMap<T>(ds + n, t - n).setZero();
}

/// Causal softmax over the last dim of [batch, t, t] scores (softmax_causal_row's).
template <class T>
void softmax_causal(const T* s, T* p, std::int64_t batch, std::int64_t t, T scale) {
  parallel_for(batch * t, row_grain(t), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) softmax_causal_row(s + r * t, p + r * t, r % t, t, scale);
  });
}
/// ds = scale * p (dp - sum(dp p)) per row (0 above the diagonal).
template <class T>
void softmax_causal_backward(const T* p, const T* dp, T* ds, std::int64_t batch, std::int64_t t, T scale) {
  parallel_for(batch * t, row_grain(t), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) softmax_causal_backward_row(p + r * t, dp + r * t, ds + r * t, r % t, t, scale);
  });
}

/// out[i, :] = table[ids[i], :]
/// out[i, :] = table[ids[i] - first, :] for ids in [first, first + rows), else 0 (a part of a
/// vocabulary-parallel table: the ids of other parts give zero rows).
template <class T, class I>
void embedding(const I* ids, const T* table, T* out, std::int64_t n, std::int64_t dim, std::int64_t first, std::int64_t rows) {
  parallel_for(n, row_grain(dim), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t r = static_cast<std::int64_t>(ids[i]) - first;
      if (r >= 0 && r < rows) RowMap<T>(out + i * dim, dim) = ConstRowMap<T>(table + r * dim, dim);
      else RowMap<T>(out + i * dim, dim).setZero();
    }
  });
}
/// dtable[ids[i] - first, :] += dout[i, :] for ids in this part; serial, since ids repeat.
template <class T, class I>
void embedding_backward(const I* ids, const T* dout, T* dtable, std::int64_t n, std::int64_t dim, std::int64_t first, std::int64_t rows) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - first;
    if (r >= 0 && r < rows) RowMap<T>(dtable + r * dim, dim) += ConstRowMap<T>(dout + i * dim, dim);
  }
}

/// y = softmax over each row of x [rows, cols]; its backward dx = y * (dy - sum(dy * y)).
template <class T>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      ConstRowMap<T> xr(x + r * cols, cols);
      RowMap<T> yr(y + r * cols, cols);
      yr = exp_of(xr - xr.maxCoeff());
      yr /= yr.sum();
    }
  });
}
template <class T>
void softmax_rows_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      ConstRowMap<T> yr(y + r * cols, cols), dyr(dy + r * cols, cols);
      RowMap<T>(dx + r * cols, cols) = yr * (dyr - (dyr * yr).sum());
    }
  });
}
/// dst[i, :] = src[index[i], :] for the k rows of dst.
template <class T>
void gather_rows(const T* src, const std::int64_t* index, T* dst, std::int64_t k, std::int64_t cols) {
  parallel_for(k, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) RowMap<T>(dst + i * cols, cols) = ConstRowMap<T>(src + index[i] * cols, cols);
  });
}
/// dst[index[i], :] += weight[i] src[i, :] (weight null: 1); serial, since indices repeat.
template <class T>
void scatter_add_rows(const T* src, const std::int64_t* index, const T* weight, T* dst, std::int64_t k, std::int64_t cols) {
  for (std::int64_t i = 0; i < k; ++i)
    RowMap<T>(dst + index[i] * cols, cols) += ConstRowMap<T>(src + i * cols, cols) * (weight ? weight[i] : T(1));
}
/// out[i] = a[i, :] . b[i, :]
template <class T>
void row_dot(const T* a, const T* b, T* out, std::int64_t rows, std::int64_t cols) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t r = s; r < e; ++r) out[r] = (ConstRowMap<T>(a + r * cols, cols) * ConstRowMap<T>(b + r * cols, cols)).sum();
  });
}

/// For a part of the classes of logits [rows, cols] (classes [first, first + cols) of the whole):
/// the row maxima; then, given the whole rows' maxima, each row's sum of exp(logit - max) and its
/// target's logit (0 when the target is another part's). A vocabulary-parallel cross-entropy sums
/// these over the parts.
template <class T>
void row_max(const T* x, T* out, std::int64_t rows, std::int64_t cols) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) out[r] = ConstRowMap<T>(x + r * cols, cols).maxCoeff();
  });
}
template <class T, class I>
void cross_entropy_stats(const T* logits, const I* targets, const T* max, T* sum_exp, T* target_logit, std::int64_t rows,
                         std::int64_t cols, std::int64_t first) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      ConstRowMap<T> lr(logits + r * cols, cols);
      sum_exp[r] = exp_of(lr - max[r]).sum();
      const std::int64_t c = static_cast<std::int64_t>(targets[r]) - first;
      target_logit[r] = c >= 0 && c < cols ? lr[c] : T(0);
    }
  });
}
/// dlogits = scale * (softmax - onehot(target)) over a part of the classes, from the whole rows'
/// maxima and sums of exponentials.
template <class T, class I>
void cross_entropy_part_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, T* dlogits, std::int64_t rows,
                                 std::int64_t cols, std::int64_t first, T scale) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      RowMap<T> dr(dlogits + r * cols, cols);
      dr = exp_of(ConstRowMap<T>(logits + r * cols, cols) - max[r]) * (scale / sum_exp[r]);
      const std::int64_t c = static_cast<std::int64_t>(targets[r]) - first;
      if (c >= 0 && c < cols) dr[c] -= scale;
    }
  });
}

/// Sum over rows of -log softmax(logits)[target]; accumulated in double.
template <class T, class I>
double cross_entropy(const T* logits, const I* targets, std::int64_t rows, std::int64_t classes) {
  double total = 0;
#if defined(_OPENMP)
#pragma omp parallel for reduction(+ : total) schedule(static) if (rows * classes > kGrain)
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    ConstRowMap<T> lr(logits + r * classes, classes);
    T mx = lr.maxCoeff();
    T lse = mx + std::log(exp_of(lr - mx).sum());
    total += static_cast<double>(lse - lr[targets[r]]);
  }
  return total;
}
/// dlogits = scale * (softmax(logits) - onehot(target))
template <class T, class I>
void cross_entropy_backward(const T* logits, const I* targets, T* dlogits, std::int64_t rows,
                            std::int64_t classes, T scale) {
  parallel_for(rows, row_grain(classes), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      ConstRowMap<T> lr(logits + r * classes, classes);
      RowMap<T> dr(dlogits + r * classes, classes);
      T mx = lr.maxCoeff();
      dr = exp_of(lr - mx);
      dr *= scale / dr.sum();
      dr[targets[r]] -= scale;
    }
  });
}

/// y = x * keep / (1 - p), keep_i = uniform(key, offset + i) >= p. The mask is a pure function
/// of (key, offset + i), so backward regenerates it instead of storing it, and a part of a
/// tensor (offset: where it starts in the whole) draws exactly its part of the whole's mask.
template <class T>
void dropout(const T* x, T* y, std::int64_t n, double p, std::uint64_t key, std::int64_t offset) {
  const T keep_scale = T(1.0 / (1.0 - p));
  parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      y[i] = uniform01(key, static_cast<std::uint64_t>(offset + i)) >= p ? x[i] * keep_scale : T(0);
  });
}
/// dropout of a column part of a tensor: x holds columns [col0, col0 + cols) of rows of
/// `whole_cols`, and element (r, c) draws at offset + r * whole_cols + col0 + c, the whole
/// tensor's position.
template <class T>
void dropout_columns(const T* x, T* y, std::int64_t rows, std::int64_t cols, double p, std::uint64_t key, std::int64_t offset,
                     std::int64_t whole_cols, std::int64_t col0) {
  const T keep_scale = T(1.0 / (1.0 - p));
  parallel_for(rows, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto at = static_cast<std::uint64_t>(offset + r * whole_cols + col0 + c);
        y[r * cols + c] = uniform01(key, at) >= p ? x[r * cols + c] * keep_scale : T(0);
      }
  });
}

/// Moves heads between the token layout [b, t, row] (head h at columns offset + h*d of a row
/// of `row` elements) and the head-batched layout [b, h, t, d]. to_heads selects the direction.
template <class T>
void permute_heads(T* tokens, T* heads, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d,
                   std::int64_t row, std::int64_t offset, bool to_heads) {
  parallel_for(b * h, 1, [&](std::int64_t x0, std::int64_t x1) {
    for (std::int64_t x = x0; x < x1; ++x) {
      std::int64_t bi = x / h, hi = x % h;
      for (std::int64_t ti = 0; ti < t; ++ti) {
        T* tok = tokens + (bi * t + ti) * row + offset + hi * d;
        T* hd = heads + (x * t + ti) * d;
        if (to_heads) RowMap<T>(hd, d) = RowMap<T>(tok, d); else RowMap<T>(tok, d) = RowMap<T>(hd, d);
      }
    }
  });
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
