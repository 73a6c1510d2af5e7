#pragma once
/// \file
/// \brief The bodies of the CUDA device's layer kernels, written once for the host and the GPU.
///
/// A CUDA kernel of device::Cuda is a launch (device/cuda/kernels.cuh) around one of these
/// bodies; the CPU test suite runs the same bodies through the host drivers below and compares
/// them with device::Cpu's kernels and with finite differences (test/device/bodies.test.cpp), so
/// the GPU's arithmetic and index arithmetic are checked on a machine without a GPU. Three
/// shapes of body:
///   - element bodies: `body(i)` for each i in [0, n) (dropout, optimizer updates, head permutes);
///   - row programs: one warp of kLanes threads per row. A program has kPasses reductions over
///     the row (`combine(p)` and `partial(p, ...)`: lane l takes columns l, l + lanes, ...; the
///     lanes' partials are combined and every lane sees the total), then `write`. The host driver
///     runs the lanes one after another;
///   - column bodies: `body(c, r0, r1)` adds rows [r0, r1) of column c into an output with
///     accumulate() (atomicAdd on the GPU), for parameter gradients summed over rows.
/// The launch geometry is here too, as functions of (block, thread): the tests walk every
/// (block, thread) of a launch on the host and check that each index is visited exactly once.
#include <cmath>
#include <cstdint>
#include <limits>

#include "epl/core/host_device.hpp"
#include "epl/core/random.hpp"

