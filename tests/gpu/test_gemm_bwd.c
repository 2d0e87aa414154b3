/* GPU test: grouped GEMM dgrad, wgrad (bf16 out and fp32 accumulate, with
 * bias grad), gemm1 with the SwiGLU epilogue (bias, prob, pre-activation)
 * and gemm2's dgrad with the SwiGLU backward (dh, dprob) against the CPU references (tests/ref/gemm_bwd_ref.c): experts with 0, 1,
 * 127 and more rows, E = 1, E = 130 and 256, N and K not multiples of the
 * tile, the four models' H and F (few experts and rows), counts and
 * offsets, rows past the experts left untouched, max_rows = 0, and a captured
 * graph (dgrad + wgrad) replayed with changed counts.
 * SPEC.md 6: elementwise |y - ref| <= 1e-5 + 1.6e-2 |ref| (ref fp32-
 * accumulated from the same bf16 inputs, exact for these inputs except the
 * SiLU), relative Frobenius error < 1e-2. NaN fails. Exit 77 without a device. */
#include <math.h>

#include "gemm_bwd_ref.h"
#include "gemm_test.h"
#include "gemm_tiles.h"
#include "gpu.h"
#include "half.h"
#include "moegen/moegen.h"

static int tall_runs;   /* case_counts runs whose dgrad / glu / dglu took the tall kernels */
static int hopper_runs; /* case_counts runs on sm_90a kernels (which have tall tiles) */
#define EXTRA_ROWS 37 /* rows of the row-major buffers past the experts' */

typedef struct problem {
  int E, N, K, max_rows, rows;  /* N, K: the forward GEMM's; rows = sum of counts */
  int32_t *counts;              /* [E] host */
  float *x, *w, *dy;            /* [max_rows, K], [E, N, K], [max_rows, N] (bf16 values) */
  void *dx_, *dw_, *ddy;        /* device bf16 inputs */
  int32_t *dcounts, *doffsets;  /* device [E], [E + 1] */
  void *dws;                    /* device workspace, MOEGEN_GEMM_WORKSPACE_BYTES (the tile ticket) */
} problem;

static void set_counts(problem *p, const int32_t *counts) {
  memcpy(p->counts, counts, 4 * (size_t)p->E);
  p->rows = sum_of(counts, p->E);
  put_counts(p->dcounts, p->doffsets, counts, p->E);
}

/* max_rows_extra: rows of the buffers past the largest count sum used. */
static problem make_problem(int E, int N, int K, const int32_t *counts, int max_rows) {
  problem p = {.E = E, .N = N, .K = K, .max_rows = max_rows};
  size_t xs = (size_t)max_rows * K, ws = (size_t)E * N * K, ys = (size_t)max_rows * N;
  p.counts = malloc(4 * (size_t)E);
  p.x = malloc(4 * xs + 4);
  p.w = malloc(4 * ws);
  p.dy = malloc(4 * ys + 4);
  p.dx_ = gpu_alloc(2 * xs);
  p.dw_ = gpu_alloc(2 * ws);
  p.ddy = gpu_alloc(2 * ys);
  p.dcounts = gpu_alloc(4 * (size_t)E);
  p.doffsets = gpu_alloc(4 * (size_t)E + 4);
  p.dws = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES);
  fill(p.x, p.dx_, xs, 1.0f / 4);
  fill(p.w, p.dw_, ws, 1.0f / 16);
  fill(p.dy, p.ddy, ys, 1.0f / 4);
  set_counts(&p, counts);
  return p;
}

static void free_problem(problem *p) {
  free(p->counts); free(p->x); free(p->w); free(p->dy);
  gpu_free(p->dx_); gpu_free(p->dw_); gpu_free(p->ddy); gpu_free(p->dcounts); gpu_free(p->doffsets);
  gpu_free(p->dws);
}

/* Compares n values (bf16 if got16, else fp32 got32) with ref; elements
 * [n, n + untouched) of a bf16 buffer must still hold the 0xFFFF poison. */
