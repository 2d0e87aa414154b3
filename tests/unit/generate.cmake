# Generation: golden source text, determinism, NVRTC compile of every preset
# (sm_90a and sm_80, no spills), cold compile and cache-hit times.
moegen_add_test(test_generate SOURCES unit/test_generate.c LABELS unit)
set_tests_properties(test_generate PROPERTIES TIMEOUT 900)