namespace epl {
inline namespace v0 {
namespace kernels {

using index_t = std::int64_t;

// ---- launch geometry -----------------------------------------------------------------------
/// A one-dimensional launch: blocks x threads.
struct Launch {
  index_t blocks = 1, threads = 256;
};
/// The grid-stride launch for n elements: 256 threads a block, at most 4096 blocks.
inline Launch elements_launch(index_t n) {
  const index_t b = (n + 255) / 256;
  return {b < 1 ? 1 : (b > 4096 ? 4096 : b), 256};
}
/// Calls fn(i) for the indices thread `thread` of block `block` takes in a grid-stride loop.
template <class Fn>
EPL_HOST_DEVICE void grid_stride(index_t block, index_t thread, Launch g, index_t n, Fn&& fn) {
  for (index_t i = block * g.threads + thread; i < n; i += g.blocks * g.threads) fn(i);
}

/// Row programs run one warp per row.
inline constexpr int kLanes = 32;
inline constexpr index_t kRowThreads = 256;  // 8 rows a block
inline Launch rows_launch(index_t rows) { return {(rows + kRowThreads / kLanes - 1) / (kRowThreads / kLanes), kRowThreads}; }
EPL_HOST_DEVICE inline index_t row_of(index_t block, index_t thread) { return block * (kRowThreads / kLanes) + thread / kLanes; }
EPL_HOST_DEVICE inline int lane_of(index_t thread) { return static_cast<int>(thread % kLanes); }

/// Column bodies: blocks.x over columns (256 a block), blocks.y over chunks of `chunk` rows (at
/// least kColumnChunk, more where the rows would need more than 65535 chunks, CUDA's limit).
inline constexpr index_t kColumnChunk = 64;
struct ColumnLaunch {
  index_t x = 1, y = 1, threads = 256, chunk = kColumnChunk;
};
inline ColumnLaunch columns_launch(index_t rows, index_t cols) {
  index_t chunk = kColumnChunk;
  while ((rows + chunk - 1) / chunk > 65535) chunk *= 2;
  const index_t x = (cols + 255) / 256, y = (rows + chunk - 1) / chunk;
  return {x < 1 ? 1 : x, y < 1 ? 1 : y, 256, chunk};
}
EPL_HOST_DEVICE inline index_t column_of(index_t block_x, index_t thread) { return block_x * 256 + thread; }
EPL_HOST_DEVICE inline index_t chunk_begin(index_t block_y, index_t chunk) { return block_y * chunk; }
EPL_HOST_DEVICE inline index_t chunk_end(index_t block_y, index_t chunk, index_t rows) {
  return (block_y + 1) * chunk < rows ? (block_y + 1) * chunk : rows;
}

// ---- helpers ---------------------------------------------------------------------------------
/// *at += v; from many GPU threads at once, atomically.
template <class T>
EPL_HOST_DEVICE void accumulate(T* at, T v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(at, v);
#else
  *at += v;
#endif
}

/// A kernel's report of bad input, read by the host once the kernel has run (the CUDA device
/// keeps one in mapped host memory and turns it into an epl::Error at its next synchronisation).
/// The first report wins.
struct Report {
  enum What : int { kNone = 0, kEmbeddingId, kEmbeddingBackwardId, kTarget, kRowIndex };
  int what = kNone;
  long long value = 0, limit = 0;
};
EPL_HOST_DEVICE inline void report(Report* r, Report::What what, index_t value, index_t limit) {
#if defined(__CUDA_ARCH__)
  if (atomicCAS(&r->what, 0, static_cast<int>(what)) == 0) {
    r->value = value;
    r->limit = limit;
  }
#else
  if (r->what == Report::kNone) *r = Report{what, value, limit};
#endif
}
/// What a report says, as an error message's start ("" when there is none).
inline const char* report_op(const Report& r) {
  switch (r.what) {
    case Report::kEmbeddingId: return "embedding";
    case Report::kEmbeddingBackwardId: return "embedding_backward";
    case Report::kTarget: return "cross_entropy targets";
    case Report::kRowIndex: return "gather_rows/scatter_add_rows";
    default: return "";
  }
}

enum class Combine { kSum, kMax };
template <class T>
EPL_HOST_DEVICE T identity(Combine c) {
  return c == Combine::kSum ? T(0) : -std::numeric_limits<T>::infinity();
}
template <class T>
EPL_HOST_DEVICE T combine(Combine c, T a, T b) {
  return c == Combine::kSum ? a + b : (a > b ? a : b);
}

/// Runs a row program on the host: the lanes of each row one after another, as a warp would.
template <class K>
void run_rows(const K& k, index_t rows, int lanes = kLanes) {
  using T = typename K::value_type;
  for (index_t r = 0; r < rows; ++r) {
    T total[K::kPasses > 0 ? K::kPasses : 1] = {};
    if constexpr (K::kPasses > 0)  // a program without passes defines no combine or partial
      for (int p = 0; p < K::kPasses; ++p) {
        T acc = identity<T>(k.combine(p));
        for (int l = 0; l < lanes; ++l) acc = combine(k.combine(p), acc, k.partial(p, r, l, lanes, total));
        total[p] = acc;
      }
    for (int l = 0; l < lanes; ++l) k.write(r, l, lanes, total);
  }
}
/// Runs an element body on the host through the grid-stride loop of its launch.
template <class Fn>
void run_elements(const Fn& fn, index_t n) {
  const Launch g = elements_launch(n);
  for (index_t b = 0; b < g.blocks; ++b)
    for (index_t t = 0; t < g.threads; ++t) grid_stride(b, t, g, n, fn);
}
/// Runs a column body on the host through its launch's (block, thread) geometry.
template <class Fn>
void run_columns(const Fn& fn, index_t rows, index_t cols) {
  const ColumnLaunch g = columns_launch(rows, cols);
  for (index_t y = 0; y < g.y; ++y)
    for (index_t x = 0; x < g.x; ++x)
      for (index_t t = 0; t < g.threads; ++t)
        if (const index_t c = column_of(x, t); c < cols) fn(c, chunk_begin(y, g.chunk), chunk_end(y, g.chunk, rows));
}

// ---- layer norm ------------------------------------------------------------------------------
/// y = (x - mean) rstd gamma + beta per row of [rows, cols]; saves mean and rstd (two passes: the
/// mean, then the variance about it, as device::Cpu).
template <class T>
struct LayerNormRows {
  using value_type = T;
  static constexpr int kPasses = 2;
  const T *x, *gamma, *beta;
  T *y, *mean, *rstd;
  index_t cols;
  T eps;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int p, index_t r, int lane, int lanes, const T* total) const {
    const T* xr = x + r * cols;
    const T mu = p == 0 ? T(0) : total[0] / T(cols);
    T s = 0;
    for (index_t c = lane; c < cols; c += lanes) s += p == 0 ? xr[c] : (xr[c] - mu) * (xr[c] - mu);
    return s;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    using std::sqrt;
    const T mu = total[0] / T(cols), rs = T(1) / sqrt(total[1] / T(cols) + eps);
    if (lane == 0) mean[r] = mu, rstd[r] = rs;
    for (index_t c = lane; c < cols; c += lanes) y[r * cols + c] = (x[r * cols + c] - mu) * rs * gamma[c] + beta[c];
  }
};
/// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma.
template <class T>
struct LayerNormBackwardRows {
  using value_type = T;
  static constexpr int kPasses = 2;
  const T *x, *gamma, *mean, *rstd, *dy;
  T* dx;
  index_t cols;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int p, index_t r, int lane, int lanes, const T*) const {
    T s = 0;
    for (index_t c = lane; c < cols; c += lanes) {
      const T dxhat = dy[r * cols + c] * gamma[c];
      s += p == 0 ? dxhat : dxhat * (x[r * cols + c] - mean[r]) * rstd[r];
    }
    return s;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    const T m1 = total[0] / T(cols), m2 = total[1] / T(cols);
    for (index_t c = lane; c < cols; c += lanes) {
      const T xhat = (x[r * cols + c] - mean[r]) * rstd[r];
      dx[r * cols + c] = rstd[r] * (dy[r * cols + c] * gamma[c] - m1 - xhat * m2);
    }
  }
};
/// dgamma += sum_r dy xhat, dbeta += sum_r dy over rows [r0, r1) of column c.
template <class T>
struct LayerNormParamGrads {
  const T *x, *mean, *rstd, *dy;
  T *dgamma, *dbeta;
  index_t cols;
  EPL_HOST_DEVICE void operator()(index_t c, index_t r0, index_t r1) const {
    T g = 0, b = 0;
    for (index_t r = r0; r < r1; ++r) {
      const T d = dy[r * cols + c];
      g += d * (x[r * cols + c] - mean[r]) * rstd[r];
      b += d;
    }
    accumulate(dgamma + c, g);
    accumulate(dbeta + c, b);
  }
};
/// out[c] += the sum of rows [r0, r1) of column c (sum_rows; the device scales out by beta first).
template <class T>
struct ColumnSums {
  const T* x;
  T* out;
  index_t cols;
  EPL_HOST_DEVICE void operator()(index_t c, index_t r0, index_t r1) const {
    T s = 0;
    for (index_t r = r0; r < r1; ++r) s += x[r * cols + c];
    accumulate(out + c, s);
  }
};

// ---- softmax ---------------------------------------------------------------------------------
/// A lane's part of a softmax's two passes over x[0, n) (the causal and the row softmax,
/// cross-entropy): pass 0 the maximum, pass 1 the sum of exp(scale x - scale max), max = total[0].
template <class T>
EPL_HOST_DEVICE T softmax_pass(int pass, const T* x, index_t n, int lane, int lanes, const T* total, T scale = T(1)) {
  using std::exp;
  T v = pass == 0 ? identity<T>(Combine::kMax) : T(0);
  for (index_t c = lane; c < n; c += lanes) v = pass == 0 ? (x[c] > v ? x[c] : v) : v + exp(x[c] * scale - total[0] * scale);
  return v;
}
/// p = causal softmax(scale s) over rows of [batch, t, t]: row r sees columns 0 .. r % t.
template <class T>
struct SoftmaxCausalRows {
  using value_type = T;
  static constexpr int kPasses = 2;
  const T* s;
  T* p;
  index_t t;
  T scale;
  EPL_HOST_DEVICE Combine combine(int pass) const { return pass == 0 ? Combine::kMax : Combine::kSum; }
  EPL_HOST_DEVICE T partial(int pass, index_t r, int lane, int lanes, const T* total) const {
    return softmax_pass(pass, s + r * t, r % t + 1, lane, lanes, total, scale);
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    using std::exp;
    const index_t n = r % t + 1;
    for (index_t c = lane; c < t; c += lanes) p[r * t + c] = c < n ? exp(s[r * t + c] * scale - total[0] * scale) / total[1] : T(0);
  }
};
/// ds = scale p (dp - sum(dp p)) on the visible columns, 0 above the diagonal.
template <class T>
struct SoftmaxCausalBackwardRows {
  using value_type = T;
  static constexpr int kPasses = 1;
  const T *p, *dp;
  T* ds;
  index_t t;
  T scale;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int, index_t r, int lane, int lanes, const T*) const {
    const index_t n = r % t + 1;
    T v = 0;
    for (index_t c = lane; c < n; c += lanes) v += p[r * t + c] * dp[r * t + c];
    return v;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    const index_t n = r % t + 1;
    for (index_t c = lane; c < t; c += lanes) ds[r * t + c] = c < n ? scale * p[r * t + c] * (dp[r * t + c] - total[0]) : T(0);
  }
};
/// y = softmax of each row of x [rows, cols].
template <class T>
struct SoftmaxRows {
  using value_type = T;
  static constexpr int kPasses = 2;
  const T* x;
  T* y;
  index_t cols;
  EPL_HOST_DEVICE Combine combine(int pass) const { return pass == 0 ? Combine::kMax : Combine::kSum; }
  EPL_HOST_DEVICE T partial(int pass, index_t r, int lane, int lanes, const T* total) const {
    return softmax_pass(pass, x + r * cols, cols, lane, lanes, total);
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    using std::exp;
    for (index_t c = lane; c < cols; c += lanes) y[r * cols + c] = exp(x[r * cols + c] - total[0]) / total[1];
  }
};
/// dx = y (dy - sum(dy y)) per row.
template <class T>
struct SoftmaxRowsBackward {
  using value_type = T;
  static constexpr int kPasses = 1;
  const T *y, *dy;
  T* dx;
  index_t cols;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int, index_t r, int lane, int lanes, const T*) const {
    T v = 0;
    for (index_t c = lane; c < cols; c += lanes) v += y[r * cols + c] * dy[r * cols + c];
    return v;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    for (index_t c = lane; c < cols; c += lanes) dx[r * cols + c] = y[r * cols + c] * (dy[r * cols + c] - total[0]);
  }
};

