/* tests/unit/test_jit_warm.c -- moegen_jit_warm without a GPU or a driver:
 * the first call compiles every kernel of the config into the cache (one
 * entry each), the second compiles nothing, and moegen_jit's image of the
 * same config hits every entry; a corrupt entry is rebuilt and stored; no
 * arch, a disabled or missing cache directory, one that cannot store, and
 * an invalid config are errors that name the cause. Uses its own temporary
 * cache directory. Exit 77 only when libnvrtc.so.13 cannot be loaded. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "module.h"
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

/* The image's kernels as compile jobs (moegen_has_kernel's), the slowest
 * (last in moegen/abi.def) first, as the module orders them; their count. */
static size_t kernel_jobs(const moegen_image *img, moegen_kernel_job jobs[MOEGEN_KERNEL_COUNT]) {
  size_t n = 0;
  for (int id = MOEGEN_KERNEL_COUNT - 1; id >= 0; id--)
    if (moegen_has_kernel(img, (moegen_kernel_id)id))
      jobs[n++] = (moegen_kernel_job){.kernel = id, .unit = moegen_kernels[id].unit,
                                      .kernel_name = moegen_kernels[id].name};
  return n;
}

/* Kernels of moegen_jit's image of c (without a driver moegen_jit still
 * returns the module); with `hits`, also checks that each one's compile, the
 * runtime's own path, hits the cache. */
static int jit_kernels(const moegen_config *c, int hits) {
  moegen_module *m = NULL;
  moegen_error err = {0};
  moegen_jit(c, "sm_80", &m, &err);
  const moegen_image *img = moegen_module_image(m);
  CHECK(img != NULL, "moegen_jit gave no image: %s", err.msg);
  if (!img) return 0;
  moegen_kernel_job jobs[MOEGEN_KERNEL_COUNT];
  size_t n = kernel_jobs(img, jobs);
  if (hits) {
    moegen_jit_source src;
    moegen_jit_source_init(&src, img->name, img->arch, img->source, img->source_size);
    moegen_status st = moegen_kernel_jobs_run(&src, jobs, n);
    CHECK(st == MOEGEN_OK, "moegen_jit's kernels: %s", moegen_status_string(st));
    for (size_t i = 0; i < n; i++) {
      CHECK(jobs[i].st == MOEGEN_OK && jobs[i].outcome == MOEGEN_CACHE_HIT,
            "moegen_jit's %s: %s, outcome %d", jobs[i].kernel_name,
            moegen_status_string(jobs[i].st), (int)jobs[i].outcome);
      free(jobs[i].cubin);
      free(jobs[i].log);
    }
  }
  moegen_module_destroy(m);
  return (int)n;
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

/* The errors: no arch, a cache directory that is a file (one progress
 * line a unit, then the error), MOEGEN_CACHE=0, no directory at all, an
 * invalid config. dir: the test's cache; units: the config's. */
static void errors(const char *dir, moegen_config c, int units) {
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
  CHECK(lines == units && compiled == 0,
        "unusable directory: %d progress lines (want %d), %d compiled", lines, units, compiled);

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

  /* A small training config of every unit (fp8_tensorwise: the quant unit
   * too), odd sizes; sm_80: the portable GEMM. */
  moegen_config c;
  moegen_config_defaults(&c);
  c.experts = 6, c.topk = 2, c.hidden = 136, c.ffn = 72;
  c.recipe = MOEGEN_RECIPE_FP8_TENSORWISE;
  moegen_error err = {0};
  int compiled = -1;
  double t0 = now_seconds();
  moegen_status st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_OK, "cold warm: %s: %s", moegen_status_string(st), err.msg);
  int kernels = jit_kernels(&c, 0);
  CHECK(kernels > MOEGEN_UNIT_COUNT && compiled == kernels && count_entries(root) == compiled,
        "cold warm compiled %d kernels, %d entries; want %d", compiled, count_entries(root),
        kernels);
  printf("cold warm: %d kernels in %.2f s\n", compiled, now_seconds() - t0);
  t0 = now_seconds();
  st = moegen_jit_warm(&c, "sm_80", &compiled, &err);
  CHECK(st == MOEGEN_OK && compiled == 0 && count_entries(root) == kernels,
        "second warm: %s, %d compiled", moegen_status_string(st), compiled);
  printf("second warm: %.3f s\n", now_seconds() - t0);
  jit_kernels(&c, 1);
  corrupt_entry(root, &c);
  errors(root, c, MOEGEN_UNIT_COUNT);
  return check_result_in("test_jit_warm", root);
}
