/* tests/gpu/check.h -- a GPU test's failure counter, its CHECK, and module
 * set-up. Include once per test program, after gpu.h. */
#ifndef MOEGEN_TESTS_CHECK_H
#define MOEGEN_TESTS_CHECK_H

#include <stdio.h>

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

/* JITs config c for the current device and loads `units`, as test_module. */
static inline moegen_module *test_jit(const moegen_config *c, unsigned units, const char *what) {
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_status st = moegen_jit(c, NULL, &m, &err);
  return test_module(st, &m, &err, units, what);
}

#endif
