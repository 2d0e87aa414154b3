# CPU emulation of the generated router kernels (tests/emu): for each spec of
# tests/gpu/router_specs.h, emit_kernel renders its kernel source as host
# C++, and test_router_emu_N runs it on 32 host threads a warp against the
# CPU reference; test_gemm_decode runs the GEMMs' tile-space code the same
# way. Needs a C++20 compiler (std::barrier); skipped without one.
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  add_executable(moegen_emit_kernel emu/emit_kernel.c)
  target_include_directories(moegen_emit_kernel PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu)
  target_link_libraries(moegen_emit_kernel PRIVATE moegen_gen)
  file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/router_specs.h spec_lines REGEX "^    {\"")
  list(LENGTH spec_lines nspecs)
  math(EXPR last "${nspecs} - 1")
  foreach(i RANGE ${last})
    set(inc ${CMAKE_CURRENT_BINARY_DIR}/emu/router_${i}.inc)
    add_custom_command(OUTPUT ${inc}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/emu
      COMMAND moegen_emit_kernel ${inc} ${i}
      DEPENDS moegen_emit_kernel COMMENT "Emitting router spec ${i} for the warp emulation")
    add_executable(test_router_emu_${i} emu/test_router_emu.cpp ${inc})
    set_target_properties(test_router_emu_${i} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
    target_compile_definitions(test_router_emu_${i} PRIVATE MOEGEN_EMU_KERNEL="${inc}")
    target_compile_options(test_router_emu_${i} PRIVATE -O1 -Wno-unknown-pragmas -Wno-unused-function
      -Wno-maybe-uninitialized) # kernel text written for nvcc: g++ sees other flows
    target_include_directories(test_router_emu_${i} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/emu
      ${CMAKE_CURRENT_SOURCE_DIR}/gpu ${CMAKE_SOURCE_DIR}/tests/ref ${CMAKE_SOURCE_DIR}/include)
    target_link_libraries(test_router_emu_${i} PRIVATE moegen_gen moegen_ref Threads::Threads)
    add_test(NAME test_router_emu_${i} COMMAND test_router_emu_${i} ${i})
    set_tests_properties(test_router_emu_${i} PROPERTIES LABELS "unit;emu" TIMEOUT 300)
  endforeach()
  # The router backward of a few specs (emit_kernel.c's bwd_specs), both
  # router_bwd modes, one program.
  set(bwd_inc ${CMAKE_CURRENT_BINARY_DIR}/emu/router_bwd.inc)
  add_custom_command(OUTPUT ${bwd_inc}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/emu
    COMMAND moegen_emit_kernel ${bwd_inc} bwd
    DEPENDS moegen_emit_kernel COMMENT "Emitting the router backward kernels for the warp emulation")
  add_executable(test_router_bwd_emu emu/test_router_bwd_emu.cpp ${bwd_inc})
  set_target_properties(test_router_bwd_emu PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  target_compile_definitions(test_router_bwd_emu PRIVATE MOEGEN_EMU_BWD="${bwd_inc}")
  target_compile_options(test_router_bwd_emu PRIVATE -O1 -Wno-unknown-pragmas -Wno-unused-function
    -Wno-maybe-uninitialized)
  target_include_directories(test_router_bwd_emu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/emu
    ${CMAKE_CURRENT_SOURCE_DIR}/gpu ${CMAKE_SOURCE_DIR}/tests/ref ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(test_router_bwd_emu PRIVATE moegen_gen moegen_ref Threads::Threads)
  add_test(NAME test_router_bwd_emu COMMAND test_router_bwd_emu)
  set_tests_properties(test_router_bwd_emu PROPERTIES LABELS "unit;emu" TIMEOUT 300)
  # The GEMM tile space (tables, decode, column groups) on one emulated warp.
  moegen_add_test(test_gemm_decode SOURCES emu/test_gemm_decode.cpp LABELS unit emu)
  set_target_properties(test_gemm_decode PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  target_compile_options(test_gemm_decode PRIVATE -Wno-unknown-pragmas -Wno-uninitialized
    -Wno-maybe-uninitialized) # kernel text written for nvcc
  target_include_directories(test_gemm_decode PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/emu
    ${CMAKE_SOURCE_DIR}/templates ${CMAKE_SOURCE_DIR}/tests/ref)
  target_link_libraries(test_gemm_decode PRIVATE Threads::Threads)
else()
  message(STATUS "no C++ compiler: the router and GEMM warp-emulation tests are not built")
endif()
