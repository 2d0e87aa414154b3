/* bench stages "gemm1" and "gemm2": the grouped GEMM forward on the rows of
 * a routing of T tokens (K distinct experts per token, uniform at random),
 * as peers.py's stage_gemm times torch._grouped_mm and a cuBLAS loop:
 * gemm1 [rows, H] x [E, 2F, H]^T, gemm2 [rows, F] x [E, H, F]^T, bf16,
 * tflops = 2 * rows * N * K / time. Before timing, sampled rows of y are
 * checked against the CPU reference (all N columns of 8 random rows).
 * Every GEMM stage also times the cuBLASLt reference (tests/gpu/cublaslt.h,
 * one cublasLtMatmul per expert, bf16 out) as peer "cublaslt", after the
 * same check, when libcublasLt.so.13 loads. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cublaslt.h"
#include "fp8_ref.h"
#include "half.h"

/* Inputs repeat a random block of PERIOD bf16 values (odd, so rows differ):
 * cheap to upload for the 15 GB weights of DeepSeek-V3. */
#define PERIOD ((size_t)(4u << 20) + 7)
#define CHECK_ROWS 8

typedef struct gemm_ctx {
  moegen_module *m;
  moegen_gemm_fwd_args a;
} gemm_ctx;

static moegen_status gemm_op(void *ctx, CUstream s) {
  gemm_ctx *c = ctx;
  return moegen_gemm_fwd(c->m, &c->a, s);
}

/* Device buffer of n elements of `size` bytes, element i = block[i % PERIOD]. */
static void *periodic_of(const void *block, size_t size, size_t n) {
  char *d = gpu_alloc(size * n);
  for (size_t i = 0; i < n; i += PERIOD)
    gpu_put(d + size * i, block, size * (n - i < PERIOD ? n - i : PERIOD));
  return d;
}

/* Device buffer of n bf16 values block[i % PERIOD]. */
static void *periodic(const uint16_t *block, size_t n) { return periodic_of(block, 2, n); }

/* Rows per expert of T tokens routed to K distinct experts each, uniformly. */
static void route(int T, int E, int K, int32_t *counts) {
  int *perm = malloc(sizeof(int) * (size_t)E);
  for (int e = 0; e < E; e++) perm[e] = e, counts[e] = 0;
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) { /* partial Fisher-Yates: perm[0..K) is the pick */
      int j = k + (int)(rng_u64() % (uint64_t)(E - k)), tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
      counts[perm[k]]++;
    }
  free(perm);
}

/* CHECK_ROWS random rows of y against fp32 dot products; 0 if all close. */
static int check_rows(const moegen_gemm_fwd_args *a, const int32_t *counts, int E, int N, int K,
                      const float *xb, const float *wb) {
  int rows = (int)a->max_rows, bad = 0;
  uint16_t *got = malloc(2 * (size_t)N);
  for (int i = 0; i < CHECK_ROWS && !bad; i++) {
    int r = (int)(rng_u64() % (uint64_t)rows), e = 0, start = 0;
    while (start + counts[e] <= r) start += counts[e++];
    gpu_get(got, (const uint16_t *)a->y + (size_t)r * N, 2 * (size_t)N);
    for (int n = 0; n < N && !bad; n++) {
      double s = 0;
      size_t xo = (size_t)r * K, wo = ((size_t)e * N + n) * K;
      for (int k = 0; k < K; k++) s += (double)xb[(xo + k) % PERIOD] * wb[(wo + k) % PERIOD];
      double g = bf16_to_f32(got[n]);
      bad = !(fabs(g - s) <= 1e-5 + 1.6e-2 * fabs(s) + 2e-3); /* + fp32 sum-order slack */
    }
  }
  free(got);
  return bad;
}

/* The timing line of a GEMM stage for `peer`, with peers.py's FLOPs: 2 rows N K. */
static void gemm_result(const char *stage, const bench_model *md, int T, float ms, int rows, int N,
                        int K, const char *peer) {
  char extra[128];
  snprintf(extra, sizeof extra, ", \"tflops\": %.1f, \"rows\": %d, \"K\": %d, \"N\": %d",
           2.0 * rows * N * K / ms / 1e9, rows, K, N);
  bench_peer_result(stage, peer, md, T, ms, extra);
}

/* The process's cuBLASLt, opened at first use; NULL (said once) when it
 * does not load. */
static lt_ctx *lt(void) {
  static lt_ctx *c;
  static int tried;
  if (!tried) {
    char why[256];
    tried = 1;
    c = lt_open(why, sizeof why);
    if (!c) fprintf(stderr, "moegen-bench: no cublaslt peer: %s\n", why);
  }
  return c;
}

