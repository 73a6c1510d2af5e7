# Installs epl into a temporary prefix, then builds and runs the consumer twice: against the
# installed package (find_package) and vendored (FetchContent).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer step failed (${rc}): ${ARGN}")
  endif()
endfunction()
# Debug: the installed package is proven, not its speed (its compiled-once part builds faster so)
run(${CMAKE_COMMAND} -S ${EPL_SOURCE_DIR} -B ${WORK_DIR}/epl-build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Debug
    -DEPL_BUILD_TESTS=OFF -DEPL_BUILD_EXAMPLES=OFF -DEPL_BUILD_BENCH=OFF -DEPL_INSTALL=ON -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/epl-build)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/epl-build)
if(NOT EXISTS ${WORK_DIR}/prefix/bin/epl-checkpoint OR NOT EXISTS ${WORK_DIR}/prefix/bin/epl-launch)
  message(FATAL_ERROR "the installed package lacks bin/epl-checkpoint or bin/epl-launch")
endif()
foreach(mode package fetch)
  # Debug: the consumer proves the package and its targets, not speed; -O3 cost 90 s a build.
  run(${CMAKE_COMMAND} -S ${EPL_SOURCE_DIR}/test/consumer -B ${WORK_DIR}/${mode} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Debug
      -DEPL_CONSUME=${mode} -DEPL_SOURCE_DIR=${EPL_SOURCE_DIR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/${mode})
  run(${WORK_DIR}/${mode}/consumer)
  run(${WORK_DIR}/${mode}/consumer_precompiled)
endforeach()
