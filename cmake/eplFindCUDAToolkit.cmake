# epl_find_cuda_toolkit(<find_package arguments>): find_package(CUDAToolkit) that also works with
# the stock FindCUDAToolkit of CMake 3.25/3.26 (Debian 12's) on CUDA 12.9 and 13.
#
# That module marks the target CUDA::nvToolsExt deprecated whenever the calling project requires
# CMake >= 3.25, and fails ("set_property could not find TARGET CUDA::nvToolsExt") when the
# library is absent, as it is from CUDA 12.9 on (nvToolsExt became the header-only nvtx3). epl
# needs neither, so the look-up runs with the required version seen as 3.24, which skips only that
# deprecation note; the caller's value is restored right after. Newer CMake guards the line.
macro(epl_find_cuda_toolkit)
  set(_epl_saved_min_version "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  if(CMAKE_VERSION VERSION_LESS 3.27 AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  endif()
  find_package(CUDAToolkit ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_epl_saved_min_version}")
  unset(_epl_saved_min_version)
endmacro()
