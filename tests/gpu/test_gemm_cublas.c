/* tests/gpu/test_gemm_cublas.c -- moegen's grouped GEMMs against the cuBLASLt
 * reference (tests/gpu/cublaslt.h) at the four peers.py models' real shapes,
 * too large for the CPU reference: gemm1 and gemm2 forward, gemm1 dgrad and
 * wgrad, on the rows of T = 4096 tokens routed uniformly, and once more on
 * DeepSeek-V3 shapes with uneven counts (empty experts, 1 and 127 rows)
 * and max_rows large enough for the tall kernels.
 *
 * Operands are exact (gemm_test.h fill: every product and partial sum is
 * exact in fp32), so cuBLASLt's fp32 D is the exact result whatever its
 * summation order, and moegen's bf16 output must be its rounding: checked
 * elementwise (SPEC.md 1.6e-2 relative + 1e-5) and by relative Frobenius
 * error (< 1e-2). Outputs are poisoned first; rows past the experts must
 * keep the poison. wgrad is compared on two windows of 4 experts (dW of
 * DeepSeek-V3 is 15 GB). In small-shape mode (gpu.h) the listed token
 * counts are routed instead of 4096, in buffers of the same max_rows, and
 * the windows are moved to where the few experts with rows are. The
 * portable test (test_gemm_cublas_portable_gpu) runs the portable mma.sync
 * GEMM (check.h). */
#include "cublaslt.h"
#include "gemm_test.h"
#include "gemm_tiles.h"

#define EXTRA_ROWS 37
#define PERIOD ((size_t)(1u << 20) + 7) /* values repeat with this period (odd: rows differ) */

static lt_ctx *lt;

/* Device bf16 buffer of n values: `block` (PERIOD exact values) repeated. */
static void *periodic(const float *block, size_t n) {
  uint16_t *b = malloc(2 * PERIOD);
  for (size_t i = 0; i < PERIOD; i++) b[i] = f32_to_bf16(block[i]);
  uint16_t *d = gpu_alloc(2 * n);
  for (size_t i = 0; i < n; i += PERIOD) gpu_put(d + i, b, 2 * (n - i < PERIOD ? n - i : PERIOD));
  free(b);
  return d;
}

/* Compares n bf16 values at dev with the fp32 reference at ref_dev (both
 * device), then checks that `tail` more bf16 values after them still hold
 * the 0xFFFF poison. An all-zero reference of n > 0 values fails (the case
 * would test nothing) unless zeros are what the case expects (zero_ok:
 * wgrad of experts without rows, in small-shape mode). */
static void compare(const char *what, const void *dev, const float *ref_dev, size_t n,
                    size_t tail, int zero_ok) {
  uint16_t *got = malloc(2 * (n + tail) + 2);
  float *ref = malloc(4 * n + 4);
  gpu_get(got, dev, 2 * (n + tail));
  gpu_get(ref, ref_dev, 4 * n);
  size_t bad = 0, first = 0, touched = 0;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; i++) {
    double g = bf16_to_f32(got[i]), r = ref[i], d = fabs(g - r);
    if (isnan(g) || d > 1e-5 + 1.6e-2 * fabs(r)) {
      if (!bad++) first = i;
      continue;
    }
    err2 += d * d;
    ref2 += r * r;
  }
  for (size_t i = n; i < n + tail; i++) touched += got[i] != 0xffff;
  double frob = ref2 > 0 ? sqrt(err2 / ref2) : 0;
  int ok = !bad && !touched && frob < 1e-2 && (n == 0 || ref2 > 0 || zero_ok);
  printf("  %s %-52s %11zu values  frob %.2e\n", ok ? "ok  " : "FAIL", what, n, frob);
  if (bad)
    printf("       %zu out of tolerance, first [%zu] = %.6g, want %.6g\n", bad, first,
           bf16_to_f32(got[first]), ref[first]);
  if (touched) printf("       %zu values past the experts' rows were written\n", touched);
  if (n && ref2 == 0 && !zero_ok) printf("       the reference is all zeros: the case tests nothing\n");
  failures += !ok;
  free(got);
  free(ref);
}

