/* tests/unit/runtime_check.h -- tiny assertion helpers for the runtime tests. */
#ifndef MOEGEN_TEST_RUNTIME_CHECK_H
#define MOEGEN_TEST_RUNTIME_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nvrtc.h"

static int check_failures;

/* Counts and reports a failed condition; the test continues. */
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fputc('\n', stderr);                                                 \
      check_failures++;                                                    \
    }                                                                      \
  } while (0)

/* Seconds on a monotonic clock. */
static inline double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Exit status of a test: 0 if every check held. */
static inline int check_result(const char *name) {
  if (check_failures) fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
  else printf("%s: ok\n", name);
  return check_failures ? 1 : 0;
}

/* 1 (after a "skipped" line) when libnvrtc.so.13 cannot be loaded: the
 * test then exits 77. */
static inline int nvrtc_missing(const char *name) {
  int major, minor;
  if (moegen_nvrtc_version(&major, &minor) == MOEGEN_OK) return 0;
  printf("%s: skipped, libnvrtc.so.13 cannot be loaded\n", name);
  return 1;
}

/* check_result for a test that worked in its own temporary directory dir:
 * removes dir when every check held (keeps it to look at otherwise). */
static inline int check_result_in(const char *name, const char *dir) {
  int rc = check_result(name);
  if (rc == 0) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
      fprintf(stderr, "%s: could not remove %s\n", name, dir);
      rc = 1;
    }
  }
  return rc;
}

#endif
