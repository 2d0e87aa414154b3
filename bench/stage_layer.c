/* bench stages "layer_fwd" and "layer_fwd_bwd": moegen_layer_fwd, and
 * moegen_layer_fwd + moegen_layer_bwd in one timed call, at the models'
 * real shapes. FLOPs as peers.py's stage_layer: 2 T K (H 2F + F H) forward,
 * three times that for forward + backward. Inputs as peers.py's: normal
 * tokens and logits (uniform here, of the same spread), weights scaled by
 * 1/sqrt(fan-in). Before timing layer_fwd, CHECK_TOKENS tokens of y are
 * checked against the CPU reference (the backward's correctness is
 * tests/gpu/test_layer.c's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "half.h"
#include "layer_ref.h"
#include "router_ref.h"

#define CHECK_TOKENS 4

typedef struct layer_ctx {
  moegen_module *m;
  moegen_layer_fwd_args f;
  moegen_layer_bwd_args b;
} layer_ctx;

static moegen_status fwd_op(void *ctx, CUstream s) {
  layer_ctx *c = ctx;
  return moegen_layer_fwd(c->m, &c->f, s);
}

static moegen_status fwd_bwd_op(void *ctx, CUstream s) {
  layer_ctx *c = ctx;
  moegen_status st = moegen_layer_fwd(c->m, &c->f, s);
  return st != MOEGEN_OK ? st : moegen_layer_bwd(c->m, &c->b, s);
}

/* The inputs and weights repeat a table of PERIOD hashed values in [-1, 1)
 * (scaled per tensor), so that filling gigabytes costs uploads, not hashing;
 * tensor `seed` starts at a different place in it. */
enum { PERIOD = (1 << 24) + 7 };

static float table_value(size_t i) {
  static float *table;
  if (!table) {
    table = malloc(4 * (size_t)PERIOD);
    for (size_t j = 0; j < PERIOD; j++) {
      uint64_t z = (j + 1) * 0x9E3779B97F4A7C15ull;
      z ^= z >> 31;
      z *= 0xBF58476D1CE4E5B9ull;
      z ^= z >> 29;
      table[j] = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
  }
  return table[i % PERIOD];
}

/* Element i of tensor `seed`, as bf16. */
static uint16_t value_of(size_t i, float scale, uint64_t seed) {
  return f32_to_bf16(scale * table_value(i + seed * 1000003u));
}

/* n such values into device d: one period is made on the host, then
 * uploaded as often as it takes. */
static void fill_device(void *d, size_t n, float scale, uint64_t seed) {
  uint16_t *b = malloc(2 * (size_t)PERIOD);
  for (size_t i = 0; i < PERIOD; i++) b[i] = value_of(i, scale, seed);
  for (size_t at = 0; at < n; at += PERIOD)
    gpu_put((char *)d + 2 * at, b, 2 * (n - at < PERIOD ? n - at : PERIOD));
  free(b);
}

/* Host fp32 copies of [off, off + n) of the same values. */
static void fill_host(float *h, size_t off, size_t n, float scale, uint64_t seed) {
  for (size_t i = 0; i < n; i++) h[off + i] = bf16_to_f32(value_of(off + i, scale, seed));
}

enum { SEED_X = 1, SEED_LOGITS, SEED_DY, SEED_W1, SEED_W2 };

/* y of CHECK_TOKENS tokens (spread over T) against layer_ref_fwd on those
 * tokens alone. The reference's weight arrays are full size but only the
 * experts those tokens route to are filled (the rest is never read). 1 if
 * max |y - ref| <= 2e-2 max |ref|. */
static int check(const moegen_config *c, int T, const layer_ctx *x, const float *bias) {
  const int H = c->hidden, E = c->experts, F = c->ffn, K = c->topk, n = CHECK_TOKENS;
  float *xs = malloc(4 * (size_t)n * H), *ls = malloc(4 * (size_t)n * E);
  float *want = malloc(4 * (size_t)n * H), *got = malloc(4 * (size_t)n * H);
  uint16_t *row = malloc(2 * (size_t)H);
  for (int i = 0; i < n; i++) {
    size_t t = (size_t)(T - 1) * i / (n - 1);
    for (int j = 0; j < H; j++) xs[(size_t)i * H + j] = bf16_to_f32(value_of(t * H + j, 1.7f, SEED_X));
    for (int e = 0; e < E; e++)
      ls[(size_t)i * E + e] = bf16_to_f32(value_of(t * E + e, 1.7f, SEED_LOGITS));
    gpu_get(row, (const char *)x->f.y + 2 * t * H, 2 * (size_t)H);
    for (int j = 0; j < H; j++) got[(size_t)i * H + j] = bf16_to_f32(row[j]);
  }
  int32_t *idx = malloc(4 * (size_t)n * K);
  router_ref_fwd(c, n, ls, x->f.expert_bias ? bias : NULL, NULL, NULL, idx, NULL, NULL, NULL);
  size_t n1 = (size_t)2 * F * H, n2 = (size_t)H * F; /* per expert */
  float *w1 = calloc((size_t)E * n1, 4), *w2 = calloc((size_t)E * n2, 4);
  unsigned char filled[MOEGEN_MAX_EXPERTS] = {0}; /* each routed expert once: tokens share them */
  for (int r = 0; r < n * K; r++) {
    size_t e = (size_t)idx[r];
    if (filled[e]) continue;
    filled[e] = 1;
    fill_host(w1, e * n1, n1, 1.7f / sqrtf((float)H), SEED_W1);
    fill_host(w2, e * n2, n2, 1.7f / sqrtf((float)F), SEED_W2);
  }
  layer_ref_io io = {n, xs, ls, x->f.expert_bias ? bias : NULL, w1, w2, NULL};
  layer_ref_fwd(c, &io, want);
  double dmax = 0, rmax = 0;
  for (size_t i = 0; i < (size_t)n * H; i++) {
    dmax = fmax(dmax, isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]));
    rmax = fmax(rmax, fabs(want[i]));
  }
  free(w1), free(w2), free(xs), free(ls), free(want), free(got), free(row), free(idx);
  return dmax <= 2e-2 * rmax;
}

