# cmake/revision.cmake -- writes the git revision moegen is built from into a
# header, for `moegen --version`. Run at every build (a target that is always
# out of date); the header changes only when the revision does, so nothing
# recompiles otherwise.
#   cmake -DSOURCE_DIR=<moegen source> -DOUTPUT=<dir>/moegen_revision.h -P revision.cmake
# MOEGEN_GIT_REVISION is HEAD's full hash, "-dirty" appended when tracked
# files differ from it, or "unknown" when SOURCE_DIR is not the top of a git
# checkout (a release tarball, or a moegen tree inside another project's
# repository) or git is missing.
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "revision.cmake: give -DSOURCE_DIR and -DOUTPUT")
endif()
set(revision unknown)
find_program(GIT git)
if(GIT)
  execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" rev-parse --show-toplevel HEAD
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    string(REPLACE "\n" ";" out "${out}")
    list(GET out 0 top)
    list(GET out 1 head)
    file(REAL_PATH "${top}" top)
    file(REAL_PATH "${SOURCE_DIR}" src)
    if(top STREQUAL src)
      set(revision "${head}")
      execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
        RESULT_VARIABLE rc OUTPUT_VARIABLE changes ERROR_QUIET)
      if(rc EQUAL 0 AND NOT changes STREQUAL "")
        string(APPEND revision "-dirty")
      endif()
    endif()
  endif()
endif()
file(CONFIGURE OUTPUT "${OUTPUT}" CONTENT
  "/* Written by cmake/revision.cmake at build time. */\n#define MOEGEN_GIT_REVISION \"@revision@\"\n"
  @ONLY)
