# Generation: golden source text, determinism, NVRTC compile of every preset
# (sm_90a and sm_80, no spills), cold compile and cache-hit times.
moegen_add_test(test_generate SOURCES unit/test_generate.c LABELS unit)
set_tests_properties(test_generate PROPERTIES TIMEOUT 900)
# The AOT image (NAME.c, compiled by the C compiler at test time) and the JIT
# image of every preset and arch agree field for field; planted differences
# are found.
moegen_add_test(test_image SOURCES unit/test_image.c LABELS unit LIBS ${CMAKE_DL_LIBS})
target_compile_definitions(test_image PRIVATE MOEGEN_SOURCE_DIR_DEFAULT="${CMAKE_SOURCE_DIR}")
# scaling in the type the kernels use: validation range, exact float
# literals, NVRTC compiles of the extreme values (router units).
moegen_add_test(test_scaling SOURCES unit/test_scaling.c LABELS unit)