static void verify(const char *what, const problem *p, const uint16_t *got16, const float *got32,
                   const float *ref, size_t n, size_t untouched) {
  size_t bad = 0, first = 0, touched = 0;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; i++) {
    double g = got16 ? bf16_to_f32(got16[i]) : got32[i], r = ref[i], d = fabs(g - r);
    if (isnan(g) || d > 1e-5 + 1.6e-2 * fabs(r)) {
      if (!bad++) first = i;
      continue;
    }
    err2 += d * d;
    ref2 += r * r;
  }
  for (size_t i = n; got16 && i < n + untouched; i++) touched += got16[i] != 0xffff;
  double frob = ref2 > 0 ? sqrt(err2 / ref2) : 0;
  int ok = !bad && !touched && frob < 1e-2;
  printf("  %s %-52s E=%-4d N=%-5d K=%-5d rows=%-6d frob %.2e\n", ok ? "ok  " : "FAIL", what, p->E,
         p->N, p->K, p->rows, frob);
  if (bad)
    printf("       %zu elements out of tolerance, first [%zu] = %.6g, want %.6g\n", bad, first,
           got16 ? bf16_to_f32(got16[first]) : got32[first], ref[first]);
  if (touched) printf("       %zu elements past the experts' rows were written\n", touched);
  failures += !ok;
}

static int check_status(moegen_module *m, moegen_status st, const char *what) {
  if (st == MOEGEN_OK) return 1;
  printf("  FAIL %s: %s: %s\n", what, moegen_status_string(st), moegen_module_last_error(m));
  failures++;
  return 0;
}

