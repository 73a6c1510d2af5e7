#pragma once
/// \file
/// \brief EPL_HOST_DEVICE: marks a function that compiles for the host and, in a CUDA
/// translation unit, for the GPU too. Kernel bodies written once with it run in the CPU test
/// suite and in the CUDA device's kernels (device/bodies.hpp).
#if defined(__CUDACC__)
#define EPL_HOST_DEVICE __host__ __device__
#else
#define EPL_HOST_DEVICE
#endif
