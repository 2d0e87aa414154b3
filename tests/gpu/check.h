/* tests/gpu/check.h -- a GPU test's failure counter, its CHECK, and module
 * set-up. Include once per test program, after gpu.h. */
#ifndef MOEGEN_TESTS_CHECK_H
#define MOEGEN_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpu.h"
#include "moegen/moegen.h"
#include "module.h" /* moegen_kernels, moegen_has_kernel */
#include "shared.h" /* moegen_current_arch, moegen_kernel_jobs_run */

static int failures; /* the test's exit status is 1 when this is not 0 */

/* Inside a void case function: count and print a failure, leave the case. */
#define CHECK(cond, ...)              \
  do {                                \
    if (!(cond)) {                    \
      printf("  FAIL: " __VA_ARGS__); \
      printf("\n");                   \
      failures++;                     \
      return;                         \
    }                                 \
  } while (0)

/* Finishes a module set-up: given the status of its creation (*m, err),
 * loads the compile units in `units` (a bit per moegen_unit). On failure
 * prints "FAIL what: ...", counts it, destroys the module and returns NULL.
 * In warm mode (gpu.h) destroys the module and returns NULL: no case runs. */
static inline moegen_module *test_module(moegen_status st, moegen_module **m,
                                         const moegen_error *err, unsigned units,
                                         const char *what) {
  if (gpu_warm()) { /* an AOT module: nothing to compile */
    moegen_module_destroy(*m);
    return *m = NULL;
  }
  for (int u = 0; st == MOEGEN_OK && u < MOEGEN_UNIT_COUNT; u++)
    if (units >> u & 1u) st = moegen_module_load_unit(*m, (moegen_unit)u);
  if (st == MOEGEN_OK) return *m;
  printf("FAIL %s: %s %s %s\n", what, moegen_status_string(st), err->msg,
         *m ? moegen_module_last_error(*m) : "");
  failures++;
  moegen_module_destroy(*m);
  *m = NULL;
  return NULL;
}

/* 1 if this test binary runs the portable GEMM: MOEGEN_TEST_PORTABLE=1 in
 * the environment, or built so (test_*_portable_gpu, tests/gpu/gpu.cmake,
 * so that running the binary directly tests what its name says). */
static inline int test_portable(void) {
#ifdef MOEGEN_TEST_PORTABLE_BUILD
  return 1;
#else
  const char *e = getenv("MOEGEN_TEST_PORTABLE");
  return e && strcmp(e, "1") == 0;
#endif
}

/* The arch a test's JIT modules are rendered for: NULL (the device's own,
 * sm_90a on Hopper) or, for a portable test (test_portable), "sm_XY" of
 * device 0 without the 'a' ("sm_90" on Hopper), whose grouped GEMM is the
 * portable mma.sync one (gemm.portable = 1). In warm mode for a named arch
 * (MOEGEN_TEST_WARM=sm_XY[a], no device) the portable arch is that one
 * without its 'a' or 'f'. */