/* dgrad of GEMM `which` (its N, K are p's), counts or offsets. */
static void run_dgrad(moegen_module *m, problem *p, moegen_gemm_id which, int offsets,
                      const char *what) {
  size_t xs = (size_t)p->max_rows * p->K;
  void *dx = gpu_alloc(2 * xs);
  gpu_poison(dx, 2 * xs);
  moegen_gemm_dgrad_args a = {.which = which, .max_rows = p->max_rows, .dy = p->ddy, .w = p->dw_,
                              .dx = dx, .counts = offsets ? NULL : p->dcounts,
                              .offsets = offsets ? p->doffsets : NULL, .workspace = p->dws,
                              .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  if (check_status(m, moegen_gemm_dgrad(m, &a, NULL), what)) {
    CU(gpu_drv->cuCtxSynchronize());
    uint16_t *got = malloc(2 * xs);
    float *ref = malloc(4 * xs + 4);
    gpu_get(got, dx, 2 * xs);
    gemm_ref_dgrad(p->E, p->N, p->K, p->counts, p->dy, p->w, ref);
    char label[128];
    snprintf(label, sizeof label, "%s gemm%d dgrad %s", what, (int)which, offsets ? "offsets" : "counts");
    verify(label, p, got, NULL, ref, (size_t)p->rows * p->K, xs - (size_t)p->rows * p->K);
    free(got);
    free(ref);
  }
  gpu_free(dx);
}

/* wgrad (+ db) of GEMM `which`: bf16 out, or fp32 accumulate onto random
 * values (multiples of 1/64, so the sums stay exact). */
static void run_wgrad(moegen_module *m, problem *p, moegen_gemm_id which, int offsets,
                      int accumulate, int with_db, const char *what) {
  size_t ws = (size_t)p->E * p->N * p->K, bs = (size_t)p->E * p->N;
  void *dw = gpu_alloc(4 * ws);
  float *ddb = gpu_alloc(4 * bs);
  float *ref = malloc(4 * ws), *refb = malloc(4 * bs + 4);
  if (accumulate) {
    for (size_t i = 0; i < ws; i++) ref[i] = (float)((int)(rng_u64() % 129) - 64) / 64;
    for (size_t i = 0; i < bs; i++) refb[i] = (float)((int)(rng_u64() % 129) - 64) / 64;
    gpu_put(dw, ref, 4 * ws);
    gpu_put(ddb, refb, 4 * bs);
  } else {
    gpu_poison(dw, 4 * ws);
    gpu_poison(ddb, 4 * bs);
  }
  moegen_gemm_wgrad_args a = {.which = which, .max_rows = p->max_rows, .dy = p->ddy, .x = p->dx_,
                              .dw = dw, .db = with_db ? ddb : NULL, .accumulate = accumulate,
                              .counts = offsets ? NULL : p->dcounts,
                              .offsets = offsets ? p->doffsets : NULL};
  if (check_status(m, moegen_gemm_wgrad(m, &a, NULL), what)) {
    CU(gpu_drv->cuCtxSynchronize());
    gemm_ref_wgrad(p->E, p->N, p->K, p->counts, p->dy, p->x, ref, with_db ? refb : NULL, accumulate);
    char label[128];
    snprintf(label, sizeof label, "%s gemm%d wgrad %s%s %s", what, (int)which,
             accumulate ? "fp32 +=" : "bf16", with_db ? " +db" : "", offsets ? "offsets" : "counts");
    if (accumulate) {
      float *got = malloc(4 * ws);
      gpu_get(got, dw, 4 * ws);
      verify(label, p, NULL, got, ref, ws, 0);
      free(got);
    } else {
      uint16_t *got = malloc(2 * ws);
      gpu_get(got, dw, 2 * ws);
      verify(label, p, got, NULL, ref, ws, 0);
      free(got);
    }
    if (with_db) {
      float *got = malloc(4 * bs);
      gpu_get(got, ddb, 4 * bs);
      snprintf(label, sizeof label, "%s gemm%d wgrad db%s", what, (int)which, accumulate ? " +=" : "");
      verify(label, p, NULL, got, refb, bs, 0);
      free(got);
    }
  }
  free(ref);
  free(refb);
  gpu_free(dw);
  gpu_free(ddb);
}

/* gemm1 + SwiGLU (p is gemm1's: N = 2F, K = H), optionally with bias, prob, h. */
static void run_glu(moegen_module *m, problem *p, int offsets, int extras, const char *what) {
  const int F = p->N / 2;
  size_t hs = (size_t)p->max_rows * p->N, as = (size_t)p->max_rows * F, bsz = (size_t)p->E * p->N;
  void *dh = gpu_alloc(2 * hs), *dact = gpu_alloc(2 * as), *dbias = gpu_alloc(2 * bsz);
  float *dprob = gpu_alloc(4 * (size_t)p->max_rows);
  float *bias = malloc(4 * bsz), *prob = malloc(4 * (size_t)p->max_rows + 4);
  fill(bias, dbias, bsz, 1.0f / 16);
  for (int r = 0; r < p->max_rows; r++) prob[r] = (float)(1 + rng_u64() % 4) / 4;
  gpu_put(dprob, prob, 4 * (size_t)p->max_rows);
  gpu_poison(dh, 2 * hs);
  gpu_poison(dact, 2 * as);
  moegen_gemm_glu_args a = {.max_rows = p->max_rows, .x = p->dx_, .w = p->dw_,
                            .bias = extras ? dbias : NULL, .prob = extras ? dprob : NULL,
                            .act = dact, .h = extras ? dh : NULL,
                            .counts = offsets ? NULL : p->dcounts,
                            .offsets = offsets ? p->doffsets : NULL, .workspace = p->dws,
                            .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  if (check_status(m, moegen_gemm1_fwd_glu(m, &a, NULL), what)) {
    CU(gpu_drv->cuCtxSynchronize());
    float *rh = malloc(4 * hs + 4), *ract = malloc(4 * as + 4);
    gemm_ref_glu(p->E, F, p->K, p->counts, p->x, p->w, extras ? bias : NULL, extras ? prob : NULL,
                 rh, ract);
    uint16_t *got = malloc(2 * hs);
    char label[128];
    snprintf(label, sizeof label, "%s glu act%s %s", what, extras ? " (bias, prob)" : "",
             offsets ? "offsets" : "counts");
    gpu_get(got, dact, 2 * as);
    verify(label, p, got, NULL, ract, (size_t)p->rows * F, as - (size_t)p->rows * F);
    if (extras) {
      snprintf(label, sizeof label, "%s glu h (bias) %s", what, offsets ? "offsets" : "counts");
      gpu_get(got, dh, 2 * hs);
      verify(label, p, got, NULL, rh, (size_t)p->rows * p->N, hs - (size_t)p->rows * p->N);
    }
    free(got);
    free(rh);
    free(ract);
  }
  free(bias);
  free(prob);
  gpu_free(dh);
  gpu_free(dact);
  gpu_free(dbias);
  gpu_free(dprob);
}

/* gemm2 dgrad + SwiGLU backward (p is gemm2's: N = H, K = F), with or
 * without prob / dprob. h is random (scale 1/4, so |g| <= 1). dprob starts
 * at 0.5 (it accumulates) and is checked to 1e-4 of sum_f |terms| (fp32
 * atomics in any order, __expf) plus the usual relative bound. */
static void run_dglu(moegen_module *m, problem *p, int offsets, int with_prob, const char *what) {
  const int F = p->K;
  size_t hs = (size_t)p->max_rows * 2 * F;
  void *dh_in = gpu_alloc(2 * hs), *ddh = gpu_alloc(2 * hs);
  float *dprob = gpu_alloc(4 * (size_t)p->max_rows), *dprob_in = gpu_alloc(4 * (size_t)p->max_rows);
  float *h = malloc(4 * hs), *prob = malloc(4 * (size_t)p->max_rows + 4);
  fill(h, dh_in, hs, 1.0f / 4);
  for (int r = 0; r < p->max_rows; r++) prob[r] = (float)(1 + rng_u64() % 4) / 4;
  gpu_put(dprob_in, prob, 4 * (size_t)p->max_rows);
  float *half = malloc(4 * (size_t)p->max_rows + 4);
  for (int r = 0; r < p->max_rows; r++) half[r] = 0.5f;
  gpu_put(dprob, half, 4 * (size_t)p->max_rows);
  gpu_poison(ddh, 2 * hs);
  moegen_gemm_dglu_args a = {.max_rows = p->max_rows, .dy = p->ddy, .w = p->dw_, .h = dh_in,
                             .prob = with_prob ? dprob_in : NULL, .dh = ddh,
                             .dprob = with_prob ? dprob : NULL,
                             .counts = offsets ? NULL : p->dcounts,
                             .offsets = offsets ? p->doffsets : NULL, .workspace = p->dws,
                             .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  if (check_status(m, moegen_gemm2_dgrad_glu(m, &a, NULL), what)) {
    CU(gpu_drv->cuCtxSynchronize());
    float *rdh = malloc(4 * hs + 4);
    double *rdp = malloc(8 * (size_t)p->max_rows + 8), *rsc = malloc(8 * (size_t)p->max_rows + 8);
    gemm_ref_dglu(p->E, F, p->N, p->counts, p->dy, p->w, h, with_prob ? prob : NULL, rdh, rdp, rsc);
    uint16_t *got = malloc(2 * hs);
    gpu_get(got, ddh, 2 * hs);
    char label[128];
    snprintf(label, sizeof label, "%s dglu dh%s %s", what, with_prob ? " (prob)" : "",
             offsets ? "offsets" : "counts");
    verify(label, p, got, NULL, rdh, (size_t)p->rows * 2 * F, hs - (size_t)p->rows * 2 * F);
    if (with_prob) {
      float *gp = malloc(4 * (size_t)p->max_rows + 4);
      gpu_get(gp, dprob, 4 * (size_t)p->max_rows);
      int bad = 0;
      for (int r = 0; r < p->max_rows; r++) {
        double want = r < p->rows ? 0.5 + rdp[r] : 0.5, tol = r < p->rows ? 1e-4 * rsc[r] : 0;
        bad += !(fabs(gp[r] - want) <= 1e-5 + tol + 1.6e-2 * fabs(want));
      }
      printf("  %s %-52s E=%-4d rows=%d (%d bad)\n", bad ? "FAIL" : "ok  ", "  dglu dprob +=",
             p->E, p->rows, bad);
      failures += bad != 0;
      free(gp);
    }
    free(got);
    free(rdh);
    free(rdp);
    free(rsc);
  }
  free(h);
  free(prob);
  free(half);
  gpu_free(dh_in);
  gpu_free(ddh);
  gpu_free(dprob);
  gpu_free(dprob_in);
}

enum { DGRAD = 1, WGRAD = 2, GLU = 4, ALL = 7, QUICK = 8 /* one variant of each */ };

/* The ops in `ops` for both GEMMs of an (E, H, F) module with these counts
 * (own[E]; in small-shape mode each set of counts_of_set). */
static void case_counts(const char *what, int E, int H, int F, const int32_t *own, int ops) {
  moegen_module *m = module_of(E, H, F, 1u << MOEGEN_UNIT_GEMM | 1u << MOEGEN_UNIT_GEMM_TRAIN);
  if (!m) return;
  const moegen_image *img = moegen_module_image(m);
  int32_t *counts = malloc(4 * (size_t)E);
  for (int set = 0; set < count_sets(); set++) {
    const int max_rows = counts_of_set(set, own, E, EXTRA_ROWS, counts);
    for (int g = 1; g <= 2; g++) {
      moegen_gemm_bwd_shape sh;
      if (moegen_gemm_bwd_shape_of(img, (moegen_gemm_id)g, 1, &sh) != MOEGEN_OK) {
        printf("  FAIL %s: shape_of\n", what);
        failures++;
        continue;
      }
      problem p = make_problem(E, (int)sh.w[1], (int)sh.w[2], counts, max_rows);
      const int quick = ops & QUICK;
      hopper_runs += !img->gemm.portable;
      if (moegen_gemm_tall(img, p.max_rows)) { /* dgrad, glu, dglu: tall tiles */
        printf("  (%s gemm%d: the row-tiled ops take the tall kernels)\n", what, g);
        tall_runs++;
      }
      if (ops & DGRAD) {
        run_dgrad(m, &p, (moegen_gemm_id)g, 0, what);
        if (!quick) run_dgrad(m, &p, (moegen_gemm_id)g, 1, what);
      }
      if (ops & WGRAD) {
        run_wgrad(m, &p, (moegen_gemm_id)g, 0, 0, 1, what);
        if (!quick) {
          run_wgrad(m, &p, (moegen_gemm_id)g, 1, 1, 1, what);
          run_wgrad(m, &p, (moegen_gemm_id)g, 0, 0, 0, what);
        }
      }
      if ((ops & GLU) && g == 1) {
        run_glu(m, &p, 0, 1, what);
        if (!quick) run_glu(m, &p, 1, 0, what);
      }
      if ((ops & GLU) && g == 2) {
        run_dglu(m, &p, 0, 1, what);
        if (!quick) run_dglu(m, &p, 1, 0, what);
      }
      free_problem(&p);
    }
  }
  free(counts);
  moegen_module_destroy(m);
}

static void random_counts(int32_t *c, int E, int max) {
  for (int e = 0; e < E; e++) c[e] = rng_u64() % 4 == 0 ? 0 : (int32_t)(rng_u64() % (max + 1));
}

/* dgrad (gemm1) and wgrad (gemm2, fp32 += with db) captured in one graph,
 * replayed after changing the counts on the device (same max_rows). */
static void case_graph(void) {
  const int E = 4, H = 512, F = 256;
  moegen_module *m = module_of(E, H, F, 1u << MOEGEN_UNIT_GEMM | 1u << MOEGEN_UNIT_GEMM_TRAIN);
  if (!m) return;
  const int32_t own_a[4] = {0, 1, 127, 300}, own_b[4] = {300, 127, 0, 1}, own_c[4] = {128, 0, 64, 200};
  int32_t a[4], b[4], c[4]; /* small-shape mode: three spreads of the listed count nearest 428 */
  const int own_rows = 428, rows = gpu_token(own_rows);
  const int max_rows = (rows > own_rows ? rows : own_rows) + EXTRA_ROWS;
  if (gpu_small()) spread_rows(rows, E, a), spread_rows(rows, E, b), spread_rows(rows, E, c);
  else memcpy(a, own_a, sizeof a), memcpy(b, own_b, sizeof b), memcpy(c, own_c, sizeof c);
  problem p1 = make_problem(E, 2 * F, H, a, max_rows), p2 = make_problem(E, H, F, a, max_rows);
  size_t xs = (size_t)max_rows * H, ws = (size_t)E * H * F, bs = (size_t)E * H;
  void *dx = gpu_alloc(2 * xs), *dw = gpu_alloc(4 * ws);
  float *db = gpu_alloc(4 * bs);
  CUstream stream;
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
  moegen_gemm_dgrad_args da = {.which = MOEGEN_GEMM1, .max_rows = max_rows, .dy = p1.ddy,
                               .w = p1.dw_, .dx = dx, .counts = p1.dcounts, .workspace = p1.dws,
                               .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  moegen_gemm_wgrad_args wa = {.which = MOEGEN_GEMM2, .max_rows = max_rows, .dy = p2.ddy,
                               .x = p2.dx_, .dw = dw, .db = db, .accumulate = 1,
                               .counts = p2.dcounts};
  CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  moegen_status st = moegen_gemm_dgrad(m, &da, stream);
  moegen_status st2 = moegen_gemm_wgrad(m, &wa, stream);
  CU(gpu_drv->cuStreamEndCapture(stream, &g));
  if (st != MOEGEN_OK || st2 != MOEGEN_OK) {
    printf("  FAIL graph: ops under capture: %s\n", moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    const int32_t *sets[3] = {a, b, c};
    float *ref = malloc(4 * xs + 4), *refw = malloc(4 * ws), *refb = malloc(4 * bs);
    float *gotw = malloc(4 * ws), *gotb = malloc(4 * bs);
    uint16_t *got = malloc(2 * xs);
    for (int rep = 0; rep < 3; rep++) {
      set_counts(&p1, sets[rep]);
      set_counts(&p2, sets[rep]);
      for (size_t i = 0; i < ws; i++) refw[i] = (float)((int)(rng_u64() % 129) - 64) / 64;
      for (size_t i = 0; i < bs; i++) refb[i] = (float)((int)(rng_u64() % 129) - 64) / 64;
      gpu_put(dw, refw, 4 * ws);
      gpu_put(db, refb, 4 * bs);
      gpu_poison(dx, 2 * xs);
      gpu_replay(ge, stream);
      gemm_ref_dgrad(E, 2 * F, H, p1.counts, p1.dy, p1.w, ref);
      gemm_ref_wgrad(E, H, F, p2.counts, p2.dy, p2.x, refw, refb, 1);
      gpu_get(got, dx, 2 * xs);
      gpu_get(gotw, dw, 4 * ws);
      gpu_get(gotb, db, 4 * bs);
      char label[64];
      snprintf(label, sizeof label, "graph replay %d gemm1 dgrad", rep);
      verify(label, &p1, got, NULL, ref, (size_t)p1.rows * H, xs - (size_t)p1.rows * H);
      snprintf(label, sizeof label, "graph replay %d gemm2 wgrad fp32 +=", rep);
      verify(label, &p2, NULL, gotw, refw, ws, 0);
      snprintf(label, sizeof label, "graph replay %d gemm2 wgrad db +=", rep);
      verify(label, &p2, NULL, gotb, refb, bs, 0);
    }
    free(ref); free(refw); free(refb); free(gotw); free(gotb); free(got);
    CU(gpu_drv->cuGraphExecDestroy(ge));
  }
  CU(gpu_drv->cuGraphDestroy(g));
  CU(gpu_drv->cuStreamDestroy(stream));
  gpu_free(dx);
  gpu_free(dw);
  gpu_free(db);
  free_problem(&p1);
  free_problem(&p2);
  moegen_module_destroy(m);
}

/* Argument checks, no-ops, and wgrad with max_rows = 0 (every expert empty:
 * dw = 0, db = 0). */
static void case_args(void) {
  const int E = 4, H = 512, F = 256;
  moegen_module *m = module_of(E, H, F, 1u << MOEGEN_UNIT_GEMM | 1u << MOEGEN_UNIT_GEMM_TRAIN);
  if (!m) return;
  int32_t *dc = gpu_alloc(16);
  void *buf = gpu_alloc(1 << 16);
  moegen_gemm_dgrad_args d = {.which = MOEGEN_GEMM1, .max_rows = 8, .dy = buf, .w = buf, .dx = buf};
  int bad = moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no counts */
  d.counts = d.offsets = dc;
  bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* both */
  d.offsets = NULL;
  d.which = (moegen_gemm_id)3;
  bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  d.which = MOEGEN_GEMM2;
  d.dx = (char *)buf + 2;
  bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* misaligned */
  d.dx = buf;
  moegen_gemm_bwd_shape sh;
  bad += moegen_gemm_bwd_shape_of(moegen_module_image(m), MOEGEN_GEMM2, 8, &sh) != MOEGEN_OK;
  if (sh.workspace_bytes) { /* sm_90a: the tile ticket is required */
    bad += sh.workspace_bytes != MOEGEN_GEMM_WORKSPACE_BYTES;
    bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no workspace */
    d.workspace = buf;
    d.workspace_bytes = 4;
    bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* too small */
    d.workspace = (char *)buf + 8;
    d.workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES;
    bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* misaligned */
    d.workspace = NULL;
    d.workspace_bytes = 0;
    moegen_gemm_glu_args g = {.max_rows = 8, .x = buf, .w = buf, .act = buf, .counts = dc};
    bad += moegen_gemm1_fwd_glu(m, &g, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no workspace */
    moegen_gemm_dglu_args dg = {.max_rows = 8, .dy = buf, .w = buf, .h = buf, .dh = buf, .counts = dc};
    bad += moegen_gemm2_dgrad_glu(m, &dg, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* no workspace */
  }
  d.max_rows = 0;
  bad += moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_OK; /* no-op */
  for (moegen_gemm_id g = MOEGEN_GEMM1; g <= MOEGEN_GEMM2; g++) { /* no rows, NULL pointers */
    bad += moegen_gemm_dgrad(m, &(moegen_gemm_dgrad_args){.which = g}, NULL) != MOEGEN_OK;
    bad += moegen_gemm_wgrad(m, &(moegen_gemm_wgrad_args){.which = g, .accumulate = 1}, NULL) !=
           MOEGEN_OK;
    bad += moegen_gemm_wgrad(m, &(moegen_gemm_wgrad_args){.which = g}, NULL) !=
           MOEGEN_ERR_INVALID_ARGUMENT; /* dw is written: required */
  }
  bad += moegen_gemm1_fwd_glu(m, &(moegen_gemm_glu_args){0}, NULL) != MOEGEN_OK;
  bad += moegen_gemm2_dgrad_glu(m, &(moegen_gemm_dglu_args){0}, NULL) != MOEGEN_OK;
  moegen_gemm_wgrad_args w = {.which = MOEGEN_GEMM2, .max_rows = 8, .dy = buf, .x = buf, .dw = buf,
                              .accumulate = 2, .counts = dc};
  bad += moegen_gemm_wgrad(m, &w, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  w.accumulate = 0;
  w.x = NULL;
  bad += moegen_gemm_wgrad(m, &w, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_gemm_glu_args gl = {.max_rows = 8, .x = buf, .w = buf, .act = buf, .counts = dc,
                             .prob = (const float *)((char *)buf + 2)};
  bad += moegen_gemm1_fwd_glu(m, &gl, NULL) != MOEGEN_ERR_INVALID_ARGUMENT; /* misaligned prob */
  printf("  %s argument checks\n", bad ? "FAIL" : "ok  ");
  failures += bad != 0;

  /* max_rows = 0: dw_e = 0 and db_e = 0 for every expert, with the inputs
   * given and with them NULL (empty tensors). */
  const int32_t zeros[4] = {0, 0, 0, 0};
  gpu_put(dc, zeros, sizeof zeros);
  size_t ws = (size_t)E * H * F, bs = (size_t)E * H;
  void *dw = gpu_alloc(2 * ws);
  float *db = gpu_alloc(4 * bs);
  uint16_t *g16 = malloc(2 * ws);
  float *g32 = malloc(4 * bs);
  int zbad = 0;
  for (int null_inputs = 0; null_inputs <= 1; null_inputs++) {
    gpu_poison(dw, 2 * ws);
    gpu_poison(db, 4 * bs);
    w = (moegen_gemm_wgrad_args){.which = MOEGEN_GEMM2, .max_rows = 0, .dy = buf, .x = buf,
                                 .dw = dw, .db = db, .counts = dc};
    if (null_inputs) w.dy = w.x = NULL, w.counts = NULL;
    zbad += moegen_gemm_wgrad(m, &w, NULL) != MOEGEN_OK;
    CU(gpu_drv->cuCtxSynchronize());
    gpu_get(g16, dw, 2 * ws);
    gpu_get(g32, db, 4 * bs);
    for (size_t i = 0; i < ws; i++) zbad += g16[i] != 0;
    for (size_t i = 0; i < bs; i++) zbad += g32[i] != 0;
  }
  printf("  %s wgrad max_rows = 0 writes zeros (inputs given, inputs NULL)\n", zbad ? "FAIL" : "ok  ");
  failures += zbad != 0;
  free(g16);
  free(g32);
  gpu_free(dw);
  gpu_free(db);
  gpu_free(dc);
  gpu_free(buf);
  moegen_module_destroy(m);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  const int32_t c4[4] = {0, 1, 127, 300}, c4b[4] = {300, 0, 1, 129}, c1[1] = {257};
  case_counts("E=4 {0,1,127,300}", 4, 512, 256, c4, ALL);
  case_counts("E=4 N,K not tile multiples", 4, 520, 200, c4b, ALL);
  case_counts("E=1", 1, 256, 384, c1, ALL);
  /* Tall tiles (max_rows >= 512 * E): as test_gemm.c's tall case (full,
   * partial and narrow last tiles), N and K not tile multiples. */
  const int32_t ct[5] = {1025, 0, 511, 640, 612};
  case_counts("E=5 tall tiles, N,K not tile multiples", 5, 520, 200, ct, ALL);
  int32_t c130[130], c256[256], c8[8];
  random_counts(c130, 130, 40);
  case_counts("E=130 random counts", 130, 256, 128, c130, ALL);
  random_counts(c256, 256, 20);
  case_counts("E=256 random counts", 256, 256, 128, c256, ALL | QUICK);
  for (int e = 0; e < 8; e++) c8[e] = 250 + (int32_t)(rng_u64() % 140);
  case_counts("E=8 more tiles than SMs", 8, 1024, 1024, c8, ALL | QUICK);
  /* The models' H and F with a few experts and rows. */
  const int32_t cd[2] = {3, 70}, cq[4] = {0, 9, 64, 1}, cm[2] = {5, 33}, cg[3] = {5, 0, 70};
  if (!gpu_skip_heavy("deepseek-v3 H, F (E=2)"))
    case_counts("deepseek-v3 H, F (E=2)", 2, 7168, 2048, cd, ALL | QUICK);
  case_counts("qwen3-30b H, F (E=4)", 4, 2048, 768, cq, ALL | QUICK);
  if (!gpu_skip_heavy("mixtral H, F (E=2)")) case_counts("mixtral H, F (E=2)", 2, 4096, 14336, cm, ALL | QUICK);
  if (!gpu_skip_heavy("gpt-oss H, F (E=3)")) case_counts("gpt-oss H, F (E=3)", 3, 2880, 2880, cg, ALL | QUICK);
  case_graph();
  case_args();
  if (hopper_runs && !tall_runs) {
    printf("  FAIL no case took the tall-tile kernels\n");
    failures++;
  }
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
