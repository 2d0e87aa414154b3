# tests/unit/runtime.cmake -- the runtime on the CPU (label unit): SHA-256,
# NVRTC, the JIT cache, and module creation without a driver.
moegen_add_test(test_runtime_sha256 SOURCES unit/test_runtime_sha256.c LABELS unit)
# Compiles a tiny kernel for sm_90a and sm_80 (exit 77 only without libnvrtc.so.13).
moegen_add_test(test_runtime_nvrtc SOURCES unit/test_runtime_nvrtc.c LABELS unit)
# Cold compile, hit, corruption, MOEGEN_CACHE=0, unusable directory; the compile lock
# (4 forked processes and 4 threads on one empty cache compile once; a killed or
# hung holder; an unopenable lock file); prints timings.
moegen_add_test(test_runtime_cache SOURCES unit/test_runtime_cache.c LABELS unit)
# One process per mode: the driver result is cached per process.
moegen_add_test(test_runtime_nodriver_missing SOURCES unit/test_runtime_nodriver.c
  LABELS unit ARGS missing)
moegen_add_test(test_runtime_nodriver_default SOURCES unit/test_runtime_nodriver.c
  LABELS unit ARGS default)
# moegen_jit_warm: the JIT cache filled without a GPU, then all hits; its errors.
moegen_add_test(test_jit_warm SOURCES unit/test_jit_warm.c LABELS unit)
# Expert parallelism's bookkeeping (runtime/ep_plan.h) in a CPU simulation of
# 2, 4 and 8 ranks against the one-rank pipeline and the layer reference.
moegen_add_test(test_ep_sim SOURCES unit/test_ep_sim.c LABELS unit)
# Expert parallelism without libnccl.so.2 (and without a driver): NOT_SUPPORTED naming it.
moegen_add_test(test_ep_nonccl SOURCES unit/test_ep_nonccl.c LABELS unit ARGS missing
  ENV MOEGEN_LIBNCCL=/nonexistent/libnccl.so.2 MOEGEN_LIBCUDA=/nonexistent/libcuda.so.1)
# The real lookup: NOT_SUPPORTED naming libnccl.so.2 where it is absent, else loaded.
add_test(NAME test_ep_nonccl_default COMMAND test_ep_nonccl default)
set_tests_properties(test_ep_nonccl_default PROPERTIES LABELS unit
  ENVIRONMENT "MOEGEN_LIBCUDA=/nonexistent/libcuda.so.1")
