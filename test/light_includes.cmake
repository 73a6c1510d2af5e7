# A program linked with epl::precompiled (EPL_PRECOMPILED) parses none of what that library
# compiled for it (#38): through <epl/epl.hpp> its translation units see no Eigen, no Boost.CRC,
# no fcntl.h or dirent.h. The same scan of a header-only translation unit must find Eigen, or the
# scan itself proves nothing.
cmake_policy(VERSION 3.25)
file(WRITE ${WORK}/umbrella.cpp "#include <epl/epl.hpp>\n")
function(dependencies out)
  execute_process(COMMAND ${CXX} -std=gnu++20 -M ${ARGN} -I${INCLUDE} -isystem ${EIGEN} ${WORK}/umbrella.cpp
                  OUTPUT_VARIABLE deps ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "light_includes: ${CXX} -M failed: ${err}")
  endif()
  set(${out} "${deps}" PARENT_SCOPE)
endfunction()
set(heavy "Eigen/Core;boost/crc.hpp;/fcntl.h;/dirent.h")
dependencies(header_only)
if(NOT header_only MATCHES "Eigen/Core")
  message(FATAL_ERROR "light_includes: a header-only <epl/epl.hpp> does not list Eigen/Core among its dependencies; the scan is broken")
endif()
dependencies(precompiled -DEPL_PRECOMPILED)
set(seen "")
foreach(h IN LISTS heavy)
  string(FIND "${precompiled}" "${h}" at)
  if(NOT at EQUAL -1)
    list(APPEND seen ${h})
  endif()
endforeach()
if(seen)
  message(FATAL_ERROR "light_includes: under EPL_PRECOMPILED, <epl/epl.hpp> still includes ${seen}: move what needs it into an .ipp "
                      "that the header includes only without EPL_PRECOMPILED, and compile it into epl::precompiled (src/precompiled.cpp)")
endif()
message(STATUS "light_includes: under EPL_PRECOMPILED <epl/epl.hpp> includes none of ${heavy}")
