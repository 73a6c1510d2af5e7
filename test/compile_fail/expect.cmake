# Builds TARGET in BUILD_DIR and passes only if the build fails with output matching REGEX and
# with exactly ERRORS error lines ("any": at least one): a compile-fail test that also catches a cascade of errors.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but must not")
endif()
if(NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "${TARGET} failed without the expected message '${REGEX}':\n${all}")
endif()
string(REGEX MATCHALL "(error:|\\): error)" errors "${all}")
list(LENGTH errors count)
if(NOT ERRORS STREQUAL "any" AND NOT count EQUAL ERRORS)  # "any": the count is the compiler's own
  message(FATAL_ERROR "${TARGET} failed with ${count} errors, expected ${ERRORS}:\n${all}")
endif()
message("${TARGET} fails as it must: ${count} error(s) matching '${REGEX}'")
