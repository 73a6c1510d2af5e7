# Runs PROGRAM with ARGS; passes only if it exits with status 2 (epl's error exit) and its output
# matches MESSAGE: bad input ends with a clear message, not a crash or a silent run.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: exit '${rc}', expected 2\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "${MESSAGE}")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: output does not match '${MESSAGE}':\n${out}${err}")
endif()
message("${PROGRAM} ${ARGS}: exit 2, ${err}")