/* Runs the cuBLASLt reference of `kind` for experts [e0, e0 + ne) into the
 * fp32 buffer ref (a, b: the whole operands). 0 on failure (counted). */
static int reference(lt_kind kind, const int32_t *counts, int e0, int ne, int N, int K,
                     const void *a, const void *b, float *ref) {
  char why[256];
  lt_grouped *g = lt_grouped_plan(lt, kind, counts, e0, ne, N, K, 1, why, sizeof why);
  int rc = g ? 1 : 0;
  if (g) {
    rc = lt_grouped_run(g, a, b, ref, NULL) == 0;
    if (!rc) snprintf(why, sizeof why, "cublasLtMatmul failed");
    CU(gpu_drv->cuCtxSynchronize());
  }
  if (!rc) {
    printf("  FAIL cuBLASLt reference: %s\n", why);
    failures++;
  }
  lt_grouped_free(g);
  return rc;
}

/* The first window of 4 experts to compare dW on (of E > 4) in small-shape
 * mode, where few experts have rows: one starting just before the first
 * (last: 0) or ending at the last (last: 1) expert with rows, so that it
 * has rows and, where there is room, an empty expert. Normally the first
 * (0) or the last (E - 4) window. */
static int window_of(const int32_t *counts, int E, int last) {
  if (!gpu_small()) return last ? E - 4 : 0;
  int e = last ? E - 1 : 0;
  while (e >= 0 && e < E && counts[e] == 0) e += last ? -1 : 1;
  if (e < 0 || e >= E) return last ? E - 4 : 0; /* no rows at all */
  int e0 = last ? e - 3 : e - 1;
  return e0 < 0 ? 0 : e0 > E - 4 ? E - 4 : e0;
}

/* The device buffers of one model shape, max_rows rows. */
typedef struct shape_bufs {
  int E, H, F, max_rows;
  void *x, *dy, *w1, *w2; /* [max_rows, max(H, F)], [max_rows, 2F], [E, 2F, H], [E, H, F] */
  int32_t *dcounts;       /* [E] */
  void *ws;               /* the tile ticket, MOEGEN_GEMM_WORKSPACE_BYTES */
  void *out;              /* [max_rows, max(2F, H)] bf16, out_n values */
  size_t out_n, slab;     /* slab = 2F * H, one expert's dW */
  void *dw;               /* [E, 2F, H] bf16 */
  float *wref;            /* [4, 2F, H] fp32: one window's reference */
} shape_bufs;

