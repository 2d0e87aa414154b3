/* GPU test: grouped GEMM forward (gemm1 and gemm2) against the CPU reference
 * (tests/ref/gemm_ref.c): experts with 0, 1, 127 and more rows, E = 1, E not
 * a power of two, N and K not multiples of the tile, model-shaped N and K,
 * more tiles than SMs, counts and offsets, rows past the experts left
 * untouched, and a captured graph replayed with changed counts.
 * SPEC.md 6: elementwise |y - ref| <= 1e-5 + 1.6e-2 |ref| (ref fp32-
 * accumulated from the same bf16 inputs, exact for these inputs), relative
 * Frobenius error < 1e-2, and max |y - ref| / max |ref| < 1e-2. NaN fails.
 * Exit 77 (skipped) without a device. */
#include <math.h>

#include "gemm_ref.h"
#include "gemm_test.h"
#include "gemm_tiles.h"
#include "gpu.h"
#include "half.h"
#include "moegen/moegen.h"

static int tall_runs;   /* case_counts runs that took the tall-tile kernels */
static int hopper_runs; /* case_counts runs on sm_90a kernels (which have tall tiles) */
#define EXTRA_ROWS 37 /* rows of x and y past the experts' (must stay untouched) */

typedef struct problem {
  int E, N, K, max_rows;
  int32_t *counts;      /* [E] host */
  float *x, *w, *ref;   /* [max_rows, K], [E, N, K], [max_rows, N] fp32 (bf16 values) */
  void *dx, *dw, *dy;   /* device bf16 */
  int32_t *dcounts, *doffsets; /* device [E], [E + 1] */
  void *dws;                    /* device workspace, MOEGEN_GEMM_WORKSPACE_BYTES (the tile ticket) */
} problem;

/* Uploads counts (and their offsets) and recomputes the reference. */
static void set_counts(problem *p, const int32_t *counts) {
  memcpy(p->counts, counts, 4 * (size_t)p->E);
  put_counts(p->dcounts, p->doffsets, counts, p->E);
  gemm_ref_fwd(p->E, p->N, p->K, p->counts, p->x, p->w, p->ref);
}

/* max_rows: the rows of x and y, at least the counts' sum. */
static problem make_problem(int E, int N, int K, const int32_t *counts, int max_rows) {
  problem p = {.E = E, .N = N, .K = K, .max_rows = max_rows};
  size_t xs = (size_t)p.max_rows * K, ws = (size_t)E * N * K, ys = (size_t)p.max_rows * N;
  p.counts = malloc(4 * (size_t)E);
  p.x = malloc(4 * xs);
  p.w = malloc(4 * ws);
  p.ref = malloc(4 * ys);
  p.dx = gpu_alloc(2 * xs);
  p.dw = gpu_alloc(2 * ws);
  p.dy = gpu_alloc(2 * ys);
  p.dcounts = gpu_alloc(4 * (size_t)E);
  p.doffsets = gpu_alloc(4 * (size_t)E + 4);
  p.dws = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES);
  fill(p.x, p.dx, xs, 1.0f / 4);
  fill(p.w, p.dw, ws, 1.0f / 16);
  set_counts(&p, counts);
  return p;
}

static void free_problem(problem *p) {
  free(p->counts); free(p->x); free(p->w); free(p->ref);
  gpu_free(p->dx); gpu_free(p->dw); gpu_free(p->dy); gpu_free(p->dcounts); gpu_free(p->doffsets);
  gpu_free(p->dws);
}

/* Compares y with the reference; rows past the experts must still hold the
 * 0xFFFF poison. */
static void verify(const problem *p, const char *what) {
  size_t ys = (size_t)p->max_rows * p->N;
  uint16_t *got = malloc(2 * ys);
  gpu_get(got, p->dy, 2 * ys);
  size_t rows = (size_t)sum_of(p->counts, p->E), bad = 0, first = 0;
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  for (size_t i = 0; i < rows * p->N; i++) {
    double g = bf16_to_f32(got[i]), r = p->ref[i], d = fabs(g - r);
    if (isnan(g) || d > 1e-5 + 1.6e-2 * fabs(r)) {
      if (!bad++) first = i;
      continue;
    }
    err2 += d * d;
    ref2 += r * r;
    max_err = fmax(max_err, d);
    max_ref = fmax(max_ref, fabs(r));
  }
  size_t touched = 0;
  for (size_t i = rows * p->N; i < ys; i++) touched += got[i] != 0xffff;
  double frob = ref2 > 0 ? sqrt(err2 / ref2) : 0, rel_max = max_ref > 0 ? max_err / max_ref : 0;
  int ok = !bad && !touched && frob < 1e-2 && rel_max < 1e-2;
  printf("  %s %-44s E=%-4d N=%-5d K=%-5d rows=%-6zu frob %.2e max|d|/max|ref| %.2e\n",
         ok ? "ok  " : "FAIL", what, p->E, p->N, p->K, rows, frob, rel_max);
  if (bad)
    printf("       %zu elements out of tolerance, first y[%zu, %zu] = %.6g, want %.6g\n", bad,
           first / p->N, first % p->N, bf16_to_f32(got[first]), p->ref[first]);
  if (touched) printf("       %zu elements of rows past the experts were written\n", touched);
  failures += !ok;
  free(got);
}

