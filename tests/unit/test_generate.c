/* Generation tests (CPU only; NVRTC needs no GPU):
 *  - every preset renders, deterministically;
 *  - the deepseek-v3 render equals the golden text in tests/golden/
 *    (MOEGEN_UPDATE_GOLDEN=1 rewrites it);
 *  - every compile unit of every preset compiles with NVRTC for sm_90a and
 *    sm_80 with no spills, and so does its router_train unit with
 *    router_bwd = recompute;
 *  - cold NVRTC compile and cache-hit load times of the router unit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "moegen/moegen.h"
#include "nvrtc.h"
#include "shared.h"

static int failures;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  s[fread(s, 1, (size_t)n, f)] = 0;
  fclose(f);
  return s;
}

/* Renders a preset for arch, with the override `set` (key=value) unless it is NULL. */
static int render_preset(const char *preset, const char *set, const char *arch,
                         moegen_sources *out) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "moegen --preset %s%s%s --name golden", preset, set ? " --set " : "",
           set ? set : "");
  moegen_gen_options opt = {.name = "golden", .arch = arch, .compile = MOEGEN_COMPILE_NVRTC,
                            .command_line = cmd};
  if (moegen_config_preset(&c, preset, &err) || (set && moegen_config_set(&c, set, 1, &err)) ||
      moegen_config_validate(&c, &err) || moegen_render(&c, &opt, out, &err)) {
    printf("FAIL %s: %s\n", preset, err.msg);
    failures++;
    return -1;
  }
  return 0;
}

/* Compares text with tests/golden/NAME (or rewrites it). */
static void golden(const char *name, const char *text) {
  char path[4096];
  const char *src = getenv("MOEGEN_SOURCE_DIR"); /* set by ctest */
  snprintf(path, sizeof path, "%s/tests/golden/%s", src ? src : ".", name);
  if (getenv("MOEGEN_UPDATE_GOLDEN")) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    printf("updated %s\n", path);
    return;
  }
  char *want = slurp(path);
  if (!want || strcmp(want, text) != 0) {
    printf("FAIL golden %s differs (MOEGEN_UPDATE_GOLDEN=1 ctest -R test_generate to accept)\n", path);
    failures++;
  }
  free(want);
}

/* A nonzero "N bytes spill" in a ptxas -v log. */
static int spills(const char *log) {
  for (const char *p = log; p && (p = strstr(p, "bytes spill")) != NULL; p++) {
    const char *q = p;
    while (q > log && q[-1] != ',' && q[-1] != '\n') q--;
    if (strtol(q, NULL, 10) != 0) return 1;
  }
  return 0;
}

/* NVRTC-compiles the units in `units` (a bit per moegen_unit) of a preset's
 * module (with the override `set`, or NULL) with ptxas -v: no spills. */
static void compile_preset(const char *preset, const char *set, const char *arch, unsigned units) {
  moegen_sources src;
  if (render_preset(preset, set, arch, &src)) return;
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++) {
    if (!((src.image.units & units) >> u & 1u)) continue;
    size_t n;
    char *text = moegen_unit_source(src.cu, strlen(src.cu), (moegen_unit)u, &n);
    unsigned char *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    double t0 = now_s();
    moegen_status st = moegen_nvrtc_compile(text, n, "golden.cu", arch, 1, &cubin, &size, &log);
    double dt = now_s() - t0;
    const char *unit = moegen_unit_name((moegen_unit)u);
    if (st != MOEGEN_OK) {
      printf("FAIL %s %s %s unit: %s\n%s\n", preset, arch, unit, moegen_status_string(st),
             log ? log : "");
      failures++;
    } else if (spills(log) || !strstr(log ? log : "", "spill")) {
      printf("FAIL %s %s %s unit: ptxas reports spills (or no ptxas report):\n%s\n", preset, arch,
             unit, log ? log : "");
      failures++;
    } else {
      printf("ok   %-16s %-7s %-7s unit: cubin %6zu bytes, NVRTC %.3f s%s%s\n", preset, arch, unit,
             size, dt, set ? ", " : "", set ? set : "");
    }
    free(cubin);
    free(log);
    free(text);
  }
  moegen_sources_free(&src);
}