/* Both layer stages of one (model, T): one module, one set of buffers. */
static void bench_layer(const bench_model *md, int T, void *flush, int with_bwd) {
  const char *stage = with_bwd ? "layer_fwd_bwd" : "layer_fwd";
  layer_ctx ctx = {.m = bench_module(md, stage, T)};
  if (!ctx.m) return;
  moegen_config c = bench_config_of(md);
  moegen_layer_shape sh;
  moegen_status st = moegen_layer_shape_of(moegen_module_image(ctx.m), T, &sh);
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_status_string(st));
    moegen_module_destroy(ctx.m);
    return;
  }
  const int E = md->E, H = md->H, F = md->F;
  size_t nx = (size_t)T * H, nl = (size_t)T * E, n1 = (size_t)E * 2 * F * H, n2 = (size_t)E * H * F;
  void *x = gpu_alloc(2 * nx), *logits = gpu_alloc(2 * nl), *w1 = gpu_alloc(2 * n1);
  void *w2 = gpu_alloc(2 * n2), *y = gpu_alloc(2 * nx), *dy = gpu_alloc(2 * nx);
  void *dx = gpu_alloc(2 * nx), *dl = gpu_alloc(2 * nl), *dw1 = gpu_alloc(2 * n1);
  void *dw2 = gpu_alloc(2 * n2), *saved = gpu_alloc(sh.saved_bytes);
  void *ws = gpu_alloc(sh.workspace_bytes);
  float *bias = gpu_alloc(4 * (size_t)E), hb[MOEGEN_MAX_EXPERTS];
  for (int e = 0; e < E; e++) hb[e] = 0.1f * rng_normal();
  gpu_put(bias, hb, 4 * (size_t)E);
  fill_device(x, nx, 1.7f, SEED_X);
  fill_device(logits, nl, 1.7f, SEED_LOGITS);
  fill_device(dy, nx, 1.7f, SEED_DY);
  fill_device(w1, n1, 1.7f / sqrtf((float)H), SEED_W1);
  fill_device(w2, n2, 1.7f / sqrtf((float)F), SEED_W2);
  ctx.f = (moegen_layer_fwd_args){.num_tokens = T, .max_tokens = T, .x = x, .logits = logits,
                                  .expert_bias = md->bias ? bias : NULL, .w1 = w1, .w2 = w2,
                                  .y = y, .saved = saved, .saved_bytes = sh.saved_bytes,
                                  .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  ctx.b = (moegen_layer_bwd_args){.num_tokens = T, .max_tokens = T, .dy = dy, .w1 = w1,
                                  .w2 = w2, .saved = saved, .saved_bytes = sh.saved_bytes,
                                  .logits = c.router_bwd == MOEGEN_ROUTER_BWD_RECOMPUTE ? logits : NULL,
                                  .dx = dx, .dlogits = dl, .dw1 = dw1, .dw2 = dw2,
                                  .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  st = fwd_bwd_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK) bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  else if (!with_bwd && !check(&c, T, &ctx, hb)) bench_error(stage, md, T, "layer output differs from the CPU reference");
  else {
    float ms = bench_time_op(with_bwd ? fwd_bwd_op : fwd_op, &ctx, flush);
    double flops = 2.0 * T * md->K * ((double)H * 2 * F + (double)F * H) * (with_bwd ? 3 : 1);
    char extra[96];
    snprintf(extra, sizeof extra, ", \"tflops\": %.1f%s", flops / ms / 1e9,
             with_bwd ? bench_router_bwd_json() : "");
    bench_result(stage, md, T, ms, extra);
  }
  void *bufs[] = {x, logits, w1, w2, y, dy, dx, dl, dw1, dw2, saved, ws, bias};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu_free(bufs[i]);
  moegen_module_destroy(ctx.m);
}

void bench_layer_fwd(const bench_model *md, int T, void *flush) { bench_layer(md, T, flush, 0); }

void bench_layer_fwd_bwd(const bench_model *md, int T, void *flush) {
  bench_layer(md, T, flush, 1);
}
