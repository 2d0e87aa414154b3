/* bench stages "permute" and "unpermute": moegen_permute_fwd (index kernels
 * + row copy, with permuted probs) and moegen_unpermute_fwd (weighted
 * combine) of bf16 tokens [T, H] routed to K distinct experts each,
 * uniformly at random (as peers.py's routing: top-k of random logits).
 * Bytes as peers.py's stage_permute: permute reads the tokens once and
 * writes K copies (T*H*2 + T*K*H*2), unpermute reads K copies and writes
 * one (the same). Before timing, the row map is checked against the CPU
 * reference and CHECK_TOKENS random tokens' rows and combined output too. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "half.h"
#include "permute_ref.h"

#define CHECK_TOKENS 16

typedef struct permute_ctx {
  moegen_module *m;
  moegen_permute_args p;
  moegen_unpermute_args u;
  int ok; /* the check before timing passed */
} permute_ctx;

static moegen_status permute_op(void *ctx, CUstream s) {
  permute_ctx *c = ctx;
  return moegen_permute_fwd(c->m, &c->p, s);
}

static moegen_status unpermute_op(void *ctx, CUstream s) {
  permute_ctx *c = ctx;
  return moegen_unpermute_fwd(c->m, &c->u, s);
}

/* K distinct experts per token, uniformly (partial Fisher-Yates), and softmax-like probs. */
static void route(int T, int E, int K, int32_t *idx, float *probs) {
  int *perm = malloc(sizeof(int) * (size_t)E);
  for (int e = 0; e < E; e++) perm[e] = e;
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int j = k + (int)(rng_u64() % (uint64_t)(E - k)), tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
      idx[(size_t)t * K + k] = perm[k];
      probs[(size_t)t * K + k] = rng_uniform() / K;
    }
  free(perm);
}

/* The GPU's row map equals the reference's; sampled tokens' rows equal x
 * bit for bit and their combined outputs equal the reference. 0 if all ok. */
static int check(const permute_ctx *c, int T, int K, int H, const int32_t *idx,
                 const float *probs, const uint16_t *hx) {
  permute_ref_routing r = {T, moegen_module_image(c->m)->permute.experts, K, idx, NULL};
  int32_t *counts = malloc(4 * (size_t)r.E), *offsets = malloc(4 * (size_t)r.E + 4), dropped;
  int32_t *want = malloc(4 * (size_t)T * K + 4), *got = malloc(4 * (size_t)T * K + 4);
  permute_ref_layout(&r, 1, 0, counts, offsets, want, &dropped);
  gpu_get(got, c->p.row_map, 4 * (size_t)T * K);
  int bad = memcmp(want, got, 4 * (size_t)T * K) != 0;
  uint16_t *row = malloc(2 * (size_t)H), *out = malloc(2 * (size_t)H);
  float *acc = malloc(4 * (size_t)H);
  for (int i = 0; i < CHECK_TOKENS && !bad && T > 0; i++) {
    int t = (int)(rng_u64() % (uint64_t)T);
    for (int h = 0; h < H; h++) acc[h] = 0.f;
    for (int k = 0; k < K && !bad; k++) {
      gpu_get(row, (const uint16_t *)c->p.rows + (size_t)want[(size_t)t * K + k] * H, 2 * (size_t)H);
      bad = memcmp(row, hx + (size_t)t * H, 2 * (size_t)H) != 0;
      for (int h = 0; h < H; h++) acc[h] = fmaf(probs[(size_t)t * K + k], bf16_to_f32(row[h]), acc[h]);
    }
    gpu_get(out, (const uint16_t *)c->u.out + (size_t)t * H, 2 * (size_t)H);
    for (int h = 0; h < H && !bad; h++) bad = out[h] != f32_to_bf16(acc[h]);
  }
  free(counts); free(offsets); free(want); free(got); free(row); free(out); free(acc);
  return bad;
}

/* Sets up both ops for md at T, runs them once and checks (c->ok; an error
 * line printed if not). NULL if the module cannot be made. */
