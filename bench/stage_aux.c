/* bench stage "aux_loss": the aux loss forward on probs [T,E] fp32 with int32
 * tokens_per_expert and a host N = T (peers.py has no peer for it). */
#include <stdlib.h>

#include "aux_ref.h"
#include "bench.h"

typedef struct aux_ctx {
  moegen_module *m;
  moegen_aux_loss_fwd_args a;
} aux_ctx;

static moegen_status aux_op(void *ctx, CUstream s) {
  aux_ctx *c = ctx;
  return moegen_aux_loss_fwd(c->m, &c->a, s);
}

void bench_aux_loss(const bench_model *md, int T, void *flush) {
  const char *stage = "aux_loss";
  aux_ctx ctx = {.m = bench_module(md, stage, T)};
  if (!ctx.m) return;
  size_t TE = (size_t)T * md->E;
  float *p = malloc(4 * TE + 4), *tpe = malloc(4 * (size_t)md->E);
  int32_t *counts = malloc(4 * (size_t)md->E);
  for (size_t i = 0; i < TE; i++) p[i] = rng_uniform();
  for (int e = 0; e < md->E; e++) tpe[e] = (float)(counts[e] = (int32_t)(rng_u64() % (uint64_t)(T + 1)));
  moegen_aux_loss_shape sh;
  moegen_aux_loss_shape_of(moegen_module_image(ctx.m), T, md->E, &sh);
  void *dp = gpu_alloc(4 * TE), *dt = gpu_alloc(4 * (size_t)md->E), *ws = gpu_alloc(sh.workspace_bytes);
  float *aux = gpu_alloc(16);
  gpu_put(dp, p, 4 * TE);
  gpu_put(dt, counts, 4 * (size_t)md->E);
  ctx.a = (moegen_aux_loss_fwd_args){.rows = T, .cols = md->E, .probs = dp,
                                     .tokens_per_expert = dt, .tpe_dtype = MOEGEN_COUNT_INT32,
                                     .total_num_tokens = T > 0 ? T : 1, .num_experts = md->E,
                                     .topk = md->K, .coeff = 1e-3f, .aux_loss = aux,
                                     .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  moegen_status st = aux_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  float got = 0;
  gpu_get(&got, aux, 4);
  float cc = aux_ref_loss_const(md->E, md->K, 1e-3f, T > 0 ? T : 1);
  double want = aux_ref_loss_fwd(T, md->E, p, tpe, cc);
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_module_last_error(ctx.m));
  } else if (fabs(got - want) > 1e-5 + 1e-4 * fabs(want)) {
    bench_error(stage, md, T, "aux loss differs from the CPU reference");
  } else {
    float ms = bench_time_op(aux_op, &ctx, flush);
    double bytes = (double)TE * 4 + 4.0 * md->E; /* read fp32 probs + int32 counts */
    char extra[96];
    snprintf(extra, sizeof extra, ", \"gbps\": %.1f, \"bytes\": %.0f", bytes / ms / 1e6, bytes);
    bench_result(stage, md, T, ms, extra);
  }
  gpu_free(dp); gpu_free(dt); gpu_free(ws); gpu_free(aux);
  free(p); free(tpe); free(counts);
  moegen_module_destroy(ctx.m);
}