typedef struct lt_op_ctx {
  const lt_grouped *g;
  const void *a, *b;
  void *d;
} lt_op_ctx;

static moegen_status lt_op(void *ctx, CUstream s) {
  const lt_op_ctx *c = ctx;
  return lt_grouped_run(c->g, c->a, c->b, c->d, s) ? MOEGEN_ERR_CUDA : MOEGEN_OK;
}

/* Plans kind's cuBLASLt calls for counts (bf16 D) and runs them once into d;
 * NULL (an error line for stage) if cuBLASLt is missing or fails. */
static lt_grouped *lt_prepare(const char *stage, const bench_model *md, int T, lt_kind kind,
                              const int32_t *counts, int N, int K, lt_op_ctx *op) {
  if (!lt()) return NULL;
  char why[256];
  lt_grouped *g = lt_grouped_plan(lt(), kind, counts, 0, md->E, N, K, 0, why, sizeof why);
  op->g = g;
  if (g && lt_op(op, NULL) != MOEGEN_OK) snprintf(why, sizeof why, "cublasLtMatmul failed");
  else if (g) return g;
  bench_error_peer(stage, "cublaslt", md, T, why);
  lt_grouped_free(g);
  return NULL;
}

static void bench_gemm(const bench_model *md, int T, moegen_gemm_id which, void *flush) {
  const char *stage = which == MOEGEN_GEMM1 ? "gemm1" : "gemm2";
  gemm_ctx ctx = {.m = bench_module(md, stage, T)};
  if (!ctx.m) return;
  const int E = md->E, N = which == MOEGEN_GEMM1 ? 2 * md->F : md->H;
  const int K = which == MOEGEN_GEMM1 ? md->H : md->F;
  int32_t *counts = malloc(4 * (size_t)E);
  route(T, E, md->K, counts);
  const int rows = T * md->K;
  uint16_t *block = malloc(2 * PERIOD);
  float *xb = malloc(4 * PERIOD), *wb = malloc(4 * PERIOD);
  for (size_t i = 0; i < PERIOD; i++) {
    block[i] = f32_to_bf16(rng_normal());
    xb[i] = bf16_to_f32(block[i]);
  }
  void *x = periodic(block, (size_t)rows * K);
  for (size_t i = 0; i < PERIOD; i++) {
    block[i] = f32_to_bf16(rng_normal() / sqrtf((float)K));
    wb[i] = bf16_to_f32(block[i]);
  }
  void *w = periodic(block, (size_t)E * N * K);
  void *y = gpu_alloc(2 * (size_t)rows * N);
  int32_t *dcounts = gpu_alloc(4 * (size_t)E);
  gpu_put(dcounts, counts, 4 * (size_t)E);
  void *ws = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES); /* the tile ticket */
  ctx.a = (moegen_gemm_fwd_args){.which = which, .max_rows = rows, .x = x, .w = w, .y = y,
                                 .counts = dcounts, .workspace = ws,
                                 .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  gpu_poison(y, 2 * (size_t)rows * N);
  moegen_status st = gemm_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  } else if (check_rows(&ctx.a, counts, E, N, K, xb, wb)) {
    bench_error(stage, md, T, "output differs from the CPU reference");
  } else {
    float ms = bench_time_op(gemm_op, &ctx, flush);
    gemm_result(stage, md, T, ms, rows, N, K, "moegen");
    lt_op_ctx op = {.a = x, .b = w, .d = y};
    gpu_poison(y, 2 * (size_t)rows * N);
    lt_grouped *g = lt_prepare(stage, md, T, LT_FWD, counts, N, K, &op);
    CU(gpu_drv->cuCtxSynchronize());
    if (g && check_rows(&ctx.a, counts, E, N, K, xb, wb))
      bench_error_peer(stage, "cublaslt", md, T, "output differs from the CPU reference");
    else if (g)
      gemm_result(stage, md, T, bench_time_op(lt_op, &op, flush), rows, N, K, "cublaslt");
    lt_grouped_free(g);
  }
  gpu_free(x); gpu_free(w); gpu_free(y); gpu_free(dcounts); gpu_free(ws);
  free(counts); free(block); free(xb); free(wb);
  moegen_module_destroy(ctx.m);
}

void bench_gemm1(const bench_model *md, int T, void *flush) { bench_gemm(md, T, MOEGEN_GEMM1, flush); }
void bench_gemm2(const bench_model *md, int T, void *flush) { bench_gemm(md, T, MOEGEN_GEMM2, flush); }

