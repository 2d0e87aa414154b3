/* tests/unit/runtime_check.h -- tiny assertion helpers for the runtime tests. */
#ifndef MOEGEN_TEST_RUNTIME_CHECK_H
#define MOEGEN_TEST_RUNTIME_CHECK_H

#include <stdio.h>
#include <time.h>

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

#endif