// ---- reductions of rows ----------------------------------------------------------------------
/// out[r] = max of row r.
template <class T>
struct RowMax {
  using value_type = T;
  static constexpr int kPasses = 1;
  const T* x;
  T* out;
  index_t cols;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kMax; }
  EPL_HOST_DEVICE T partial(int, index_t r, int lane, int lanes, const T*) const {
    T v = identity<T>(Combine::kMax);
    for (index_t c = lane; c < cols; c += lanes) v = x[r * cols + c] > v ? x[r * cols + c] : v;
    return v;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int, const T* total) const {
    if (lane == 0) out[r] = total[0];
  }
};
/// out[r] = a[r, :] . b[r, :]
template <class T>
struct RowDot {
  using value_type = T;
  static constexpr int kPasses = 1;
  const T *a, *b;
  T* out;
  index_t cols;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int, index_t r, int lane, int lanes, const T*) const {
    T v = 0;
    for (index_t c = lane; c < cols; c += lanes) v += a[r * cols + c] * b[r * cols + c];
    return v;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int, const T* total) const {
    if (lane == 0) out[r] = total[0];
  }
};

// ---- cross-entropy ---------------------------------------------------------------------------
/// Softmax cross-entropy of logits [rows, classes] against class ids. Forward (loss set): loss[r]
/// = logsumexp(row) - row[target]. Backward (dlogits set): dlogits = scale (softmax - onehot).
/// A target outside [0, classes) is reported and its row left alone.
template <class T, class I>
struct CrossEntropyRows {
  using value_type = T;
  static constexpr int kPasses = 2;
  const T* logits;
  const I* targets;
  T* loss;     // forward: one per row
  T* dlogits;  // backward
  index_t classes;
  T scale;
  Report* bad;
  EPL_HOST_DEVICE Combine combine(int pass) const { return pass == 0 ? Combine::kMax : Combine::kSum; }
  EPL_HOST_DEVICE T partial(int pass, index_t r, int lane, int lanes, const T* total) const {
    return softmax_pass(pass, logits + r * classes, classes, lane, lanes, total);
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T* total) const {
    using std::exp;
    using std::log;
    const index_t target = static_cast<index_t>(targets[r]);
    if (target < 0 || target >= classes) {
      if (lane == 0) report(bad, Report::kTarget, target, classes);
      return;
    }
    if (loss && lane == 0) loss[r] = total[0] + log(total[1]) - logits[r * classes + target];
    if (dlogits)
      for (index_t c = lane; c < classes; c += lanes)
        dlogits[r * classes + c] = exp(logits[r * classes + c] - total[0]) * (scale / total[1]) - (c == target ? scale : T(0));
  }
};
/// A part of a vocabulary-parallel cross-entropy: logits [rows, cols] are classes [first, first +
/// cols) of `vocab`; from the whole rows' maxima, each row's sum of exp(logit - max) over the part
/// and its target's logit (0 when another part holds it).
template <class T, class I>
struct CrossEntropyStatsRows {
  using value_type = T;
  static constexpr int kPasses = 1;
  const T* logits;
  const I* targets;
  const T* max;
  T *sum_exp, *target_logit;
  index_t cols, first, vocab;
  Report* bad;
  EPL_HOST_DEVICE Combine combine(int) const { return Combine::kSum; }
  EPL_HOST_DEVICE T partial(int, index_t r, int lane, int lanes, const T*) const {
    using std::exp;
    T v = 0;
    for (index_t c = lane; c < cols; c += lanes) v += exp(logits[r * cols + c] - max[r]);
    return v;
  }
  EPL_HOST_DEVICE void write(index_t r, int lane, int, const T* total) const {
    if (lane != 0) return;
    const index_t target = static_cast<index_t>(targets[r]);
    if (target < 0 || target >= vocab) report(bad, Report::kTarget, target, vocab);
    sum_exp[r] = total[0];
    const index_t c = target - first;
    target_logit[r] = c >= 0 && c < cols ? logits[r * cols + c] : T(0);
  }
};
/// dlogits = scale (softmax - onehot) over a part of the classes, from the whole rows' statistics.
template <class T, class I>
struct CrossEntropyPartBackwardRows {
  using value_type = T;
  static constexpr int kPasses = 0;
  const T* logits;
  const I* targets;
  const T *max, *sum_exp;
  T* dlogits;
  index_t cols, first;
  T scale;
  EPL_HOST_DEVICE void write(index_t r, int lane, int lanes, const T*) const {
    using std::exp;
    const index_t target = static_cast<index_t>(targets[r]) - first;
    for (index_t c = lane; c < cols; c += lanes)
      dlogits[r * cols + c] = exp(logits[r * cols + c] - max[r]) * (scale / sum_exp[r]) - (c == target ? scale : T(0));
  }
};

