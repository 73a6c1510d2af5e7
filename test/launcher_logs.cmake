# epl-launch writes the workers' logs only into a folder of this run's own: a link planted in
# --log_dir where mpirun once wrote (DIR/1, pointing at a folder outside) is never followed, and
# the logs are in DIR/run-*/1/rank.N/stdout.
set(dir ${WORK}/logs)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${dir} ${WORK}/victim)
file(WRITE ${WORK}/victim/keep "the victim's own bytes\n")
file(CREATE_LINK ${WORK}/victim ${dir}/1 SYMBOLIC)
execute_process(COMMAND ${LAUNCHER} --num_workers 2 --log_dir ${dir} -- ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "epl-launch: exit '${rc}'\n${out}${err}")
endif()
file(GLOB victim RELATIVE ${WORK}/victim ${WORK}/victim/*)
if(NOT victim STREQUAL "keep")
  message(FATAL_ERROR "the folder the planted link points at changed: ${victim}")
endif()
file(GLOB logs ${dir}/run-*/1/rank.1/stdout)
if(NOT logs)
  message(FATAL_ERROR "no log in ${dir}/run-*/1/rank.1/stdout:\n${err}")
endif()
file(REMOVE_RECURSE ${WORK})
