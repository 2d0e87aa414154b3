/* bench stage "router": router forward with dense outputs (bf16 probs +
 * bytemap), as peers.py's stage_router times its peers. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "half.h"
#include "router_ref.h"

typedef struct router_ctx {
  moegen_module *m;
  moegen_router_fwd_args a;
} router_ctx;

static moegen_status router_op(void *ctx, CUstream s) {
  router_ctx *c = ctx;
  return moegen_router_fwd(c->m, &c->a, s);
}

/* Routing map of the GPU equals the reference's (a check before timing).
 * Returns 1 if so; else 0 and, in why, the first differing entry. */
static int check_router(const moegen_config *c, int T, const float *x, const float *bias,
                        const uint8_t *dev_map, char *why, size_t why_size) {
  size_t TE = (size_t)T * c->experts;
  uint8_t *want = malloc(TE + 1), *got = malloc(TE + 1);
  router_ref_fwd(c, T, x, bias, NULL, want, NULL, NULL, NULL, NULL);
  gpu_get(got, dev_map, TE);
  size_t i = 0;
  while (i < TE && want[i] == got[i]) i++;
  if (i < TE)
    snprintf(why, why_size, "routing map differs from the CPU reference at token %zu, expert %zu: "
             "%d, want %d (logit %.9g)", i / c->experts, i % c->experts, got[i], want[i], x[i]);
  free(want);
  free(got);
  return i == TE;
}

void bench_router(const bench_model *md, int T, void *flush) {
  router_ctx ctx = {.m = bench_module(md, "router", T)};
  if (!ctx.m) return;
  moegen_config c = bench_config_of(md);
  size_t TE = (size_t)T * md->E;
  float *x = malloc(4 * TE + 4), *bias = malloc(4 * (size_t)md->E);
  uint16_t *hx = malloc(2 * TE + 2);
  for (size_t i = 0; i < TE; i++) {
    hx[i] = f32_to_bf16(rng_normal());
    x[i] = bf16_to_f32(hx[i]);
  }
  for (int e = 0; e < md->E; e++) bias[e] = 0.1f * rng_normal();
  void *logits = gpu_alloc(2 * TE), *probs = gpu_alloc(2 * TE), *map = gpu_alloc(TE);
  float *dbias = gpu_alloc(4 * (size_t)md->E);
  gpu_put(logits, hx, 2 * TE);
  gpu_put(dbias, bias, 4 * (size_t)md->E);
  gpu_poison(map, TE);
  ctx.a = (moegen_router_fwd_args){.num_tokens = T, .logits = logits,
                                   .expert_bias = md->bias ? dbias : NULL,
                                   .probs = probs, .routing_map = map};
  moegen_status st = router_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  char why[192];
  if (st != MOEGEN_OK) {
    bench_error("router", md, T, moegen_status_string(st));
  } else if (!check_router(&c, T, x, md->bias ? bias : NULL, map, why, sizeof why)) {
    bench_error("router", md, T, why);
  } else {
    float ms = bench_time_op(router_op, &ctx, flush);
    double bytes = (double)TE * (2 + 2 + 1); /* read bf16 logits; write bf16 probs + map */
    char extra[96];
    snprintf(extra, sizeof extra, ", \"gbps\": %.1f, \"bytes\": %.0f", bytes / ms / 1e6, bytes);
    bench_result("router", md, T, ms, extra);
  }
  gpu_free(logits); gpu_free(probs); gpu_free(map); gpu_free(dbias);
  free(x); free(bias); free(hx);
  moegen_module_destroy(ctx.m);
}
