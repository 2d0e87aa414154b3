/* moegen-bench: times moegen's ops on the GPU and prints one JSON line per
 * (stage, model, tokens) in the schema of shared/peers/peers.py
 * ({"stage", "peer": "moegen", "model", "tokens", "ms", "gbps", ...}), so
 * shared/peers/compare.py can put it beside the PyTorch peers.
 *
 * Method (same as peers.py's triton do_bench): per call, flush L2 by
 * writing a 256 MiB buffer, time the call alone with events, take the median
 * of 200 calls after 20 warm-ups. Each configuration is checked against
 * the CPU reference before it is timed.
 *
 * Usage: moegen-bench [--models a,b] [--tokens 256,4096,16384] [--stages router]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/gpu/gpu.h"
#include "half.h"
#include "moegen/moegen.h"
#include "router_ref.h"

/* The shapes of peers.py's MODELS (same score functions and options). */
typedef struct model {
  const char *name;
  int E, K, H, F, groups, group_topk, bias, pre_softmax;
  moegen_score score;
  double scaling;
} model;

static const model models[] = {
    {"deepseek-v3", 256, 8, 7168, 2048, 8, 4, 1, 0, MOEGEN_SCORE_SIGMOID, 2.5},
    {"qwen3-30b-a3b", 128, 8, 2048, 768, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"mixtral-8x7b", 8, 2, 4096, 14336, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"gpt-oss-120b", 128, 4, 2880, 2880, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
};

#define REPS 200
#define WARMUP 20
#define FLUSH_BYTES (256u << 20)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

typedef moegen_status (*op_fn)(void *ctx, CUstream s);

/* Median ms of one call of op, L2 flushed before each. */
static float time_op(op_fn op, void *ctx, void *flush) {
  CUevent ev[2 * REPS];
  for (int i = 0; i < 2 * REPS; i++) CU(gpu_drv->cuEventCreate(&ev[i], 0));
  for (int i = 0; i < WARMUP; i++) op(ctx, NULL);
  for (int i = 0; i < REPS; i++) {
    CU(gpu_drv->cuMemsetD8Async((CUdeviceptr)(uintptr_t)flush, (unsigned char)i, FLUSH_BYTES, NULL));
    CU(gpu_drv->cuEventRecord(ev[2 * i], NULL));
    op(ctx, NULL);
    CU(gpu_drv->cuEventRecord(ev[2 * i + 1], NULL));
  }
  CU(gpu_drv->cuCtxSynchronize());
  float ms[REPS];
  for (int i = 0; i < REPS; i++) CU(gpu_drv->cuEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (int i = 0; i < 2 * REPS; i++) gpu_drv->cuEventDestroy(ev[i]);
  qsort(ms, REPS, sizeof ms[0], cmp_float);
  return ms[REPS / 2];
}

typedef struct router_ctx {
  moegen_module *m;
  moegen_router_fwd_args a;
} router_ctx;

static moegen_status router_op(void *ctx, CUstream s) {
  router_ctx *c = ctx;
  return moegen_router_fwd(c->m, &c->a, s);
}

static moegen_config config_of(const model *md) {
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "%s", md->name);
  c.experts = md->E;
  c.topk = md->K;
  c.hidden = md->H;
  c.ffn = md->F;
  c.score = md->score;
  c.pre_softmax = md->pre_softmax;
  c.groups = md->groups;
  c.group_topk = md->group_topk;
  c.expert_bias = md->bias;
  c.scaling = md->scaling;
  c.logits_dtype = MOEGEN_DTYPE_BF16;
  return c;
}

/* Routing map of the GPU equals the reference's (a check before timing). */
static int check_router(const moegen_config *c, int T, const float *x, const float *bias,
                        const uint8_t *dev_map) {
  size_t TE = (size_t)T * c->experts;
  uint8_t *want = malloc(TE), *got = malloc(TE);
  router_ref_fwd(c, T, x, bias, NULL, want, NULL, NULL, NULL, NULL);
  gpu_get(got, dev_map, TE);
  int ok = memcmp(want, got, TE) == 0;
  free(want);
  free(got);
  return ok;
}

static void bench_router(const model *md, int T, void *flush) {
  moegen_config c = config_of(md);
  moegen_error err = {0};
  router_ctx ctx = {0};
  moegen_status st = moegen_jit(&c, NULL, &ctx.m, &err);
  if (st == MOEGEN_OK) st = moegen_module_load(ctx.m);
  if (st != MOEGEN_OK) {
    printf("{\"stage\": \"router\", \"peer\": \"moegen\", \"model\": \"%s\", \"tokens\": %d, "
           "\"error\": \"%s\"}\n", md->name, T, moegen_status_string(st));
    moegen_module_destroy(ctx.m);
    return;
  }
  size_t TE = (size_t)T * md->E;
  float *x = malloc(4 * TE), *bias = malloc(4 * (size_t)md->E);
  uint16_t *hx = malloc(2 * TE);
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
  st = router_op(&ctx, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  if (st != MOEGEN_OK || !check_router(&c, T, x, md->bias ? bias : NULL, map)) {
    printf("{\"stage\": \"router\", \"peer\": \"moegen\", \"model\": \"%s\", \"tokens\": %d, "
           "\"error\": \"output differs from the CPU reference\"}\n", md->name, T);
  } else {
    float ms = time_op(router_op, &ctx, flush);
    double bytes = (double)TE * (2 + 2 + 1); /* read bf16 logits; write bf16 probs + map */
    printf("{\"stage\": \"router\", \"peer\": \"moegen\", \"model\": \"%s\", \"tokens\": %d, "
           "\"ms\": %.6f, \"gbps\": %.1f, \"bytes\": %.0f}\n", md->name, T, ms, bytes / ms / 1e6, bytes);
  }
  fflush(stdout);
  gpu_free(logits); gpu_free(probs); gpu_free(map); gpu_free(dbias);
  free(x); free(bias); free(hx);
  moegen_module_destroy(ctx.m);
}

static int listed(const char *list, const char *name) {
  if (!list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *model_list = NULL, *token_list = "256,4096,16384", *stages = "router";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--models") && i + 1 < argc) model_list = argv[++i];
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) token_list = argv[++i];
    else if (!strcmp(argv[i], "--stages") && i + 1 < argc) stages = argv[++i];
    else {
      fprintf(stderr, "usage: moegen-bench [--models a,b] [--tokens 256,4096] [--stages router]\n");
      return 64;
    }
  }
  gpu_init_or_skip();
  rng_seed();
  void *flush = gpu_alloc(FLUSH_BYTES);
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    if (!listed(model_list, models[i].name)) continue;
    for (const char *p = token_list; *p;) {
      int T = (int)strtol(p, (char **)&p, 10);
      if (*p == ',') p++;
      if (listed(stages, "router")) bench_router(&models[i], T, flush);
    }
  }
  gpu_free(flush);
  return 0;
}
