# GPU tests: label gpu; each exits 77 (skipped) when no CUDA device is present.
moegen_add_test(test_router_gpu SOURCES gpu/test_router.c LABELS gpu)
set_tests_properties(test_router_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_router_bwd_gpu SOURCES gpu/test_router_bwd.c LABELS gpu)
set_tests_properties(test_router_bwd_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_aux_gpu SOURCES gpu/test_aux.c LABELS gpu)
set_tests_properties(test_aux_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_gemm_gpu SOURCES gpu/test_gemm.c LABELS gpu)
set_tests_properties(test_gemm_gpu PROPERTIES TIMEOUT 600)

# The AOT path as a build pipeline uses it: moegen generates ds3.{cu,h,c,json}
# with nvcc at build time; the test links ds3.c and runs its embedded cubin.
set(DS3_DIR ${CMAKE_CURRENT_BINARY_DIR}/aot)
add_custom_command(OUTPUT ${DS3_DIR}/ds3.c ${DS3_DIR}/ds3.h
  COMMAND moegen --preset deepseek-v3 --name ds3 --out ${DS3_DIR} --compile nvcc
  DEPENDS moegen COMMENT "moegen: generating ds3 (AOT, nvcc)")
moegen_add_test(test_router_aot_gpu SOURCES gpu/test_router.c ${DS3_DIR}/ds3.c LABELS gpu)
target_compile_definitions(test_router_aot_gpu PRIVATE MOEGEN_TEST_AOT=1)
target_include_directories(test_router_aot_gpu PRIVATE ${DS3_DIR})
