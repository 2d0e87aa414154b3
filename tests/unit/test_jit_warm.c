/* tests/unit/test_jit_warm.c -- moegen_jit_warm without a GPU or a driver:
 * the first call compiles every unit of the config into the cache (one
 * entry each), the second compiles nothing; no arch, a disabled cache and
 * an invalid config are errors that name the cause. Uses its own temporary
 * cache directory. Exit 77 only when libnvrtc.so.13 cannot be loaded. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "moegen/moegen.h"
#include "runtime_check.h"

/* Cache entries (*.cubin) in dir. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    n += len > 6 && strcmp(e->d_name + len - 6, ".cubin") == 0;
  }
  closedir(d);
  return n;
}

int main(void) {
  if (nvrtc_missing("test_jit_warm")) return 77;
  char root[] = "/tmp/moegen-warm-test-XXXXXX";
  if (!mkdtemp(root)) return 1;
  setenv("MOEGEN_CACHE_DIR", root, 1);
  unsetenv("MOEGEN_CACHE");
  moegen_set_log(NULL, NULL);

  /* A small training config (all five units), odd sizes; sm_80: the portable GEMM. */
  moegen_config c;
  moegen_config_defaults(&c);
  c.experts = 6, c.topk = 2, c.hidden = 136, c.ffn = 72;
  moegen_error err = {0};
  int compiled = -1;
  double t0 = now_seconds();
  moegen_status st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_OK, "cold warm: %s: %s", moegen_status_string(st), err.msg);
  CHECK(compiled == MOEGEN_UNIT_COUNT && count_entries(root) == compiled,
        "cold warm compiled %d units, %d entries; want %d", compiled, count_entries(root),
        MOEGEN_UNIT_COUNT);
  printf("cold warm: %d units in %.2f s\n", compiled, now_seconds() - t0);
  t0 = now_seconds();
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_OK && compiled == 0 && count_entries(root) == MOEGEN_UNIT_COUNT,
        "second warm: %s, %d compiled", moegen_status_string(st), compiled);
  printf("second warm: %.3f s\n", now_seconds() - t0);

  st = moegen_jit_warm(&c, NULL, &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "arch"), "no arch: %s", err.msg);
  setenv("MOEGEN_CACHE", "0", 1);
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "MOEGEN_CACHE=0"), "disabled: %s",
        err.msg);
  unsetenv("MOEGEN_CACHE");
  c.topk = 7; /* K > E */
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "topk") && compiled == 0,
        "K > E: %s: %s", moegen_status_string(st), err.msg);

  return check_result_in("test_jit_warm", root);
}
