/* bench stage "router_fwd_bwd": router forward (bf16 probs + bytemap +
 * intermediate) then router backward with grad_probs = ones (bf16), both
 * launches inside one timed call, as peers.py's dense.sum().backward().
 * With --router-bwd recompute the forward writes no intermediate and the
 * backward reads the logits instead. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "half.h"
#include "router_bwd_ref.h"

typedef struct fwd_bwd_ctx {
  moegen_module *m;
  moegen_router_fwd_args f;
  moegen_router_bwd_args b;
} fwd_bwd_ctx;

static moegen_status fwd_bwd_op(void *ctx, CUstream s) {
  fwd_bwd_ctx *c = ctx;
  moegen_status st = moegen_router_fwd(c->m, &c->f, s);
  return st != MOEGEN_OK ? st : moegen_router_bwd(c->m, &c->b, s);
}

/* grad_logits of the GPU within 1 bf16 ulp of the reference (computed from
 * the GPU's intermediate and map; recompute: from the state recomputed from
 * the logits and map), a check before timing. */
static int check_bwd(const moegen_config *c, int T, const fwd_bwd_ctx *x) {
  size_t TE = (size_t)T * c->experts;
  float *g = malloc(4 * TE + 4), *inter = malloc(4 * TE + 4), *want = malloc(4 * TE + 4);
  uint8_t *map = malloc(TE + 1);
  uint16_t *got = malloc(2 * TE + 2);
  gpu_get(map, x->f.routing_map, TE);
  if (x->f.intermediate) {
    gpu_get(inter, x->f.intermediate, 4 * TE);
  } else { /* g: the logits, for a moment */
    gpu_get(got, x->f.logits, 2 * TE);
    for (size_t i = 0; i < TE; i++) g[i] = bf16_to_f32(got[i]);
    router_ref_state(c, T, g, map, inter);
  }
  for (size_t i = 0; i < TE; i++) g[i] = 1.0f;
  gpu_get(got, x->b.grad_logits, 2 * TE);
  router_ref_bwd(c, T, g, inter, map, want);
  int ok = 1;
  for (size_t i = 0; i < TE && ok; i++) {
    float w = bf16_to_f32(f32_to_bf16(want[i])), v = bf16_to_f32(got[i]);
    ok = fabsf(v - w) <= 1e-6f + fabsf(want[i]) / 128;
  }
  free(g); free(inter); free(want); free(map); free(got);
  return ok;
}

void bench_router_fwd_bwd(const bench_model *md, int T, void *flush) {
  const char *stage = "router_fwd_bwd";
  fwd_bwd_ctx ctx = {.m = bench_module(md, stage, T)};
  if (!ctx.m) return;
  moegen_config c = bench_config_of(md);
  size_t TE = (size_t)T * md->E;
  uint16_t *h = malloc(2 * TE + 2);
  float *bias = malloc(4 * (size_t)md->E);
  for (size_t i = 0; i < TE; i++) h[i] = f32_to_bf16(rng_normal());
  for (int e = 0; e < md->E; e++) bias[e] = 0.1f * rng_normal();
  void *logits = gpu_alloc(2 * TE), *probs = gpu_alloc(2 * TE), *grad = gpu_alloc(2 * TE);
  void *dx = gpu_alloc(2 * TE), *map = gpu_alloc(TE);
  const int recompute = c.router_bwd == MOEGEN_ROUTER_BWD_RECOMPUTE;
  float *inter = recompute ? NULL : gpu_alloc(4 * TE), *dbias = gpu_alloc(4 * (size_t)md->E);
  gpu_put(logits, h, 2 * TE);
  for (size_t i = 0; i < TE; i++) h[i] = f32_to_bf16(1.0f);
  gpu_put(grad, h, 2 * TE);
  gpu_put(dbias, bias, 4 * (size_t)md->E);
  gpu_poison(dx, 2 * TE);
  ctx.f = (moegen_router_fwd_args){.num_tokens = T, .logits = logits,
                                   .expert_bias = md->bias ? dbias : NULL, .probs = probs,
                                   .routing_map = map, .intermediate = inter};
  ctx.b = (moegen_router_bwd_args){.num_tokens = T, .grad_probs = grad, .intermediate = inter,
                                   .logits = recompute ? logits : NULL, .routing_map = map,
                                   .grad_logits = dx};
  moegen_status st = fwd_bwd_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  } else if (!check_bwd(&c, T, &ctx)) {
    bench_error(stage, md, T, "grad_logits differs from the CPU reference");
  } else {
    float ms = bench_time_op(fwd_bwd_op, &ctx, flush);
    /* fwd: read bf16 logits, write bf16 probs + map + fp32 intermediate;
     * bwd: read bf16 grad + fp32 intermediate + map, write bf16 grad_logits
     * (recompute: no intermediate written; bf16 logits read instead) */
    double bytes = (double)TE * (2 + 2 + 1 + (recompute ? 0 : 4) + 2 + (recompute ? 2 : 4) + 1 + 2);
    char extra[128];
    snprintf(extra, sizeof extra, ", \"gbps\": %.1f, \"bytes\": %.0f%s", bytes / ms / 1e6, bytes,
             bench_router_bwd_json());
    bench_result(stage, md, T, ms, extra);
  }
  gpu_free(logits); gpu_free(probs); gpu_free(grad); gpu_free(dx); gpu_free(map);
  gpu_free(inter); gpu_free(dbias);
  free(h); free(bias);
  moegen_module_destroy(ctx.m);
}
