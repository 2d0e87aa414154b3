/* tests/unit/test_jit_warm.c -- moegen_jit_warm without a GPU or a driver:
 * the first call compiles every unit of the config into the cache (one
 * entry each), the second compiles nothing, and moegen_jit's image of the
 * same config hits every entry; a corrupt entry is rebuilt and stored; no
 * arch, a disabled or missing cache directory, one that cannot store, and
 * an invalid config are errors that name the cause. Uses its own temporary
 * cache directory. Exit 77 only when libnvrtc.so.13 cannot be loaded. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "moegen/moegen.h"
#include "runtime_check.h"
#include "shared.h"

/* The first cache entry (*.cubin) in dir, open for update; NULL if none. */
static FILE *first_entry(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return NULL;
  FILE *f = NULL;
  for (struct dirent *e; !f && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len > 6 && strcmp(e->d_name + len - 6, ".cubin") == 0) {
      char path[4400];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      f = fopen(path, "r+b");
    }
  }
  closedir(d);
  return f;
}

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

/* Every unit of moegen_jit's image of c hits the cache (the runtime's own
 * compile path; without a driver moegen_jit still returns the module). */
static void jit_hits(const moegen_config *c) {
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_jit(c, "sm_80", &m, &err);
  const moegen_image *img = moegen_module_image(m);
  CHECK(img != NULL, "moegen_jit gave no image: %s", err.msg);
  for (int u = 0; img && u < MOEGEN_UNIT_COUNT; u++) {
    unsigned char *cubin;
    size_t size;
    char *log;
    moegen_cache_outcome outcome = MOEGEN_CACHE_UNSTORED;
    moegen_status st = moegen_unit_compile(img->source, img->source_size, img->name, img->arch,
                                           (moegen_unit)u, &cubin, &size, &log, &outcome);
    CHECK(st == MOEGEN_OK && outcome == MOEGEN_CACHE_HIT, "moegen_jit's %s unit: %s, outcome %d",
          moegen_unit_name((moegen_unit)u), moegen_status_string(st), (int)outcome);
    free(cubin);
    free(log);
  }
  moegen_module_destroy(m);
}

/* Damages two bytes in the middle of the first entry: warming rebuilds it. */
static void corrupt_entry(const char *dir, const moegen_config *c) {
  FILE *f = first_entry(dir);
  CHECK(f != NULL, "no entry to corrupt in %s", dir);
  if (!f) return;
  fseek(f, 200, SEEK_SET);
  fputs("XY", f);
  fclose(f);
  moegen_error err = {0};
  int compiled = -1;
  moegen_status st = moegen_jit_warm(c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_OK && compiled == 1, "corrupt entry: %s, %d compiled: %s",
        moegen_status_string(st), compiled, err.msg);
}

/* Counts the lines the runtime logs. */
static void count_line(const char *line, void *user) {
  (void)line;
  ++*(int *)user;
}

/* The errors: no arch, a cache directory that is a file (one compile and
 * one progress line before the error, not a second compile), MOEGEN_CACHE=0,
 * no directory at all, an invalid config. dir: the test's cache. */
static void errors(const char *dir, moegen_config c) {
  moegen_error err = {0};
  int compiled = -1;
  moegen_status st = moegen_jit_warm(&c, NULL, &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "arch"), "no arch: %s", err.msg);

  char file[4200];
  snprintf(file, sizeof file, "%s/not-a-dir", dir);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  setenv("MOEGEN_CACHE_DIR", file, 1);
  int lines = 0;
  moegen_set_log(count_line, &lines);
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  moegen_set_log(NULL, NULL);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && err.code == EX_CANTCREAT && strstr(err.msg, "not stored"),
        "unusable directory: %s: %s", moegen_status_string(st), err.msg);
  CHECK(lines == 1 && compiled == 0, "unusable directory: %d progress lines (want 1), %d compiled",
        lines, compiled);

  setenv("MOEGEN_CACHE", "0", 1);
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "MOEGEN_CACHE=0"), "disabled: %s", err.msg);
  unsetenv("MOEGEN_CACHE");

  char home[4096] = "", xdg[4096] = "";
  const char *h = getenv("HOME"), *x = getenv("XDG_CACHE_HOME");
  if (h) snprintf(home, sizeof home, "%s", h);
  if (x) snprintf(xdg, sizeof xdg, "%s", x);
  unsetenv("MOEGEN_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "no cache directory"), "no directory: %s",
        err.msg);
  if (h) setenv("HOME", home, 1);
  if (x) setenv("XDG_CACHE_HOME", xdg, 1);
  setenv("MOEGEN_CACHE_DIR", dir, 1);

  c.topk = 7; /* K > E */
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && strstr(err.msg, "topk") && compiled == 0,
        "K > E: %s: %s", moegen_status_string(st), err.msg);
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
  jit_hits(&c);
  corrupt_entry(root, &c);
  errors(root, c);
  return check_result_in("test_jit_warm", root);
}
