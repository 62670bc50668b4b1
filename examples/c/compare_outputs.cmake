# Runs two programs and fails unless both succeed and print the same, non-empty text: the C
# and Rust twins of an example must agree line for line.
#   cmake "-DFIRST=prog|arg|..." "-DSECOND=prog|arg|..." [-DMATCH=regex] -P compare_outputs.cmake
# Arguments are separated by '|'. MATCH, if given, must occur in the output.
foreach(var FIRST SECOND)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_outputs: pass -D${var}=prog|arg|...")
  endif()
  string(REPLACE "|" ";" cmd "${${var}}")
  execute_process(COMMAND ${cmd} OUTPUT_VARIABLE out_${var} ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compare_outputs: `${${var}}` failed (${rc}):\n${out_${var}}${err}")
  endif()
endforeach()
if(out_FIRST STREQUAL "")
  message(FATAL_ERROR "compare_outputs: `${FIRST}` printed nothing")
endif()
if(DEFINED MATCH AND NOT out_FIRST MATCHES "${MATCH}")
  message(FATAL_ERROR "compare_outputs: output of `${FIRST}` lacks /${MATCH}/:\n${out_FIRST}")
endif()
if(NOT out_FIRST STREQUAL out_SECOND)
  message(FATAL_ERROR "compare_outputs: outputs differ\n--- ${FIRST}\n${out_FIRST}"
                      "--- ${SECOND}\n${out_SECOND}")
endif()
message(STATUS "identical output:\n${out_FIRST}")
