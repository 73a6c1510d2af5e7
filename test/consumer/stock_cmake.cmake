# Configures epl with CUDA and NCCL, and a consumer of the installed epl::cuda, against CMake's
# *stock* find modules, as a user's Debian 12 has them. Machines that carry a locally patched
# FindCUDAToolkit.cmake (`dpkg -V cmake-data` lists it) would otherwise hide a failure that every
# stock machine sees; there, the unmodified modules are taken from Debian's cmake-data package.
# Prints "epl-skip: <why>" (a skipped test) when there is no nvcc or no stock copy to be had.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(skip why)
  message("epl-skip: ${why}")
endfunction()
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

find_program(NVCC nvcc HINTS /usr/local/cuda/bin)
if(NOT NVCC)
  skip("no nvcc in PATH or /usr/local/cuda/bin: the CUDA configuration cannot be checked here")
  return()
endif()

set(modules "${CMAKE_ROOT}/Modules")
execute_process(COMMAND dpkg -V cmake-data OUTPUT_VARIABLE changed ERROR_QUIET)
if(changed MATCHES "FindCUDAToolkit")
  execute_process(COMMAND dpkg-query -W -f=\${Version} cmake-data OUTPUT_VARIABLE version)
  execute_process(COMMAND apt-get download cmake-data=${version} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  file(GLOB deb ${WORK_DIR}/cmake-data_*.deb)
  if(NOT rc EQUAL 0 OR NOT deb)
    skip("this machine's FindCUDAToolkit.cmake is locally modified and Debian's cmake-data ${version} could not be downloaded: ${err}")
    return()
  endif()
  run(dpkg-deb -x ${deb} ${WORK_DIR}/stock)
  file(GLOB modules ${WORK_DIR}/stock/usr/share/cmake-*/Modules)
endif()
message("stock find modules: ${modules}")

set(common -G ${GENERATOR} -DCMAKE_MODULE_PATH=${modules} -DCMAKE_CUDA_COMPILER=${NVCC} -DCMAKE_CUDA_ARCHITECTURES=90)
# configuration only: nothing is built (the compiled-once library and the tool stay off)
run(${CMAKE_COMMAND} -S ${EPL_SOURCE_DIR} -B ${WORK_DIR}/epl ${common} -DEPL_ENABLE_CUDA=ON -DEPL_ENABLE_NCCL=ON
    -DEPL_BUILD_TESTS=OFF -DEPL_BUILD_EXAMPLES=OFF -DEPL_BUILD_BENCH=OFF -DEPL_BUILD_PRECOMPILED=OFF -DEPL_BUILD_TOOLS=OFF
    -DEPL_INSTALL=ON -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix -DEPL_CUDNN_FRONTEND=OFF)  # its library would need a build
if(NOT last_output MATCHES "components epl cuda;nccl")
  message(FATAL_ERROR "epl configured against the stock modules without its CUDA components:\n${last_output}")
endif()
run(${CMAKE_COMMAND} --install ${WORK_DIR}/epl)
run(${CMAKE_COMMAND} -S ${EPL_SOURCE_DIR}/test/consumer -B ${WORK_DIR}/consumer ${common} -DEPL_CONSUME=package
    -DEPL_COMPONENTS=cuda;nccl -DEPL_CONSUME_PRECOMPILED=OFF -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
message("epl and a consumer of epl::cuda and epl::nccl configure against the stock find modules")
