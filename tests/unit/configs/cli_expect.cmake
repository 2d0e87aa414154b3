# Runs a command and checks its exit status and output (for the CLI tests).
#   cmake -DCMD=command;arg;... -DRC=N [-DOUT=regex;...] [-DERR=regex;...]
#         [-DABSENT=path] [-DPRESENT=path;...] [-DMKDIR=dir;...] [-DSTDOUT_FILE=path]
#         -P cli_expect.cmake
# OUT/ERR: regexes stdout/stderr must each match. ABSENT: a path removed
# before the run that must still not exist after it. PRESENT: paths removed
# before the run that must exist after it. MKDIR: directories created (after
# the removals) before the run. STDOUT_FILE: stdout goes to this file (such
# as /dev/full) instead of being matched. (The command goes in CMD, not
# after -P: cmake would take options such as --list-presets.)
if(NOT CMD)
  message(FATAL_ERROR "cli_expect.cmake: no CMD")
endif()
foreach(path IN LISTS ABSENT PRESENT)
  file(REMOVE_RECURSE "${path}")
endforeach()
foreach(dir IN LISTS MKDIR)
  file(MAKE_DIRECTORY "${dir}")
endforeach()
if(STDOUT_FILE)
  execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_FILE "${STDOUT_FILE}"
    ERROR_VARIABLE err)
  set(out "")
else()
  execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
set(problems "")
if(NOT "${rc}" STREQUAL "${RC}")
  string(APPEND problems "exit status ${rc}, expected ${RC}\n")
endif()
foreach(re IN LISTS OUT)
  if(NOT out MATCHES "${re}")
    string(APPEND problems "stdout does not match: ${re}\n")
  endif()
endforeach()
foreach(re IN LISTS ERR)
  if(NOT err MATCHES "${re}")
    string(APPEND problems "stderr does not match: ${re}\n")
  endif()
endforeach()
if(ABSENT AND EXISTS "${ABSENT}")
  string(APPEND problems "${ABSENT} exists\n")
endif()
foreach(path IN LISTS PRESENT)
  if(NOT EXISTS "${path}")
    string(APPEND problems "${path} is missing\n")
  endif()
endforeach()
if(problems)
  list(JOIN CMD " " shown)
  message(FATAL_ERROR "${shown}\n${problems}--- stdout:\n${out}--- stderr:\n${err}")
endif()