/* ---------------------------------------------------------------- gemm1_dgrad, gemm1_wgrad
 * As peers.py's extras of stage_gemm: dx = dy W ([rows, 2F] x [E, 2F, H])
 * and dW_e = dy_e^T x_e (bf16 out), same rows, tflops = 2 * rows * 2F * H /
 * time. Checked first: CHECK_ROWS random rows of dx, or of dW (one (e, n)
 * row over all H columns), against fp32 sums on the CPU. */
typedef struct gemm_bwd_ctx {
  moegen_module *m;
  moegen_gemm_dgrad_args d;
  moegen_gemm_wgrad_args w;
  int wgrad;
} gemm_bwd_ctx;

static moegen_status gemm_bwd_op(void *ctx, CUstream s) {
  gemm_bwd_ctx *c = ctx;
  return c->wgrad ? moegen_gemm_wgrad(c->m, &c->w, s) : moegen_gemm_dgrad(c->m, &c->d, s);
}

static int check_bwd(const gemm_bwd_ctx *c, const int32_t *counts, int E, int N, int K,
                     const float *xb, const float *wb, const float *dyb) {
  int bad = 0;
  uint16_t *got = malloc(2 * (size_t)K);
  for (int i = 0; i < CHECK_ROWS && !bad; i++) {
    if (!c->wgrad) { /* dx row r: sum_n dy[r, n] w[e, n, k] */
      int r = (int)(rng_u64() % (uint64_t)c->d.max_rows), e = 0, start = 0;
      while (start + counts[e] <= r) start += counts[e++];
      gpu_get(got, (const uint16_t *)c->d.dx + (size_t)r * K, 2 * (size_t)K);
      for (int k = 0; k < K && !bad; k++) {
        double s = 0;
        for (int n = 0; n < N; n++)
          s += (double)dyb[((size_t)r * N + n) % PERIOD] * wb[(((size_t)e * N + n) * K + k) % PERIOD];
        double g = bf16_to_f32(got[k]);
        bad = !(fabs(g - s) <= 1e-5 + 1.6e-2 * fabs(s) + 2e-3);
      }
    } else { /* dW row (e, n): sum over the expert's rows r of dy[r, n] x[r, k] */
      int e = (int)(rng_u64() % (uint64_t)E), n = (int)(rng_u64() % (uint64_t)N), start = 0;
      for (int j = 0; j < e; j++) start += counts[j];
      gpu_get(got, (const uint16_t *)c->w.dw + ((size_t)e * N + n) * K, 2 * (size_t)K);
      for (int k = 0; k < K && !bad; k++) {
        double s = 0;
        for (int r = start; r < start + counts[e]; r++)
          s += (double)dyb[((size_t)r * N + n) % PERIOD] * xb[((size_t)r * K + k) % PERIOD];
        double g = bf16_to_f32(got[k]);
        bad = !(fabs(g - s) <= 1e-5 + 1.6e-2 * fabs(s) + 2e-2);
      }
    }
  }
  free(got);
  return bad;
}