/* Cold compile through the cache, then a hit. */
static void cache_times(void) {
  char dir[] = "/tmp/moegen-cache-test-XXXXXX";
  if (!mkdtemp(dir)) return;
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  moegen_set_log(NULL, NULL);
  moegen_sources src;
  if (render_preset("deepseek-v3", NULL, "sm_90a", &src)) return;
  size_t text_size;
  char *text = moegen_unit_source(src.cu, strlen(src.cu), MOEGEN_UNIT_ROUTER, &text_size);
  double t[2];
  moegen_cache_outcome how[2];
  for (int i = 0; i < 2; i++) {
    unsigned char *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    double t0 = now_s();
    moegen_status st = moegen_cache_compile(&(moegen_cache_source){.body = text, .body_size = text_size}, "golden", "sm_90a", NULL, &cubin, &size,
                                            &log, &how[i]);
    t[i] = now_s() - t0;
    if (st != MOEGEN_OK) {
      printf("FAIL cache compile: %s %s\n", moegen_status_string(st), log ? log : "");
      failures++;
    }
    free(cubin);
    free(log);
  }
  free(text);
  printf("router unit deepseek-v3 sm_90a: cold NVRTC compile %.3f s (outcome %d), cache hit %.2f ms "
         "(outcome %d)\n", t[0], (int)how[0], t[1] * 1e3, (int)how[1]);
  /* Generous bounds (CI machines vary); the targets are 1 s and 20 ms. */
  if (how[0] != MOEGEN_CACHE_STORED || how[1] != MOEGEN_CACHE_HIT || t[0] > 5.0 || t[1] > 0.2) {
    printf("FAIL cache timing/hit flags out of bounds\n");
    failures++;
  }
  moegen_sources_free(&src);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
}

/* Which grouped GEMM a preset's module gets per arch, as the image says it
 * (the runtime launches by these flags): sm_90a's TMA kernels with tall
 * tiles, the portable ones on any other arch from sm_80 on, none before. */
static void gemm_kinds(void) {
  static const struct {
    const char *arch;
    int supported, portable;
  } want[] = {{"sm_90a", 1, 0}, {"sm_90", 1, 1}, {"sm_80", 1, 1}, {"sm_86", 1, 1}, {"sm_75", 0, 0}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    moegen_sources src;
    if (render_preset("deepseek-v3", NULL, want[i].arch, &src)) continue;
    const moegen_gemm_plan *g = &src.image.gemm;
    /* The one kernel-absent rule: the unit holds kernels and the block size is not 0. */
    const int supported = (src.image.units >> MOEGEN_UNIT_GEMM & 1u) && g->gemm1.threads > 0;
    const int tall_ok = want[i].portable ? g->tall_rows_per_expert == 0 && g->gemm1_tall.threads == 0
                                         : !want[i].supported || g->tall_rows_per_expert > 0;
    if (supported != want[i].supported || g->portable != want[i].portable || !tall_ok) {
      printf("FAIL deepseek-v3 %s: gemm supported %d portable %d tall rows %d, want %d %d\n",
             want[i].arch, supported, g->portable, g->tall_rows_per_expert, want[i].supported,
             want[i].portable);
      failures++;
    }
    moegen_sources_free(&src);
  }
}

int main(void) {
  const char *const *presets = moegen_preset_names();
  gemm_kinds();
  for (int i = 0; presets[i]; i++) {
    moegen_sources a, b;
    if (render_preset(presets[i], NULL, "sm_90a", &a)) continue;
    if (render_preset(presets[i], NULL, "sm_90a", &b)) continue;
    if (strcmp(a.cu, b.cu) || strcmp(a.h, b.h) || strcmp(a.c, b.c)) {
      printf("FAIL %s: two renders differ\n", presets[i]);
      failures++;
    }
    if (!strcmp(presets[i], "deepseek-v3")) {
      golden("deepseek-v3.cu", a.cu);
      golden("deepseek-v3.h", a.h);
      golden("deepseek-v3.c", a.c);
    }
    moegen_sources_free(&a);
    moegen_sources_free(&b);
  }
  int major = 0, minor = 0;
  if (moegen_nvrtc_version(&major, &minor) != MOEGEN_OK) {
    printf("FAIL: NVRTC (libnvrtc.so.13) is not available; the toolkit is a build requirement\n");
    return 1;
  }
  printf("NVRTC %d.%d\n", major, minor);
  for (int i = 0; presets[i]; i++) {
    compile_preset(presets[i], NULL, "sm_90a", ~0u);
    compile_preset(presets[i], NULL, "sm_80", ~0u);
    compile_preset(presets[i], "router_bwd=recompute", "sm_90a", 1u << MOEGEN_UNIT_ROUTER_TRAIN);
    compile_preset(presets[i], "router_bwd=recompute", "sm_80", 1u << MOEGEN_UNIT_ROUTER_TRAIN);
  }
  cache_times();
  return failures ? 1 : 0;
}
