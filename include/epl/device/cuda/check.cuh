#pragma once
/// \file
/// \brief Checked CUDA and cuBLAS calls: a failure throws epl::Error naming the call and code.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "epl/core/error.hpp"

#define EPL_CUDA_CHECK(call)                                                                     \
  do {                                                                                           \
    cudaError_t epl_status_ = (call);                                                            \
    if (epl_status_ != cudaSuccess)                                                              \
      EPL_FAIL(#call, " failed: ", cudaGetErrorName(epl_status_), " (", cudaGetErrorString(epl_status_), ")"); \
  } while (false)

#define EPL_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                           \
    cublasStatus_t epl_status_ = (call);                                                         \
    if (epl_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      EPL_FAIL(#call, " failed: ", cublasGetStatusName(epl_status_), " (", cublasGetStatusString(epl_status_), ")"); \
  } while (false)

namespace epl {
inline namespace v0 {
namespace device {
/// \brief The number of CUDA devices visible, 0 when there is no driver or no GPU.
inline int cuda_device_count() noexcept {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
}  // namespace device
}  // namespace v0
}  // namespace epl
