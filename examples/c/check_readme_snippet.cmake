# Checks that README.md shows a snippet file verbatim, so the code the README shows is the
# code the test suite compiles and runs.
#   cmake -DREADME=README.md -DSNIPPET=examples/c/readme.c -P check_readme_snippet.cmake
foreach(var README SNIPPET)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_readme_snippet: pass -D${var}=...")
  endif()
endforeach()
file(READ "${README}" readme_text)
file(READ "${SNIPPET}" snippet_text)
string(REGEX REPLACE "\n+$" "" snippet_text "${snippet_text}")
string(FIND "${readme_text}" "${snippet_text}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} does not contain ${SNIPPET} verbatim; paste the file's "
                      "contents into the README's code block (or update the file to match)")
endif()
message(STATUS "${README} shows ${SNIPPET} verbatim")