static permute_ctx *setup(const bench_model *md, int T, const char *stage) {
  permute_ctx *c = calloc(1, sizeof *c);
  c->m = bench_module(md, stage, T);
  if (!c->m) {
    free(c);
    return NULL;
  }
  const moegen_image *img = moegen_module_image(c->m);
  moegen_permute_shape sh;
  if (moegen_permute_shape_of(img, T, 1, 0, &sh) != MOEGEN_OK) {
    bench_error(stage, md, T, "module has no permute kernels");
    moegen_module_destroy(c->m);
    free(c);
    return NULL;
  }
  size_t TK = (size_t)T * md->K, TH = (size_t)T * md->H, R = (size_t)sh.rows[0];
  int32_t *idx = malloc(4 * TK + 4);
  float *probs = malloc(4 * TK + 4);
  uint16_t *hx = malloc(2 * TH + 2);
  route(T, md->E, md->K, idx, probs);
  for (size_t i = 0; i < TH; i++) hx[i] = f32_to_bf16(rng_normal());
  void *x = gpu_alloc(2 * TH), *rows = gpu_alloc(2 * R * (size_t)md->H), *out = gpu_alloc(2 * TH);
  int32_t *didx = gpu_alloc(4 * TK), *map = gpu_alloc(4 * TK);
  float *dprobs = gpu_alloc(4 * TK), *pprobs = gpu_alloc(4 * R);
  gpu_put(x, hx, 2 * TH);
  gpu_put(didx, idx, 4 * TK);
  gpu_put(dprobs, probs, 4 * TK);
  c->p = (moegen_permute_args){.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .x = x,
                               .topk_indices = didx, .probs = dprobs, .align = 1, .rows = rows,
                               .permuted_probs = pprobs, .row_map = map,
                               .offsets = gpu_alloc(4 * (size_t)md->E + 4),
                               .counts = gpu_alloc(4 * (size_t)md->E),
                               .workspace = gpu_alloc(sh.workspace_bytes),
                               .workspace_bytes = sh.workspace_bytes};
  c->u = (moegen_unpermute_args){.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .rows = rows,
                                 .row_map = map, .merging_probs = dprobs, .out = out};
  moegen_status st = permute_op(c, NULL);
  if (st == MOEGEN_OK) st = unpermute_op(c, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  int bad = st != MOEGEN_OK ? -1 : check(c, T, md->K, md->H, idx, probs, hx);
  free(idx); free(probs); free(hx);
  c->ok = !bad;
  if (bad)
    bench_error(stage, md, T, st != MOEGEN_OK ? moegen_module_last_error(c->m)
                                              : "rows or row map differ from the CPU reference");
  return c;
}

static void teardown(permute_ctx *c) {
  gpu_free((void *)c->p.x); gpu_free(c->p.rows); gpu_free(c->u.out);
  gpu_free((void *)c->p.topk_indices); gpu_free(c->p.row_map); gpu_free((void *)c->p.probs);
  gpu_free(c->p.permuted_probs); gpu_free(c->p.offsets); gpu_free(c->p.counts);
  gpu_free(c->p.workspace);
  moegen_module_destroy(c->m);
  free(c);
}

static void run(const bench_model *md, int T, void *flush, const char *stage, bench_op_fn op) {
  permute_ctx *c = setup(md, T, stage);
  if (!c) return;
  if (c->ok) {
    float ms = bench_time_op(op, c, flush);
    double bytes = (double)T * md->H * 2 * (1 + md->K);
    char extra[96];
    snprintf(extra, sizeof extra, ", \"gbps\": %.1f, \"bytes\": %.0f", bytes / ms / 1e6, bytes);
    bench_result(stage, md, T, ms, extra);
  }
  teardown(c);
}

void bench_permute(const bench_model *md, int T, void *flush) {
  run(md, T, flush, "permute", permute_op);
}

void bench_unpermute(const bench_model *md, int T, void *flush) {
  run(md, T, flush, "unpermute", unpermute_op);
}