static void bench_gemm1_bwd(const bench_model *md, int T, int wgrad, void *flush) {
  const char *stage = wgrad ? "gemm1_wgrad" : "gemm1_dgrad";
  gemm_bwd_ctx ctx = {.m = bench_module(md, stage, T), .wgrad = wgrad};
  if (!ctx.m) return;
  const int E = md->E, N = 2 * md->F, K = md->H, rows = T * md->K;
  int32_t *counts = malloc(4 * (size_t)E);
  route(T, E, md->K, counts);
  uint16_t *block = malloc(2 * PERIOD);
  float *xb = malloc(4 * PERIOD), *wb = malloc(4 * PERIOD), *dyb = malloc(4 * PERIOD);
  float *bufs[3] = {xb, wb, dyb};
  void *dev[3];
  const size_t sizes[3] = {(size_t)rows * K, (size_t)E * N * K, (size_t)rows * N};
  for (int b = 0; b < 3; b++) {
    const float scale = b == 1 ? 1 / sqrtf((float)K) : 1;
    for (size_t i = 0; i < PERIOD; i++) {
      block[i] = f32_to_bf16(rng_normal() * scale);
      bufs[b][i] = bf16_to_f32(block[i]);
    }
    dev[b] = wgrad && b == 1 ? NULL : periodic(block, sizes[b]);
  }
  void *out = gpu_alloc(2 * (wgrad ? (size_t)E * N * K : (size_t)rows * K));
  int32_t *dcounts = gpu_alloc(4 * (size_t)E);
  gpu_put(dcounts, counts, 4 * (size_t)E);
  void *ws = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES); /* dgrad's tile ticket */
  ctx.d = (moegen_gemm_dgrad_args){.which = MOEGEN_GEMM1, .max_rows = rows, .dy = dev[2],
                                   .w = dev[1], .dx = out, .counts = dcounts, .workspace = ws,
                                   .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  ctx.w = (moegen_gemm_wgrad_args){.which = MOEGEN_GEMM1, .max_rows = rows, .dy = dev[2],
                                   .x = dev[0], .dw = out, .counts = dcounts};
  moegen_status st = gemm_bwd_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  } else if (check_bwd(&ctx, counts, E, N, K, xb, wb, dyb)) {
    bench_error(stage, md, T, "output differs from the CPU reference");
  } else {
    float ms = bench_time_op(gemm_bwd_op, &ctx, flush);
    gemm_result(stage, md, T, ms, rows, N, K, "moegen");
    /* cuBLASLt writes no dW_e of an empty expert: zeros there, as moegen's */
    if (wgrad) CU(gpu_drv->cuMemsetD8Async((CUdeviceptr)(uintptr_t)out, 0, 2 * (size_t)E * N * K, NULL));
    else gpu_poison(out, 2 * (size_t)rows * K);
    lt_op_ctx op = {.a = dev[2], .b = wgrad ? dev[0] : dev[1], .d = out};
    lt_grouped *g = lt_prepare(stage, md, T, wgrad ? LT_WGRAD : LT_DGRAD, counts, N, K, &op);
    CU(gpu_drv->cuCtxSynchronize());
    if (g && check_bwd(&ctx, counts, E, N, K, xb, wb, dyb))
      bench_error_peer(stage, "cublaslt", md, T, "output differs from the CPU reference");
    else if (g)
      gemm_result(stage, md, T, bench_time_op(lt_op, &op, flush), rows, N, K, "cublaslt");
    lt_grouped_free(g);
  }
  for (int b = 0; b < 3; b++) gpu_free(dev[b]);
  gpu_free(out); gpu_free(dcounts); gpu_free(ws);
  free(counts); free(block); free(xb); free(wb); free(dyb);
  moegen_module_destroy(ctx.m);
}

void bench_gemm1_dgrad(const bench_model *md, int T, void *flush) { bench_gemm1_bwd(md, T, 0, flush); }
void bench_gemm1_wgrad(const bench_model *md, int T, void *flush) { bench_gemm1_bwd(md, T, 1, flush); }

/* ---------------------------------------------------------------- gemm1_fp8, gemm2_fp8
 * The fp8_block forward (moegen_gemm_fwd_fp8, no SwiGLU: peers.py's
 * stage_fp8 times the plain GEMMs) on the same rows as gemm1 / gemm2, e4m3
 * x and w with power-of-two dequant scales (1x128 for x, 128x128 for w),
 * pre-quantized (not timed); tflops = 2 * rows * N * K / time; "recipe":
 * "fp8_block". Checked first: CHECK_ROWS random rows of y, all N columns,
 * against fp64 sums of the dequantized values. */
typedef struct gemm_fp8_ctx {
  moegen_module *m;
  moegen_gemm_fwd_fp8_args a;
} gemm_fp8_ctx;

static moegen_status gemm_fp8_op(void *ctx, CUstream s) {
  gemm_fp8_ctx *c = ctx;
  return moegen_gemm_fwd_fp8(c->m, &c->a, s);
}

/* Power-of-two scales base * 2^{-1, 0, 1} at random into h[n] (and the device copy). */
static float *random_scales(size_t n, float base, void **dev) {
  float *h = malloc(4 * n + 4);
  for (size_t i = 0; i < n; i++) h[i] = ldexpf(base, (int)(rng_u64() % 3) - 1);
  *dev = gpu_alloc(4 * n);
  gpu_put(*dev, h, 4 * n);
  return h;
}

static int check_rows_fp8(const moegen_gemm_fwd_fp8_args *a, const int32_t *counts, int E, int N,
                          int K, const float *xb, const float *wb, const float *xs, const float *ws) {
  const int rows = (int)a->max_rows, KB = K / FP8_BLOCK, NB = N / FP8_BLOCK;
  int bad = 0;
  uint16_t *got = malloc(2 * (size_t)N);
  for (int i = 0; i < CHECK_ROWS && !bad; i++) {
    int r = (int)(rng_u64() % (uint64_t)rows), e = 0, start = 0;
    while (start + counts[e] <= r) start += counts[e++];
    gpu_get(got, (const uint16_t *)a->y + (size_t)r * N, 2 * (size_t)N);
    for (int n = 0; n < N && !bad; n++) {
      double s = 0;
      size_t xo = (size_t)r * K, wo = ((size_t)e * N + n) * K;
      for (int k = 0; k < K; k++)
        s += (double)xb[(xo + k) % PERIOD] * xs[(size_t)(k / FP8_BLOCK) * a->scale_ld + r] *
             wb[(wo + k) % PERIOD] * ws[((size_t)e * NB + n / FP8_BLOCK) * KB + k / FP8_BLOCK];
      double g = bf16_to_f32(got[n]);
      bad = !(fabs(g - s) <= 1e-5 + 1.6e-2 * fabs(s) + 2e-3); /* + fp32 sum-order slack */
    }
  }
  free(got);
  return bad;
}