// ---- rows by index ---------------------------------------------------------------------------
/// out[i, :] = table[ids[i] - first, :] for ids in this part [first, first + rows), else 0; an id
/// outside [0, limit) is reported.
template <class T, class I>
struct EmbeddingRows {
  using value_type = T;
  static constexpr int kPasses = 0;
  const I* ids;
  const T* table;
  T* out;
  index_t dim, first, rows, limit;
  Report* bad;
  EPL_HOST_DEVICE void write(index_t i, int lane, int lanes, const T*) const {
    const index_t id = static_cast<index_t>(ids[i]);
    if ((id < 0 || id >= limit) && lane == 0) report(bad, Report::kEmbeddingId, id, limit);
    const index_t r = id - first;
    const bool mine = id >= 0 && id < limit && r >= 0 && r < rows;
    for (index_t c = lane; c < dim; c += lanes) out[i * dim + c] = mine ? table[r * dim + c] : T(0);
  }
};
/// dtable[ids[i] - first, :] += dout[i, :] for ids in this part (accumulated: ids repeat).
template <class T, class I>
struct EmbeddingBackwardRows {
  using value_type = T;
  static constexpr int kPasses = 0;
  const I* ids;
  const T* dout;
  T* dtable;
  index_t dim, first, rows, limit;
  Report* bad;
  EPL_HOST_DEVICE void write(index_t i, int lane, int lanes, const T*) const {
    const index_t id = static_cast<index_t>(ids[i]);
    if (id < 0 || id >= limit) {
      if (lane == 0) report(bad, Report::kEmbeddingBackwardId, id, limit);
      return;
    }
    const index_t r = id - first;
    if (r < 0 || r >= rows) return;
    for (index_t c = lane; c < dim; c += lanes) accumulate(dtable + r * dim + c, dout[i * dim + c]);
  }
};
/// dst[i, :] = src[index[i], :] (gather), or dst[index[i], :] += weight[i] src[i, :] (scatter-add,
/// weight null: 1); an index outside [0, limit) is reported.
template <class T>
struct IndexedRows {
  using value_type = T;
  static constexpr int kPasses = 0;
  const T* src;
  const std::int64_t* index;
  const T* weight;
  T* dst;
  index_t cols, limit;
  bool scatter;
  Report* bad;
  EPL_HOST_DEVICE void write(index_t i, int lane, int lanes, const T*) const {
    const index_t at = index[i];
    if (at < 0 || at >= limit) {
      if (lane == 0) report(bad, Report::kRowIndex, at, limit);
      return;
    }
    const T w = weight ? weight[i] : T(1);
    for (index_t c = lane; c < cols; c += lanes)
      if (scatter) accumulate(dst + at * cols + c, src[i * cols + c] * w);
      else dst[i * cols + c] = src[at * cols + c];
  }
};

