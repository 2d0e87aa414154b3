/* tests/install/consumer/check.h -- CHECK(cond, fmt, ...) for the consumer
 * programs: prints "PROGRAM: FAILED: message" and counts the failure;
 * checks_done() returns the exit status (0: all passed, 1: a failure). */
#ifndef CONSUMER_CHECK_H
#define CONSUMER_CHECK_H
#include <stdio.h>

static int check_failures;
#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "%s: FAILED: ", __FILE__);              \
      fprintf(stderr, __VA_ARGS__);                           \
      fputc('\n', stderr);                                    \
      check_failures++;                                       \
    }                                                         \
  } while (0)

static int checks_done(const char *what) {
  printf("%s: %s\n", what, check_failures ? "FAILED" : "ok");
  return check_failures ? 1 : 0;
}
#endif