/* The GEMMs of one row set, counts[E] (host), in b's buffers. */
static void run_set(moegen_module *m, const shape_bufs *b, const int32_t *counts) {
  const int E = b->E, H = b->H, F = b->F, max_rows = b->max_rows, rows = sum_of(counts, E);
  const size_t slab = b->slab;
  printf(" rows=%d\n", rows);
  gpu_put(b->dcounts, counts, 4 * (size_t)E);
  float *ref = gpu_alloc(4 * (size_t)rows * (2 * F > H ? 2 * F : H) + 16);
  char what[96];

  for (int g = 1; g <= 2; g++) { /* forward: gemm1 [rows, H] x [E, 2F, H]^T, gemm2 [rows, F] x [E, H, F]^T */
    const int N = g == 1 ? 2 * F : H, K = g == 1 ? H : F;
    gpu_poison(b->out, 2 * b->out_n);
    moegen_gemm_fwd_args a = {.which = g == 1 ? MOEGEN_GEMM1 : MOEGEN_GEMM2, .max_rows = max_rows,
                              .x = b->x, .w = g == 1 ? b->w1 : b->w2, .y = b->out,
                              .counts = b->dcounts, .workspace = b->ws,
                              .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
    moegen_status st = moegen_gemm_fwd(m, &a, NULL);
    snprintf(what, sizeof what, "gemm%d forward N=%d K=%d", g, N, K);
    if (st != MOEGEN_OK) {
      printf("  FAIL %s: %s\n", what, moegen_module_last_error(m));
      failures++;
    } else if (reference(LT_FWD, counts, 0, E, N, K, b->x, a.w, ref)) {
      compare(what, b->out, ref, (size_t)rows * N, (size_t)(max_rows - rows) * N, 0);
    }
  }

  /* gemm1 dgrad: dx [rows, H] = dy [rows, 2F] W1_e */
  gpu_poison(b->out, 2 * b->out_n);
  moegen_gemm_dgrad_args d = {.which = MOEGEN_GEMM1, .max_rows = max_rows, .dy = b->dy,
                              .w = b->w1, .dx = b->out, .counts = b->dcounts, .workspace = b->ws,
                              .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  snprintf(what, sizeof what, "gemm1 dgrad N=%d K=%d", 2 * F, H);
  if (moegen_gemm_dgrad(m, &d, NULL) != MOEGEN_OK) {
    printf("  FAIL %s: %s\n", what, moegen_module_last_error(m));
    failures++;
  } else if (reference(LT_DGRAD, counts, 0, E, 2 * F, H, b->dy, b->w1, ref)) {
    compare(what, b->out, ref, (size_t)rows * H, (size_t)(max_rows - rows) * H, 0);
  }
  gpu_free(ref);

  /* gemm1 wgrad (bf16 dW [E, 2F, H]) on two windows of experts */
  gpu_poison(b->dw, 2 * (size_t)E * slab);
  moegen_gemm_wgrad_args w = {.which = MOEGEN_GEMM1, .max_rows = max_rows, .dy = b->dy,
                              .x = b->x, .dw = b->dw, .counts = b->dcounts};
  if (moegen_gemm_wgrad(m, &w, NULL) != MOEGEN_OK) {
    printf("  FAIL gemm1 wgrad: %s\n", moegen_module_last_error(m));
    failures++;
    return;
  }
  const int windows[2] = {E > 4 ? window_of(counts, E, 0) : 0, E > 4 ? window_of(counts, E, 1) : 0};
  for (int i = 0; i < (E > 4 ? 2 : 1); i++) {
    const int e0 = windows[i], ne = E < 4 ? E : 4;
    /* cuBLASLt writes no dW_e of an empty expert; moegen writes zeros */
    CU(gpu_drv->cuMemsetD8Async((CUdeviceptr)(uintptr_t)b->wref, 0, 4 * 4 * slab, NULL));
    snprintf(what, sizeof what, "gemm1 wgrad experts %d..%d N=%d K=%d", e0, e0 + ne - 1, 2 * F, H);
    if (reference(LT_WGRAD, counts, e0, ne, 2 * F, H, b->dy, b->x, b->wref))
      compare(what, (const uint16_t *)b->dw + (size_t)e0 * slab, b->wref, (size_t)ne * slab, 0,
              sum_of(counts + e0, ne) == 0);
  }
}

/* One model shape (E experts, hidden H, ffn F), in buffers of max_rows
 * rows (or more, if a set has more rows), on each of the n row sets
 * sets[0..n)[E]. */
static void case_shape(const char *name, int E, int H, int F, int n, int32_t (*sets)[256],
                       int max_rows) {
  moegen_module *m = module_of(E, H, F, 1u << MOEGEN_UNIT_GEMM | 1u << MOEGEN_UNIT_GEMM_TRAIN);
  if (!m) return;
  for (int set = 0; set < n; set++)
    if (sum_of(sets[set], E) + EXTRA_ROWS > max_rows) max_rows = sum_of(sets[set], E) + EXTRA_ROWS;
  printf("%s: E=%d H=%d F=%d max_rows=%d%s\n", name, E, H, F, max_rows,
         moegen_gemm_tall(moegen_module_image(m), max_rows) ? " (tall tiles)" : "");
  shape_bufs b = {.E = E, .H = H, .F = F, .max_rows = max_rows,
                  .out_n = (size_t)max_rows * (2 * F > H ? 2 * F : H), .slab = (size_t)2 * F * H};
  float *block = malloc(4 * PERIOD);
  fill(block, NULL, PERIOD, 0.25f);
  b.x = periodic(block, (size_t)max_rows * (H > F ? H : F)); /* X of gemm1, A of gemm2 */
  b.dy = periodic(block, (size_t)max_rows * 2 * F);
  fill(block, NULL, PERIOD, 1.f / 16);
  b.w1 = periodic(block, (size_t)E * 2 * F * H);
  b.w2 = periodic(block, (size_t)E * H * F);
  free(block);
  b.dcounts = gpu_alloc(4 * (size_t)E);
  b.ws = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES);
  b.out = gpu_alloc(2 * b.out_n);
  b.dw = gpu_alloc(2 * (size_t)E * b.slab);
  b.wref = gpu_alloc(4 * 4 * b.slab);
  for (int set = 0; set < n; set++) run_set(m, &b, sets[set]);
  gpu_free(b.dw); gpu_free(b.wref);
  gpu_free(b.x); gpu_free(b.dy); gpu_free(b.w1); gpu_free(b.w2); gpu_free(b.dcounts);
  gpu_free(b.ws); gpu_free(b.out);
  moegen_module_destroy(m);
}

/* Rows per expert of T tokens routed to K distinct experts each, uniformly. */
static void route(int T, int E, int K, int32_t *counts) {
  for (int e = 0; e < E; e++) counts[e] = 0;
  for (int t = 0; t < T; t++) {
    int picked[32], n = 0;
    while (n < K) {
      int e = (int)(rng_u64() % (uint64_t)E), dup = 0;
      for (int j = 0; j < n; j++) dup |= picked[j] == e;
      if (!dup) picked[n++] = e, counts[e]++;
    }
  }
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  char why[256];
  lt = gpu_warm() ? NULL : lt_open(why, sizeof why); /* warm mode runs no case */
  if (!lt && !gpu_warm()) {
    printf("FAIL: %s\n", why);
    return 1;
  }
  static const struct { const char *name; int E, K, H, F; } models[] = {
      {"deepseek-v3", 256, 8, 7168, 2048}, {"qwen3-30b-a3b", 128, 8, 2048, 768},
      {"mixtral-8x7b", 8, 2, 4096, 14336}, {"gpt-oss-120b", 128, 4, 2880, 2880}};
  /* heavy (MOEGEN_TEST_SUBSET=1 skips them): the E = 256 and 128 shapes
   * whose weights and dW take 37 and 10 GB */
  static const int heavy[] = {1, 0, 0, 1};
  static const int own_tokens[] = {4096};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, 1, tokens);
  static int32_t sets[GPU_MAX_TOKENS][256];
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    if (heavy[i] && gpu_skip_heavy(models[i].name)) continue;
    for (int t = 0; t < nt; t++) route(tokens[t], models[i].E, models[i].K, sets[t]);
    case_shape(models[i].name, models[i].E, models[i].H, models[i].F, nt, sets,
               4096 * models[i].K + EXTRA_ROWS);
  }
  /* Uneven: a quarter of the experts empty, the rest 0..1500 rows, experts
   * 1 and 2 with 1 and 127 rows, 255 with 300; max_rows >= 512 E takes
   * the tall kernels. In small-shape mode: the listed tokens routed as
   * DeepSeek-V3's (K = 8), with the same max_rows (tall tiles). */
  int32_t *counts = sets[0];
  for (int e = 0; e < 256; e++) counts[e] = rng_u64() % 4 == 0 ? 0 : (int32_t)(rng_u64() % 1501);
  counts[1] = 1;
  counts[2] = 127;
  counts[255] = 300; /* the second wgrad window has rows */
  const int rows = sum_of(counts, 256);
  if (gpu_small())
    for (int t = 0; t < nt; t++) route(tokens[t], 256, 8, sets[t]);
  if (!gpu_skip_heavy("deepseek-v3 uneven"))
    case_shape("deepseek-v3 uneven", 256, 7168, 2048, gpu_small() ? nt : 1, sets,
               (rows > 512 * 256 ? rows : 512 * 256) + EXTRA_ROWS);
  lt_close(lt);
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures != 0;
}
