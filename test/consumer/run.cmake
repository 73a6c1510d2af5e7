# Installs epl into a temporary prefix, then builds and runs the consumer twice: against the
# installed package (find_package) and vendored (FetchContent, which builds epl's targets anew).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer step failed (${rc}): ${ARGN}")
  endif()
endfunction()
# The package is installed from the build tree under test (BUILD_DIR), whose compiled-once part
# and tools ctest's build has made already: building epl again here cost ~60 s of CI (#38).
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
if(NOT EXISTS ${WORK_DIR}/prefix/bin/epl-checkpoint OR NOT EXISTS ${WORK_DIR}/prefix/bin/epl-launch)
  message(FATAL_ERROR "the installed package lacks bin/epl-checkpoint or bin/epl-launch")
endif()
foreach(mode package fetch)
  # Debug without -g: the consumer proves the package and its targets, not speed; -O3 cost 90 s a
  # build, and -g another 9 s of the vendored epl::precompiled's.
  run(${CMAKE_COMMAND} -S ${EPL_SOURCE_DIR}/test/consumer -B ${WORK_DIR}/${mode} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Debug
      -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DEPL_CONSUME=${mode} -DEPL_SOURCE_DIR=${EPL_SOURCE_DIR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  # the two programs only: vendored, epl-checkpoint is checked as a target (CMakeLists.txt), and
  # its build is ctest's own. Vendored, consumer_precompiled alone: it compiles the vendored
  # epl::precompiled and links it with epl::epl; the header-only program differs only by that
  # library, and the package's build checks it (CI time, #38: 20 s of a Debug compile)
  set(programs consumer consumer_precompiled)
  if(mode STREQUAL "fetch")
    set(programs consumer_precompiled)
  endif()
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/${mode} --target ${programs})
  foreach(program IN LISTS programs)
    run(${WORK_DIR}/${mode}/${program})
  endforeach()
endforeach()