static void bench_gemm_fp8(const bench_model *md, int T, moegen_gemm_id which, void *flush) {
  const char *stage = which == MOEGEN_GEMM1 ? "gemm1_fp8" : "gemm2_fp8";
  moegen_config c;
  if (!bench_config_fp8(md, &c)) {
    bench_error(stage, md, T, "fp8_block needs hidden and ffn multiples of 128");
    return;
  }
  gemm_fp8_ctx ctx = {.m = bench_module_of(&c, md, stage, T)};
  if (!ctx.m) return;
  const int E = md->E, N = which == MOEGEN_GEMM1 ? 2 * md->F : md->H;
  const int K = which == MOEGEN_GEMM1 ? md->H : md->F;
  const int rows = T * md->K, ld = (rows + 3) / 4 * 4;
  int32_t *counts = malloc(4 * (size_t)E);
  route(T, E, md->K, counts);
  uint8_t *block = malloc(PERIOD);
  float *xb = malloc(4 * PERIOD), *wb = malloc(4 * PERIOD);
  for (size_t i = 0; i < PERIOD; i++) {
    block[i] = fp8_e4m3_from_f32(rng_normal());
    xb[i] = fp8_e4m3_to_f32(block[i]);
  }
  void *x = periodic_of(block, 1, (size_t)rows * K);
  for (size_t i = 0; i < PERIOD; i++) {
    block[i] = fp8_e4m3_from_f32(8 * rng_normal());
    wb[i] = fp8_e4m3_to_f32(block[i]);
  }
  void *w = periodic_of(block, 1, (size_t)E * N * K);
  void *dxs, *dws;
  float *xs = random_scales((size_t)(K / FP8_BLOCK) * ld, 1.f, &dxs);
  float *ws = random_scales((size_t)E * (N / FP8_BLOCK) * (K / FP8_BLOCK), 0.125f / sqrtf((float)K), &dws);
  void *y = gpu_alloc(2 * (size_t)rows * N);
  int32_t *dcounts = gpu_alloc(4 * (size_t)E);
  gpu_put(dcounts, counts, 4 * (size_t)E);
  void *wk = gpu_alloc(MOEGEN_GEMM_WORKSPACE_BYTES); /* the tile ticket */
  ctx.a = (moegen_gemm_fwd_fp8_args){.which = which, .max_rows = rows, .x = x, .x_scale = dxs,
                                     .scale_ld = ld, .w = w, .w_scale = dws, .y = y,
                                     .counts = dcounts, .workspace = wk,
                                     .workspace_bytes = MOEGEN_GEMM_WORKSPACE_BYTES};
  gpu_poison(y, 2 * (size_t)rows * N);
  moegen_status st = gemm_fp8_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  } else if (check_rows_fp8(&ctx.a, counts, E, N, K, xb, wb, xs, ws)) {
    bench_error(stage, md, T, "output differs from the CPU reference");
  } else {
    float ms = bench_time_op(gemm_fp8_op, &ctx, flush);
    char extra[160];
    snprintf(extra, sizeof extra, ", \"recipe\": \"fp8_block\", \"tflops\": %.1f, \"rows\": %d, "
             "\"K\": %d, \"N\": %d", 2.0 * rows * N * K / ms / 1e9, rows, K, N);
    bench_result(stage, md, T, ms, extra);
  }
  gpu_free(x); gpu_free(w); gpu_free(dxs); gpu_free(dws); gpu_free(y); gpu_free(dcounts); gpu_free(wk);
  free(counts); free(block); free(xb); free(wb); free(xs); free(ws);
  moegen_module_destroy(ctx.m);
}

void bench_gemm1_fp8(const bench_model *md, int T, void *flush) { bench_gemm_fp8(md, T, MOEGEN_GEMM1, flush); }
void bench_gemm2_fp8(const bench_model *md, int T, void *flush) { bench_gemm_fp8(md, T, MOEGEN_GEMM2, flush); }
