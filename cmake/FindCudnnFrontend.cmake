# FindCudnnFrontend: the cuDNN frontend's C++ headers (cudnn_frontend.h, header-only), which fused
# attention on a GPU is built with (device/cuda/attention.cuh).
# Looks in CUDNN_FRONTEND_ROOT (CMake or environment variable; its include/), the CUDA toolkit,
# the system, and Python's site-packages, where PyPI's nvidia-cudnn-frontend wheel puts them.
# Defines CudnnFrontend_FOUND, CudnnFrontend_VERSION and the imported target CUDNN::frontend.
set(_epl_fe_hints ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} /usr/local/cuda)
find_package(Python3 QUIET COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import site, sys; print(';'.join(site.getsitepackages() + [site.getusersitepackages()]))"
                  OUTPUT_VARIABLE _epl_fe_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND _epl_fe_hints ${_epl_fe_site})
endif()
# a root given anew is searched anew (the found folder is cached)
if(DEFINED CUDNN_FRONTEND_ROOT AND NOT "${CUDNN_FRONTEND_ROOT}" STREQUAL "${_EPL_FRONTEND_ROOT_SEARCHED}")
  unset(CUDNN_FRONTEND_INCLUDE_DIR CACHE)
  set(_EPL_FRONTEND_ROOT_SEARCHED "${CUDNN_FRONTEND_ROOT}" CACHE INTERNAL "")
endif()
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_epl_fe_hints} PATH_SUFFIXES include)
if(DEFINED CUDNN_FRONTEND_ROOT AND NOT EXISTS "${CUDNN_FRONTEND_ROOT}/include/cudnn_frontend.h"
   AND NOT EXISTS "${CUDNN_FRONTEND_ROOT}/cudnn_frontend.h")
  set(CUDNN_FRONTEND_ROOT_NOTE " (CUDNN_FRONTEND_ROOT=${CUDNN_FRONTEND_ROOT} holds none)")
endif()
if(CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h)
  file(STRINGS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h _v REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
  string(REGEX REPLACE ".*MAJOR_VERSION +([0-9]+).*MINOR_VERSION +([0-9]+).*PATCH_VERSION +([0-9]+).*" "\\1.\\2.\\3"
         CudnnFrontend_VERSION "${_v}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CudnnFrontend REQUIRED_VARS CUDNN_FRONTEND_INCLUDE_DIR VERSION_VAR CudnnFrontend_VERSION)
if(CudnnFrontend_FOUND AND NOT TARGET CUDNN::frontend)
  add_library(CUDNN::frontend INTERFACE IMPORTED)
  # SYSTEM: the frontend's own warnings are not the including program's
  set_target_properties(CUDNN::frontend PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${CUDNN_FRONTEND_INCLUDE_DIR}
                                                   INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_FRONTEND_INCLUDE_DIR}
                                                   INTERFACE_COMPILE_DEFINITIONS EPL_CUDNN_FRONTEND=1)
endif()
mark_as_advanced(CUDNN_FRONTEND_INCLUDE_DIR)
