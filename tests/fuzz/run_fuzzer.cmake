# Driver of one fuzz run, for ctest (short runs) and bench/fuzz.sh (long runs):
#   cmake -DFUZZER=path/NAME_fuzz -DNAME=NAME -DWORK=dir [-DOPTIONS="-runs=N;..."] -P run_fuzzer.cmake
# WORK is made afresh: new inputs go to WORK/corpus, never into the committed seeds
# (corpus/NAME/, read only), and crash-*, leak-*, timeout-* and oom-* reproducers to WORK/.
# NAME.dict next to this file is used when it exists. SANDPOOL_FUZZ_LOOK_PAST is set: harnesses
# skip the inputs of bugs already reported (each says which; regressions/ has them).
foreach(var FUZZER NAME WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzzer.cmake: ${var} is not set")
  endif()
endforeach()
set(src ${CMAKE_CURRENT_LIST_DIR})
# Every run: a unit slower than 10 s is a hang, more than 2 GiB of memory a bug; the time limit
# only guards against a slow machine (-runs bounds the work), and the stats close the log.
set(flags -timeout=10 -rss_limit_mb=2048 -max_total_time=60 -print_final_stats=1)
if(EXISTS ${src}/${NAME}.dict)
  list(APPEND flags -dict=${src}/${NAME}.dict)
endif()
list(APPEND flags ${OPTIONS} -artifact_prefix=${WORK}/)  # later flags win: OPTIONS may override

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
set(ENV{SANDPOOL_FUZZ_LOOK_PAST} 1)
message(STATUS "${FUZZER} ${flags} ${WORK}/corpus ${src}/corpus/${NAME}")
execute_process(COMMAND ${FUZZER} ${flags} ${WORK}/corpus ${src}/corpus/${NAME}
                WORKING_DIRECTORY ${WORK}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK}/crash-* ${WORK}/leak-* ${WORK}/timeout-* ${WORK}/oom-*)
  message(FATAL_ERROR "${NAME}_fuzz failed (${rc}); reproducers: ${found}")
endif()
