# tests/install/install_consumer.cmake -- the installed package serves its
# three uses (test install_consumer):
#   1. cmake --install of the moegen build into WORK/prefix; the expected
#      files are there (listed in the test's output), the installed moegen
#      runs (--version) and the man page is one;
#   2. consumer/ (find_package(moegen) through CMAKE_PREFIX_PATH) configures
#      and builds: the AOT path (moegen_generate with the installed moegen,
#      linked with moegen::moegen_rt) and the JIT path (moegen::moegen_gen);
#      both programs run their GPU-free checks; with shared Lua and jansson
#      (STATIC_DEPS OFF) and find_library finding nothing, the AOT program
#      alone (COMPONENTS rt) still configures and builds, and COMPONENTS
#      gen fails, naming Lua;
#   3. the same two programs built with the C compiler and pkg-config alone
#      (moegen-rt for the AOT one, with NAME.c from the installed moegen;
#      moegen for the JIT one), and run.
#   cmake -DBUILD_DIR=<moegen build> -DSOURCE_DIR=<moegen source> -DWORK=<dir>
#         -DGENERATOR=<g> -DC_COMPILER=<cc> -DBUILD_TYPE=<t> -DVERSION=<x.y.z>
#         -DSTATIC_DEPS=ON|OFF -DBINDIR=.. -DLIBDIR=.. -DINCLUDEDIR=.. -DMANDIR=..
#         -P install_consumer.cmake
# WORK is removed first. Needs pkg-config (setup.sh installs pkgconf).
cmake_minimum_required(VERSION 3.25)
foreach(var BUILD_DIR SOURCE_DIR WORK GENERATOR C_COMPILER VERSION BINDIR LIBDIR INCLUDEDIR MANDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_consumer.cmake: -D${var} missing")
  endif()
endforeach()
set(prefix ${WORK}/prefix)
set(consumer ${SOURCE_DIR}/tests/install/consumer)

# run(<what> <command>...): runs the command, fails with its output unless
# it exits 0; its stdout+stderr in run_output.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " shown)
    message(FATAL_ERROR "${what} failed (${rc}): ${shown}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(expect what text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: expected to match '${regex}', got:\n${text}")
  endif()
endfunction()

# ---------------------------------------------------------------- 1. install
file(REMOVE_RECURSE ${WORK})
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE ${prefix} ${prefix}/*)
list(SORT installed)
list(JOIN installed "\n  " shown)
message(STATUS "installed into ${prefix}:\n  ${shown}")
set(cmake_dir ${LIBDIR}/cmake/moegen)
set(expected ${BINDIR}/moegen ${LIBDIR}/libmoegen_rt.a ${LIBDIR}/libmoegen_gen.a
  ${INCLUDEDIR}/moegen/moegen.h ${INCLUDEDIR}/moegen/runtime.h ${INCLUDEDIR}/moegen/config.h
  ${INCLUDEDIR}/moegen/types.h ${INCLUDEDIR}/moegen/abi.def ${MANDIR}/man1/moegen.1
  ${LIBDIR}/pkgconfig/moegen.pc ${LIBDIR}/pkgconfig/moegen-rt.pc
  ${cmake_dir}/moegenConfig.cmake ${cmake_dir}/moegenConfigVersion.cmake
  ${cmake_dir}/moegen.cmake ${cmake_dir}/moegenTargets.cmake ${cmake_dir}/moegenGenTargets.cmake)
if(NOT STATIC_DEPS)
  list(APPEND expected ${cmake_dir}/moegenDeps.cmake)
endif()
foreach(file IN LISTS expected)
  if(NOT file IN_LIST installed)
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
run("installed moegen --version" ${prefix}/${BINDIR}/moegen --version)
expect("moegen --version" "${run_output}" "^moegen ${VERSION}\nrevision: [^\n]+\nNVRTC ")
file(READ ${prefix}/${MANDIR}/man1/moegen.1 man)
expect("moegen.1" "${man}" "\n\\.TH MOEGEN 1 [^\n]*\n\\.SH NAME\nmoegen \\\\- ")
foreach(section SYNOPSIS DESCRIPTION OPTIONS "CONFIG KEYS" "EXIT STATUS")
  expect("moegen.1" "${man}" "\n\\.SH ${section}\n")
endforeach()
expect("moegen.1" "${man}" "\n\\\\fB\\\\-\\\\-hf\\\\-config\\\\fR \\\\fIFILE\\\\fR\n")

# ---------------------------------------------------------------- 2. CMake consumer
set(cmake_build ${WORK}/cmake)
set(args -S ${consumer} -B ${cmake_build} -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER}
  -DCMAKE_PREFIX_PATH=${prefix})
if(BUILD_TYPE)
  list(APPEND args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
run("consumer configure" ${CMAKE_COMMAND} ${args})
file(REAL_PATH ${prefix}/${cmake_dir} want_dir)
file(STRINGS ${cmake_build}/CMakeCache.txt found_dir REGEX "^moegen_DIR:")
string(REGEX REPLACE "^[^=]*=" "" found_dir "${found_dir}")
file(REAL_PATH "${found_dir}" found_dir)
if(NOT found_dir STREQUAL want_dir)
  message(FATAL_ERROR "find_package(moegen) found ${found_dir}, not ${want_dir}")
endif()
run("consumer build" ${CMAKE_COMMAND} --build ${cmake_build})
run("aot_app (CMake)" ${cmake_build}/aot_app)
message(STATUS "${run_output}")
run("jit_app (CMake)" ${cmake_build}/jit_app)
message(STATUS "${run_output}")
if(NOT STATIC_DEPS)
  # find_library searching only under a root that does not exist finds no
  # library (and nothing else changes), as on a machine without the Lua and
  # jansson development packages.
  set(no_libs ${args} -DCMAKE_FIND_ROOT_PATH=${WORK}/no-root
    -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY)
  list(TRANSFORM no_libs REPLACE "^${cmake_build}$" "${cmake_build}-aot-only")
  run("AOT-only consumer without Lua, configure" ${CMAKE_COMMAND} ${no_libs} -DCONSUMER_JIT=OFF)
  expect("AOT-only consumer without Lua" "${run_output}"
    "moegen: moegen::moegen_gen needs liblua5\\.4 and libjansson \\(shared\\), not found")
  run("AOT-only consumer without Lua, build" ${CMAKE_COMMAND} --build ${cmake_build}-aot-only)
  list(TRANSFORM no_libs REPLACE "^${cmake_build}-aot-only$" "${cmake_build}-no-lua")
  execute_process(COMMAND ${CMAKE_COMMAND} ${no_libs} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(moegen COMPONENTS gen) without Lua succeeded:\n${out}")
  endif()
  expect("COMPONENTS gen without Lua" "${out}" "moegen::moegen_gen needs liblua5\\.4")
endif()

# ---------------------------------------------------------------- 3. pkg-config consumer
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (setup.sh installs pkgconf)")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
set(pc_build ${WORK}/pkg-config)
file(MAKE_DIRECTORY ${pc_build})
foreach(pc moegen moegen-rt)
  run("pkg-config --modversion ${pc}" ${PKG_CONFIG} --modversion ${pc})
  expect("pkg-config --modversion ${pc}" "${run_output}" "^${VERSION}\n$")
  run("pkg-config ${pc}" ${PKG_CONFIG} --cflags --static --libs ${pc})
  string(STRIP "${run_output}" flags)
  message(STATUS "pkg-config --cflags --static --libs ${pc}: ${flags}")
  separate_arguments(flags_${pc} UNIX_COMMAND "${flags}")
endforeach()
if(flags_moegen-rt MATCHES "lua|jansson|moegen_gen")
  message(FATAL_ERROR "moegen-rt (the AOT path) links the generator's dependencies: ${flags_moegen-rt}")
endif()
run("moegen (installed) for the pkg-config AOT program" ${prefix}/${BINDIR}/moegen
  ${consumer}/consumer_moe.lua --set topk=4 --name consumer_moe --out ${pc_build}/gen --arch sm_80
  --compile jit)
run("cc aot_app (pkg-config moegen-rt)" ${C_COMPILER} -std=c11 -o ${pc_build}/aot_app
  ${consumer}/aot.c ${pc_build}/gen/consumer_moe.c -I${pc_build}/gen ${flags_moegen-rt})
run("cc jit_app (pkg-config moegen)" ${C_COMPILER} -std=c11 -o ${pc_build}/jit_app
  ${consumer}/jit.c ${flags_moegen})
run("aot_app (pkg-config)" ${pc_build}/aot_app)
message(STATUS "${run_output}")
run("jit_app (pkg-config)" ${pc_build}/jit_app)
message(STATUS "${run_output}")
