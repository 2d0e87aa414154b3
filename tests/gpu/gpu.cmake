# GPU tests: label gpu; each exits 77 (skipped) when no CUDA device is present.
moegen_add_test(test_router_gpu SOURCES gpu/test_router.c LABELS gpu)
set_tests_properties(test_router_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_router_bwd_gpu SOURCES gpu/test_router_bwd.c LABELS gpu)
set_tests_properties(test_router_bwd_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_aux_gpu SOURCES gpu/test_aux.c LABELS gpu)
set_tests_properties(test_aux_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_gemm_gpu SOURCES gpu/test_gemm.c LABELS gpu)
set_tests_properties(test_gemm_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_gemm_fp8_gpu SOURCES gpu/test_gemm_fp8.c LABELS gpu)
set_tests_properties(test_gemm_fp8_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_gemm_bwd_gpu SOURCES gpu/test_gemm_bwd.c LABELS gpu)
set_tests_properties(test_gemm_bwd_gpu PROPERTIES TIMEOUT 900)
# The GEMMs at the models' real shapes against cuBLASLt (tests/gpu/cublaslt.h).
moegen_add_test(test_gemm_cublas_gpu SOURCES gpu/test_gemm_cublas.c LABELS gpu LIBS moegen_cublaslt)
set_tests_properties(test_gemm_cublas_gpu PROPERTIES TIMEOUT 900)
# The same GEMM and layer tests on the portable mma.sync GEMM (modules for
# the device's arch without the 'a': sm_90 on Hopper; tests/gpu/check.h).
# Built so (MOEGEN_TEST_PORTABLE_BUILD): the binary run directly, as
# bench/gpu_tests.sh and bench/sanitize.sh do, tests the portable GEMM too.
foreach(t gemm gemm_bwd layer gemm_cublas)
  moegen_add_test(test_${t}_portable_gpu SOURCES gpu/test_${t}.c LABELS gpu ENV MOEGEN_TEST_PORTABLE=1
    LIBS moegen_cublaslt)
  target_compile_definitions(test_${t}_portable_gpu PRIVATE MOEGEN_TEST_PORTABLE_BUILD=1)
  set_tests_properties(test_${t}_portable_gpu PROPERTIES TIMEOUT 900)
endforeach()
# The FP8 quantize ops (recipes fp8_block, fp8_tensorwise), also rendered
# for the device's arch without the 'a' (test_quant_portable_gpu).
moegen_add_test(test_quant_gpu SOURCES gpu/test_quant.c LABELS gpu)
moegen_add_test(test_quant_portable_gpu SOURCES gpu/test_quant.c LABELS gpu ENV MOEGEN_TEST_PORTABLE=1)
target_compile_definitions(test_quant_portable_gpu PRIVATE MOEGEN_TEST_PORTABLE_BUILD=1)
moegen_add_test(test_permute_gpu SOURCES gpu/test_permute.c LABELS gpu)
set_tests_properties(test_permute_gpu PROPERTIES TIMEOUT 600)
moegen_add_test(test_layer_gpu SOURCES gpu/test_layer.c LABELS gpu)
set_tests_properties(test_layer_gpu PROPERTIES TIMEOUT 600)
# Two host threads drive two modules on two streams through the layer
# forward and backward at once; bit-identical to a serial run.
moegen_add_test(test_concurrency_gpu SOURCES gpu/test_concurrency.c LABELS gpu LIBS Threads::Threads)
set_tests_properties(test_concurrency_gpu PROPERTIES TIMEOUT 600)

# The AOT path as a build pipeline uses it: moegen_generate (cmake/moegen.cmake)
# generates ds3.{cu,h,c,json} with nvcc at build time; the test links the
# library ds3 (ds3.c) and runs its embedded cubin.
moegen_generate(NAME ds3 PRESET deepseek-v3 COMPILE nvcc OUTPUT_DIR aot)
moegen_add_test(test_router_aot_gpu SOURCES gpu/test_router.c LABELS gpu LIBS ds3)
target_compile_definitions(test_router_aot_gpu PRIVATE MOEGEN_TEST_AOT=1)
# Expert parallelism through NCCL at R = 1 (one rank, one GPU) against the
# single-GPU layer, bit for bit; exit 77 also without libnccl.so.2.
moegen_add_test(test_ep_gpu SOURCES gpu/test_ep.c LABELS gpu LIBS ${CMAKE_DL_LIBS})
set_tests_properties(test_ep_gpu PROPERTIES TIMEOUT 600)
