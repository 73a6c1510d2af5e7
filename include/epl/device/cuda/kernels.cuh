#pragma once
/// \file
/// \brief Element-wise CUDA kernels (grid-stride loops), typed like the CPU ones.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "epl/core/dtype.hpp"
#include "epl/device/bodies.hpp"

namespace epl {
inline namespace v0 {
namespace detail::cuda {

/// The CUDA type of each epl element type.
template <class T> struct native { using type = T; };
template <> struct native<epl::half> { using type = __half; };
template <> struct native<epl::bfloat16> { using type = __nv_bfloat16; };
template <class T> using native_t = typename native<T>::type;

template <class To, class From> __device__ inline To convert(From x) { return static_cast<To>(static_cast<float>(x)); }
template <> __device__ inline double convert<double, double>(double x) { return x; }
template <> __device__ inline double convert<double, float>(float x) { return x; }
template <> __device__ inline __half convert<__half, float>(float x) { return __float2half_rn(x); }
template <> __device__ inline __half convert<__half, double>(double x) { return __double2half(x); }
template <> __device__ inline __nv_bfloat16 convert<__nv_bfloat16, float>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ inline __nv_bfloat16 convert<__nv_bfloat16, double>(double x) { return __double2bfloat16(x); }
template <> __device__ inline __half convert<__half, __half>(__half x) { return x; }
template <> __device__ inline __nv_bfloat16 convert<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 x) { return x; }
template <> __device__ inline __half convert<__half, __nv_bfloat16>(__nv_bfloat16 x) { return __float2half_rn(__bfloat162float(x)); }
template <> __device__ inline __nv_bfloat16 convert<__nv_bfloat16, __half>(__half x) { return __float2bfloat16_rn(__half2float(x)); }

#define EPL_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

template <class T> __global__ void fill(T* y, std::int64_t n, double v) { EPL_GRID_STRIDE(i, n) y[i] = convert<T>(v); }
template <class From, class To> __global__ void cast(const From* x, To* y, std::int64_t n) { EPL_GRID_STRIDE(i, n) y[i] = convert<To>(x[i]); }
/// y = x rounded to a half type, four f32 at a time (16-byte loads, two 4-byte stores): the
/// operands of every GEMM under AMP go through it, so it runs at the memory's rate.
template <class H> __device__ inline H pack2(float a, float b);
template <> __device__ inline __nv_bfloat162 pack2<__nv_bfloat162>(float a, float b) { return __floats2bfloat162_rn(a, b); }
template <> __device__ inline __half2 pack2<__half2>(float a, float b) { return __floats2half2_rn(a, b); }
template <class H2> __global__ void cast4(const float4* x, H2* y, std::int64_t n4) {
  EPL_GRID_STRIDE(i, n4) {
    const float4 v = x[i];
    y[2 * i] = pack2<H2>(v.x, v.y);
    y[2 * i + 1] = pack2<H2>(v.z, v.w);
  }
}
/// y [out_rows, pitch] = x [rows, cols] rounded to a half type, padded with zeros to the right and
/// below (a GEMM operand padded for the aligned kernels, device/blas_args.hpp's padded_gemm). Rows
/// over blockIdx.y, pairs of columns over x: no division, and a 4-byte store per thread (pitch is
/// even).
template <class H2> __global__ void cast_padded(const float* x, H2* y, std::int64_t rows, std::int64_t cols, std::int64_t out_rows,
                                                std::int64_t pitch) {
  const std::int64_t pairs = pitch / 2;
  for (std::int64_t r = blockIdx.y; r < out_rows; r += gridDim.y) {
    const float* src = x + r * cols;
    H2* dst = y + r * pairs;
    const bool in = r < rows;
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < pairs;
         p += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
      const std::int64_t c = 2 * p;
      dst[p] = pack2<H2>(in && c < cols ? src[c] : 0.0f, in && c + 1 < cols ? src[c + 1] : 0.0f);
    }
  }
}
template <class T> __global__ void add(const T* a, const T* b, T* out, std::int64_t n) { EPL_GRID_STRIDE(i, n) out[i] = a[i] + b[i]; }
template <class T> __global__ void mul(const T* a, const T* b, T* out, std::int64_t n) { EPL_GRID_STRIDE(i, n) out[i] = a[i] * b[i]; }
template <class T> __global__ void axpy(T alpha, const T* x, T* y, std::int64_t n) { EPL_GRID_STRIDE(i, n) y[i] += alpha * x[i]; }
template <class T> __global__ void scale(T* y, std::int64_t n, T alpha) { EPL_GRID_STRIDE(i, n) y[i] *= alpha; }
template <class T> __global__ void add_row_vector(T* y, const T* v, std::int64_t n, std::int64_t cols) {
  if (n < (std::int64_t{1} << 31)) {  // 32-bit remainders: a 64-bit one costs more than the add
    const unsigned c = static_cast<unsigned>(cols), m = static_cast<unsigned>(n);
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += blockDim.x * gridDim.x) y[i] += v[i % c];
  } else {
    EPL_GRID_STRIDE(i, n) y[i] += v[i % cols];
  }
}
// GELU, tanh form, and its derivative (see device/cpu/elementwise.hpp).
template <class T> __global__ void gelu(const T* x, T* y, std::int64_t n) {
  EPL_GRID_STRIDE(i, n) {
    T u = x[i];
    y[i] = T(0.5) * u * (T(1) + tanh(T(0.7978845608028654) * (u + T(0.044715) * u * u * u)));
  }
}
template <class T> __global__ void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
  EPL_GRID_STRIDE(i, n) {
    T u = x[i], c = T(0.7978845608028654), k = T(0.044715);
    T t = tanh(c * (u + k * u * u * u));
    dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * u * (T(1) - t * t) * c * (T(1) + T(3) * k * u * u));
  }
}
template <class T> __global__ void relu(const T* x, T* y, std::int64_t n) { EPL_GRID_STRIDE(i, n) y[i] = x[i] <= T(0) ? T(0) : x[i]; }
template <class T> __global__ void relu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
  EPL_GRID_STRIDE(i, n) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}