static inline const char *test_arch(void) {
  static char arch[16];
  if (!test_portable()) return NULL;
  if (!arch[0] && gpu_warm_named_arch()) {
    snprintf(arch, sizeof arch, "%s", gpu_warm());
    size_t n = strlen(arch);
    if (n > 3 && (arch[n - 1] == 'a' || arch[n - 1] == 'f')) arch[n - 1] = 0;
  } else if (!arch[0]) {
    CUdevice d;
    int major = 0, minor = 0;
    CU(gpu_drv->cuDeviceGet(&d, 0));
    CU(gpu_drv->cuDeviceGetAttribute(&major, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
    CU(gpu_drv->cuDeviceGetAttribute(&minor, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    printf("modules for %s (portable GEMM test)\n", arch);
  }
  return arch;
}

/* Warm mode (gpu.h): compiles the kernels of the compile units in `units`
 * of config c (in parallel, as the module does),
 * rendered for the arch test_jit renders it for, into the JIT cache (the
 * units test_module would load; NVRTC only: without a driver moegen_jit
 * still returns the module and its image); a failed compile, or one the
 * cache cannot store, is a failure. MOEGEN_TEST_WARM_SHARD=I/N (0 <= I < N)
 * compiles only the I-th of every N modules the test would JIT, in the
 * order it would JIT them (the same in every run: in warm mode no case
 * runs), so that N processes warm one test's modules at once
 * (bench/sanitize.sh). */
static inline void test_warm(const moegen_config *c, unsigned units, const char *what) {
  static long ordinal; /* modules this test has asked for so far */
  const long i = ordinal++;
  long shard = 0, shards = 1;
  const char *e = getenv("MOEGEN_TEST_WARM_SHARD");
  if (e && *e && (sscanf(e, "%ld/%ld", &shard, &shards) != 2 || shards < 1 || shard < 0 ||
                  shard >= shards)) {
    printf("FAIL: MOEGEN_TEST_WARM_SHARD=%s: want I/N with 0 <= I < N\n", e);
    exit(1);
  }
  if (i % shards != shard || !units) return;
  char arch[16], why[512];
  if (test_arch()) snprintf(arch, sizeof arch, "%s", test_arch());
  else if (gpu_warm_named_arch()) snprintf(arch, sizeof arch, "%s", gpu_warm());
  else if (moegen_current_arch(arch, sizeof arch, why, sizeof why) != MOEGEN_OK) {
    printf("FAIL warm %s: %s\n", what, why);
    failures++;
    return;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_jit(c, arch, &m, &err);
  const moegen_image *img = moegen_module_image(m);
  int compiled = 0, ok = img != NULL;
  if (!img) snprintf(why, sizeof why, "moegen_jit: %s", err.msg);
  moegen_kernel_job jobs[MOEGEN_KERNEL_COUNT];
  size_t n = 0;
  for (int id = MOEGEN_KERNEL_COUNT - 1; ok && id >= 0; id--) /* the module's order */
    if ((units >> moegen_kernels[id].unit & 1u) && moegen_has_kernel(img, (moegen_kernel_id)id))
      jobs[n++] = (moegen_kernel_job){.kernel = id, .unit = moegen_kernels[id].unit,
                                      .kernel_name = moegen_kernels[id].name};
  if (ok) {
    moegen_jit_source src;
    moegen_jit_source_init(&src, img->name, img->arch, img->source, img->source_size);
    moegen_kernel_jobs_run(&src, jobs, n);
  }
  for (size_t k = 0; k < n; k++) {
    if (ok && (jobs[k].st != MOEGEN_OK || jobs[k].outcome == MOEGEN_CACHE_UNSTORED)) {
      ok = 0;
      snprintf(why, sizeof why, "%s (%s unit): %s%s%.400s", jobs[k].kernel_name,
               moegen_unit_name(jobs[k].unit), moegen_status_string(jobs[k].st),
               jobs[k].log ? ": " : "", jobs[k].log ? jobs[k].log : "");
    }
    compiled += jobs[k].st == MOEGEN_OK && jobs[k].outcome == MOEGEN_CACHE_STORED;
    free(jobs[k].cubin);
    free(jobs[k].log);
  }
  moegen_module_destroy(m);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%s warm %s for %s: %d kernels compiled (%.1f s)%s%s\n", ok ? "ok  " : "FAIL", what, arch,
         compiled, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
         ok ? "" : ": ", ok ? "" : why);
  failures += !ok;
}

/* JITs config c for test_arch() and loads `units`, as test_module. With a
 * portable test a module whose GEMM is not the portable one is a failure
 * (the test would not test what it says). In warm mode: test_warm of
 * `units`, and NULL (the caller skips the cases of this module). */
static inline moegen_module *test_jit(const moegen_config *c, unsigned units, const char *what) {
  if (gpu_warm()) {
    test_warm(c, units, what);
    return NULL;
  }
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_status st = moegen_jit(c, test_arch(), &m, &err);
  if (st == MOEGEN_OK && test_arch() && (moegen_module_image(m)->units >> MOEGEN_UNIT_GEMM & 1u) &&
      !moegen_module_image(m)->gemm.portable) {
    printf("FAIL %s: a portable GEMM test but the module's GEMM is not portable\n", what);
    failures++;
  }
  return test_module(st, &m, &err, units, what);
}

#endif