// ---- element bodies --------------------------------------------------------------------------
/// Between tokens [b, t, row] (head h at columns offset + h d) and heads [b, h, t, d]; i runs over
/// the heads' elements.
template <class T>
struct PermuteHeads {
  T *tokens, *heads;
  index_t t, h, d, row, offset;
  bool to_heads;
  bool narrow = false;  ///< both tensors under 2^31 elements: the index arithmetic in 32 bits (a 64-bit division costs more than the copy)
  EPL_HOST_DEVICE void operator()(index_t i) const {
    if (narrow) move<std::uint32_t>(i);
    else move<index_t>(i);
  }
  template <class I>
  EPL_HOST_DEVICE void move(index_t at) const {
    const I i = static_cast<I>(at), dd = i % I(d), ti = (i / I(d)) % I(t), x = i / I(d * t), bi = x / I(h), hi = x % I(h);
    const I k = (bi * I(t) + ti) * I(row) + I(offset) + hi * I(d) + dd;
    if (to_heads) heads[i] = tokens[k];
    else tokens[k] = heads[i];
  }
};
/// y = x keep / (1 - p), element i of a part that starts at `offset` in the whole keeping iff
/// uniform(key, its position in the whole) >= p. Columns [col0, col0 + cols) of rows of
/// `whole_cols` (whole_cols 0: the part is contiguous in the whole).
template <class T>
struct Dropout {
  const T* x;
  T* y;
  double p;
  std::uint64_t key;
  index_t offset, cols, whole_cols, col0;
  EPL_HOST_DEVICE void operator()(index_t i) const {
    const index_t at = whole_cols == 0 ? offset + i : offset + (i / cols) * whole_cols + col0 + i % cols;
    y[i] = uniform01(key, static_cast<std::uint64_t>(at)) >= p ? x[i] * T(1.0 / (1.0 - p)) : T(0);
  }
};
// The updates read the gradient as gs g: gs is the step's factor (AMP's unscale times the clip
// coefficient), applied as the gradient is read instead of in passes of its own over it.