/// out[i] = fn(in[i]...): Device::map's kernel, for any element-wise function (device/functors.hpp).
template <class Fn, class T, class... In> __global__ void map(Fn fn, T* out, std::int64_t n, const In*... in) {
  EPL_GRID_STRIDE(i, n) out[i] = fn(in[i]...);
}
#undef EPL_GRID_STRIDE

// ---- launches of the bodies in device/bodies.hpp ----------------------------------------------
/// A row program, one warp per row: each pass's lane partials are combined by shuffles, so every
/// lane holds the total (the host driver kernels::run_rows does the same one lane at a time).
template <class K> __global__ void rows(K k, std::int64_t n) {
  using T = typename K::value_type;
  const std::int64_t r = kernels::row_of(blockIdx.x, threadIdx.x);
  const int lane = kernels::lane_of(threadIdx.x);
  if (r >= n) return;  // a whole warp: its lanes share the row
  T total[K::kPasses > 0 ? K::kPasses : 1];
  if constexpr (K::kPasses > 0)
    for (int p = 0; p < K::kPasses; ++p) {
      T v = k.partial(p, r, lane, kernels::kLanes, total);
      for (int o = kernels::kLanes / 2; o > 0; o /= 2) v = kernels::combine(k.combine(p), v, __shfl_xor_sync(0xffffffffu, v, o));
      total[p] = v;
    }
  k.write(r, lane, kernels::kLanes, total);
}
/// An element body over [0, n) in a grid-stride loop.
template <class Fn> __global__ void elements(Fn fn, std::int64_t n) {
  kernels::grid_stride(blockIdx.x, threadIdx.x, kernels::Launch{gridDim.x, blockDim.x}, n, fn);
}
/// A column body: x over columns, y over chunks of rows.
template <class Fn> __global__ void columns(Fn fn, std::int64_t rows, std::int64_t cols, std::int64_t chunk) {
  const std::int64_t c = kernels::column_of(blockIdx.x, threadIdx.x);
  if (c < cols) fn(c, kernels::chunk_begin(blockIdx.y, chunk), kernels::chunk_end(blockIdx.y, chunk, rows));
}
/// *out += the sum of x (squared when `squares`), accumulated in double: each thread over its
/// grid-stride indices, then the warp, then one atomicAdd a warp.
template <class T> __global__ void sum_into(const T* x, std::int64_t n, bool squares, double* out) {
  double s = 0;
  kernels::grid_stride(blockIdx.x, threadIdx.x, kernels::Launch{gridDim.x, blockDim.x}, n, [&](std::int64_t i) {
    const double v = static_cast<double>(x[i]);
    s += squares ? v * v : v;
  });
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) atomicAdd(out, s);
}

/// Launch geometry for n elements: 256 threads a block, at most 4096 blocks (grid-stride).
/// Up to kLaneSources pointers, passed by value to a kernel.
inline constexpr int kLaneSources = 16;
template <class T>
struct Sources {
  const T* p[kLaneSources];
};
/// dst[i] = r over sources k < n of src.p[k][i] (0 sum, 1 max, 2 min), divided by divisor when
/// above 1; accumulated in f32 for half types and rounded once. Each element is read from every
/// source before it is written, so dst may be a source.
template <class T>
__global__ void reduce_sources(T* dst, Sources<T> src, int n, std::int64_t count, int r, int divisor) {
  using Acc = std::conditional_t<sizeof(T) == 2, float, T>;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    Acc a = static_cast<Acc>(src.p[0][i]);
    for (int k = 1; k < n; ++k) {
      const Acc b = static_cast<Acc>(src.p[k][i]);
      a = r == 0 ? a + b : r == 1 ? (a < b ? b : a) : (b < a ? b : a);
    }
    if (divisor > 1) a = a / static_cast<Acc>(divisor);
    dst[i] = static_cast<T>(a);
  }
}

inline dim3 blocks_for(std::int64_t n) {
  auto b = (n + 255) / 256;
  return dim3(static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b)));
}

}  // namespace detail::cuda
}  // namespace v0
}  // namespace epl