static moegen_gemm_fwd_args args_of(const problem *p, moegen_gemm_id which, int offsets) {
  return (moegen_gemm_fwd_args){.which = which, .max_rows = p->max_rows, .x = p->dx, .w = p->dw,
                                .y = p->dy, .counts = offsets ? NULL : p->dcounts,
                                .offsets = offsets ? p->doffsets : NULL, .workspace = p->dws,
                                .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
}

/* One launch (counts or offsets) on the default stream, then verify. */
static void run_once(moegen_module *m, problem *p, moegen_gemm_id which, int offsets,
                     const char *what) {
  gpu_poison(p->dy, 2 * (size_t)p->max_rows * p->N);
  moegen_gemm_fwd_args a = args_of(p, which, offsets);
  moegen_status st = moegen_gemm_fwd(m, &a, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL %s: %s: %s\n", what, moegen_status_string(st), moegen_module_last_error(m));
    failures++;
    return;
  }
  CU(gpu_drv->cuCtxSynchronize());
  char label[96];
  snprintf(label, sizeof label, "%s gemm%d %s", what, (int)which, offsets ? "offsets" : "counts");
  verify(p, label);
}

/* Both GEMMs of an (E, H, F) module with the given counts (own[E]; in
 * small-shape mode each set of counts_of_set), via counts and offsets. */
static void case_counts(const char *what, int E, int H, int F, const int32_t *own) {
  moegen_module *m = module_of(E, H, F, 1u << MOEGEN_UNIT_GEMM);
  if (!m) return;
  const moegen_image *img = moegen_module_image(m);
  int32_t *counts = malloc(4 * (size_t)E);
  for (int set = 0; set < count_sets(); set++) {
    const int max_rows = counts_of_set(set, own, E, EXTRA_ROWS, counts);
    for (int g = 1; g <= 2; g++) {
      moegen_gemm_fwd_shape sh;
      if (moegen_gemm_fwd_shape_of(img, (moegen_gemm_id)g, 1, &sh) != MOEGEN_OK) {
        printf("  FAIL %s: shape_of\n", what);
        failures++;
        continue;
      }
      problem p = make_problem(E, (int)sh.w[1], (int)sh.w[2], counts, max_rows);
      const int tall = moegen_gemm_tall(img, p.max_rows);
      hopper_runs += !img->gemm.portable;
      char label[96];
      snprintf(label, sizeof label, "%s %s", what,
               img->gemm.portable ? "portable" : tall ? "tall" : "bm128");
      tall_runs += tall;
      run_once(m, &p, (moegen_gemm_id)g, 0, label);
      run_once(m, &p, (moegen_gemm_id)g, 1, label);
      free_problem(&p);
    }
  }
  free(counts);
  moegen_module_destroy(m);
}

/* Random counts in [0, max] with about a quarter of the experts empty. */
static void random_counts(int32_t *c, int E, int max) {
  for (int e = 0; e < E; e++) c[e] = rng_u64() % 4 == 0 ? 0 : (int32_t)(rng_u64() % (max + 1));
}

/* Capture one gemm2 (N = 512, K = 256) into a graph; replay it after
 * changing the counts on the device to each of own[0..2] (same sum, so the
 * same max_rows; in small-shape mode three spreads of the listed count
 * nearest that sum, with the same max_rows): the graph reads the new
 * counts, and its memset node re-arms the tile ticket on every replay
 * (what = the case's name). */
static void case_graph(const char *what, int E, const int32_t *const own[3]) {
  moegen_module *m = module_of(E, 512, 256, 1u << MOEGEN_UNIT_GEMM);
  if (!m) return;
  int32_t *sets[3];
  const int own_rows = sum_of(own[0], E), rows = gpu_token(own_rows);
  for (int i = 0; i < 3; i++) {
    sets[i] = malloc(4 * (size_t)E);
    if (gpu_small()) spread_rows(rows, E, sets[i]);
    else memcpy(sets[i], own[i], 4 * (size_t)E);
  }
  const int32_t *a = sets[0];
  problem p = make_problem(E, 512, 256, a, (rows > own_rows ? rows : own_rows) + EXTRA_ROWS);
  CUstream stream;
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
  moegen_gemm_fwd_args args = args_of(&p, MOEGEN_GEMM2, 0);
  CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  moegen_status st = moegen_gemm_fwd(m, &args, stream);
  CU(gpu_drv->cuStreamEndCapture(stream, &g));
  if (st != MOEGEN_OK) {
    printf("  FAIL graph: gemm_fwd under capture: %s\n", moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; rep++) {
      set_counts(&p, sets[rep]);
      gpu_poison(p.dy, 2 * (size_t)p.max_rows * p.N);
      gpu_replay(ge, stream);
      char label[96];
      snprintf(label, sizeof label, "%s: graph replay %d gemm2 counts", what, rep);
      verify(&p, label);
    }
    CU(gpu_drv->cuGraphExecDestroy(ge));
  }
  CU(gpu_drv->cuGraphDestroy(g));
  CU(gpu_drv->cuStreamDestroy(stream));
  free_problem(&p);
  for (int i = 0; i < 3; i++) free(sets[i]);
  moegen_module_destroy(m);
}

/* Argument checks that need a module but no launch. */
static void case_args(void) {
  moegen_module *m = module_of(4, 512, 256, 1u << MOEGEN_UNIT_GEMM);
  if (!m) return;
  int32_t *dc = gpu_alloc(16);
  void *buf = gpu_alloc(1 << 16);
  moegen_gemm_fwd_args a = {.which = MOEGEN_GEMM1, .max_rows = 8, .x = buf, .w = buf, .y = buf};
  int bad = moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no counts */
  a.counts = dc;
  a.offsets = dc;
  bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* both */
  a.offsets = NULL;
  a.which = (moegen_gemm_id)3;
  bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  a.which = MOEGEN_GEMM2;
  a.x = (char *)buf + 2;
  bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* misaligned */
  a.x = buf;
  moegen_gemm_fwd_shape sh;
  bad += moegen_gemm_fwd_shape_of(moegen_module_image(m), MOEGEN_GEMM2, 8, &sh) != MOEGEN_OK;
  if (sh.workspace_bytes) { /* sm_90a: the tile ticket is required */
    bad += sh.workspace_bytes != MOEGEN_GEMM_WORKSPACE_BYTES;
    bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no workspace */
    a.workspace = (char *)buf + 8;
    a.workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES;
    bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* misaligned */
    a.workspace = buf;
    a.workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES - 1;
    bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* too small */
  }
  a.max_rows = 0;
  bad += moegen_gemm_fwd(m, &a, NULL) != MOEGEN_OK; /* no-op */
  for (moegen_gemm_id g = MOEGEN_GEMM1; g <= MOEGEN_GEMM2; g++) /* no rows, every pointer NULL */
    bad += moegen_gemm_fwd(m, &(moegen_gemm_fwd_args){.which = g}, NULL) != MOEGEN_OK;
  printf("  %s argument checks\n", bad ? "FAIL" : "ok  ");
  failures += bad != 0;
  gpu_free(dc);
  gpu_free(buf);
  moegen_module_destroy(m);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  const int32_t c4[4] = {0, 1, 127, 300}, c4b[4] = {300, 0, 1, 129}, c1[1] = {257};
  case_counts("E=4 {0,1,127,300}", 4, 512, 256, c4);
  case_counts("E=4 N,K not tile multiples", 4, 520, 200, c4b);
  case_counts("E=1", 1, 256, 384, c1);
  int32_t c130[130], c8[8];
  random_counts(c130, 130, 40);
  case_counts("E=130 random counts", 130, 256, 128, c130);
  for (int e = 0; e < 8; e++) c8[e] = 250 + (int32_t)(rng_u64() % 140);
  case_counts("E=8 more tiles than SMs", 8, 1024, 1024, c8);
  /* Tall tiles (max_rows >= tall_rows_per_expert * E, see case_counts'
   * lines; max_rows >= 512 * E): an empty expert, 511 rows (a second tile
   * of 255: the second consumer's second m64 half partly past the end),
   * 1025 rows (a fifth tile of one row: one A box loaded, run narrow with
   * the second consumer idle), 640 rows (a third tile of exactly 128: narrow,
   * 64 rows a consumer), 612 rows (a third tile of 100: narrow, the second
   * consumer's 64 rows partly past the end), N and K not tile multiples. */
  const int32_t ct[5] = {1025, 0, 511, 640, 612};
  case_counts("E=5 tall tiles, N,K not tile multiples", 5, 520, 200, ct);
  const int32_t cg[3] = {5, 0, 70}, cd[2] = {3, 70};
  if (!gpu_skip_heavy("gpt-oss shapes (E=3)")) case_counts("gpt-oss shapes (E=3)", 3, 2880, 2880, cg);
  if (!gpu_skip_heavy("deepseek-v3 shapes (E=2)"))
    case_counts("deepseek-v3 shapes (E=2)", 2, 7168, 2048, cd);
  const int32_t ga[4] = {0, 1, 127, 300}, gb[4] = {300, 127, 0, 1}, gc[4] = {128, 0, 64, 200};
  const int32_t *const small[3] = {ga, gb, gc};
  case_graph("E=4", 4, small);
  /* 11584 rows in each set: tall tiles (256 x 128), 48 row tiles x 4
   * column tiles = 192 tiles, more tiles than CTAs on a 132-SM GPU. */
  int32_t la[8], lb[8], lc[8];
  for (int e = 0; e < 8; e++) la[e] = lb[7 - e] = 1000 + 128 * e, lc[e] = 1448;
  const int32_t *const large[3] = {la, lb, lc};
  case_graph("E=8, more tiles than CTAs", 8, large);
  case_args();
  if (hopper_runs && !tall_runs) {
    printf("  FAIL no case took the tall-tile kernels\n");
    failures++;
  }
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