/// p -= lr (gs g + wd p)
template <class T>
struct SgdStep {
  T *p;
  const T* g;
  T lr, wd, gs;
  EPL_HOST_DEVICE void operator()(index_t i) const { p[i] -= lr * (g[i] * gs + wd * p[i]); }
};
/// d = gs g + wd p; v = mu v + d; p -= lr (nesterov ? d + mu v : v)
template <class T>
struct MomentumStep {
  T *p;
  const T* g;
  T* v;
  T lr, mu, wd;
  bool nesterov;
  T gs;
  EPL_HOST_DEVICE void operator()(index_t i) const {
    const T d = g[i] * gs + wd * p[i];
    v[i] = mu * v[i] + d;
    p[i] -= lr * (nesterov ? d + mu * v[i] : v[i]);
  }
};
/// AdamW (decoupled decay): p *= 1 - lr wd; the moments of gs g; p -= step_size m / (sqrt(v) rbc2 + eps),
/// step_size = lr / (1 - beta1^step), rbc2 = 1 / sqrt(1 - beta2^step) (adamw_constants).
template <class T>
struct AdamWStep {
  T *p;
  const T* g;
  T *m, *v;
  T lr, beta1, beta2, eps, wd, step_size, rbc2, gs;
  EPL_HOST_DEVICE void operator()(index_t i) const {
    using std::sqrt;
    const T gi = g[i] * gs;
    p[i] *= T(1) - lr * wd;
    m[i] = beta1 * m[i] + (T(1) - beta1) * gi;
    v[i] = beta2 * v[i] + (T(1) - beta2) * gi * gi;
    p[i] -= step_size * m[i] / (sqrt(v[i]) * rbc2 + eps);
  }
};
/// The step's constants of AdamWStep, as device::Cpu computes them.
template <class T>
AdamWStep<T> adamw_step(T* p, const T* g, T* m, T* v, T lr, T beta1, T beta2, T eps, T wd, std::int64_t step, T gs) {
  const T bc1 = T(1) - std::pow(beta1, T(step)), bc2 = T(1) - std::pow(beta2, T(step));
  return {p, g, m, v, lr, beta1, beta2, eps, wd, lr / bc1, T(1) / std::sqrt(bc2), gs};
}

}  // namespace kernels
}  // namespace v0
}  // namespace epl
