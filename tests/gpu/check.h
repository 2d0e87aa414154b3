/* tests/gpu/check.h -- a GPU test's failure counter, its CHECK, and module
 * set-up. Include once per test program, after gpu.h. */
#ifndef MOEGEN_TESTS_CHECK_H
#define MOEGEN_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

#include "gpu.h"
#include "moegen/moegen.h"

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
 * prints "FAIL what: ...", counts it, destroys the module and returns NULL. */
static inline moegen_module *test_module(moegen_status st, moegen_module **m,
                                         const moegen_error *err, unsigned units,
                                         const char *what) {
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

/* The arch a test's JIT modules are rendered for: NULL (the device's own,
 * sm_90a on Hopper) or, with MOEGEN_TEST_PORTABLE=1 in the environment,
 * "sm_XY" of device 0 without the 'a' ("sm_90" on Hopper), whose grouped
 * GEMM is the portable mma.sync one (gemm.portable = 1). */
static inline const char *test_arch(void) {
  static char arch[16];
  const char *e = getenv("MOEGEN_TEST_PORTABLE");
  if (!e || strcmp(e, "1") != 0) return NULL;
  if (!arch[0]) {
    CUdevice d;
    int major = 0, minor = 0;
    CU(gpu_drv->cuDeviceGet(&d, 0));
    CU(gpu_drv->cuDeviceGetAttribute(&major, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
    CU(gpu_drv->cuDeviceGetAttribute(&minor, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    printf("modules for %s (MOEGEN_TEST_PORTABLE=1)\n", arch);
  }
  return arch;
}

/* JITs config c for test_arch() and loads `units`, as test_module. With
 * MOEGEN_TEST_PORTABLE=1 a module whose GEMM is not the portable one is a
 * failure (the test would not test what it says). */
static inline moegen_module *test_jit(const moegen_config *c, unsigned units, const char *what) {
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_status st = moegen_jit(c, test_arch(), &m, &err);
  if (st == MOEGEN_OK && test_arch() && (moegen_module_image(m)->units >> MOEGEN_UNIT_GEMM & 1u) &&
      !moegen_module_image(m)->gemm.portable) {
    printf("FAIL %s: MOEGEN_TEST_PORTABLE=1 but the module's GEMM is not portable\n", what);
    failures++;
  }
  return test_module(st, &m, &err, units, what);
}

#endif
