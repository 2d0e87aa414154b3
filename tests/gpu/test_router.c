/* GPU test: router forward against the CPU reference (tests/ref/router_ref.c)
 * for every score function and option, random and tie-heavy inputs, odd
 * sizes, partial outputs, and CUDA-graph capture and replay.
 * Exit 77 (skipped) without a device. */
#include <math.h>

#include "check.h"
#include "dtypes.h"
#include "gpu.h"
#include "moegen/moegen.h"
#include "router_ref.h"
#include "router_check.h"
#include "router_specs.h"

/* Narrow bounds so that many (token, expert) pairs clamp into the end bins. */
#define QB_BINS 37
#define QB_LO (-0.3f)
#define QB_HI 0.9f

/* Random logits (ties = 0); tie-heavy (1) draws from 5 values so many
 * experts tie; flat (2) gives every expert of a token the same logit, as a
 * router at initialization does: the most ties a token can have. */
static void make_inputs(const spec *s, int T, int ties, float *x, float *bias) {
  static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  for (size_t i = 0; i < (size_t)T * s->E; i++)
    x[i] = round_dt(s->dt, ties == 2   ? few[i / s->E % 5]
                           : ties == 1 ? few[rng_u64() % 5]
                                       : 2.0f * rng_normal());
  for (int e = 0; e < s->E; e++) bias[e] = ties ? 0.25f * (float)(rng_u64() % 2) : 0.1f * rng_normal();
}

typedef struct bufs {
  void *logits, *probs, *idx;
  float *bias, *w, *inter;
  uint8_t *map, *bitmap;
  int32_t *counts;
  moegen_index_dtype idx_dtype; /* element type of idx, varied across cases */
  int32_t *hist;                /* QB [E, QB_BINS], accumulated */
  float *bounds, *cutoff;       /* QB [2], [T] */
} bufs;

static bufs alloc_bufs(const spec *s, int T, moegen_index_dtype idx_dtype) {
  size_t TE = (size_t)T * s->E, TK = (size_t)T * s->K, TB = (size_t)T * ((s->E + 7) / 8);
  bufs b = {.logits = gpu_alloc(TE * dt_size(s->dt)), .probs = gpu_alloc(TE * dt_size(s->dt)),
            .idx = gpu_alloc(idx_size(idx_dtype) * TK), .bias = gpu_alloc(4 * (size_t)s->E),
            .w = gpu_alloc(4 * TK), .inter = gpu_alloc(4 * TE), .map = gpu_alloc(TE),
            .bitmap = gpu_alloc(TB), .counts = gpu_alloc(4 * (size_t)s->E),
            .idx_dtype = idx_dtype, .hist = gpu_alloc(4 * (size_t)s->E * QB_BINS),
            .bounds = gpu_alloc(8), .cutoff = gpu_alloc(4 * (size_t)T)};
  const float lohi[2] = {QB_LO, QB_HI};
  gpu_put(b.bounds, lohi, sizeof lohi);
  return b;
}

static void free_bufs(bufs *b) {
  gpu_free(b->logits); gpu_free(b->probs); gpu_free(b->bias); gpu_free(b->w);
  gpu_free(b->inter); gpu_free(b->map); gpu_free(b->bitmap); gpu_free(b->idx);
  gpu_free(b->counts); gpu_free(b->hist); gpu_free(b->bounds); gpu_free(b->cutoff);
}

/* Uploads x/bias, poisons outputs. */
static void stage(const spec *s, int T, const bufs *b, const float *x, const float *bias) {
  size_t TE = (size_t)T * s->E, TK = (size_t)T * s->K;
  void *hx = malloc(TE * dt_size(s->dt) + 1);
  for (size_t i = 0; i < TE; i++) write_dt(s->dt, hx, i, x[i]);
  gpu_put(b->logits, hx, TE * dt_size(s->dt));
  gpu_put(b->bias, bias, 4 * (size_t)s->E);
  gpu_poison(b->probs, TE * dt_size(s->dt));
  gpu_poison(b->map, TE);
  gpu_poison(b->bitmap, (size_t)T * ((s->E + 7) / 8));
  gpu_poison(b->inter, 4 * TE);
  gpu_poison(b->idx, idx_size(b->idx_dtype) * TK);
  gpu_poison(b->w, 4 * TK);
  gpu_poison(b->counts, 4 * (size_t)s->E);
  gpu_poison(b->cutoff, 4 * (size_t)T);
  free(hx);
}

/* Downloads every output and compares it with the reference. */
static void verify(const spec *s, int T, const bufs *b, const float *x, const float *bias,
                   int partial) {
  int E = s->E, K = s->K;
  size_t TE = (size_t)T * E, TK = (size_t)T * K;
  uint8_t *gm = malloc(TE + 1), *gb = malloc((size_t)T * ((E + 7) / 8) + 1);
  int32_t gc[MOEGEN_MAX_EXPERTS];
  void *gx = malloc(8 * TK + 8), *gp = malloc(TE * dt_size(s->dt) + 4);
  float *gw = malloc(4 * TK + 4), *gi = malloc(4 * TE + 4), *gcut = malloc(4 * (size_t)T + 4);
  gpu_get(gc, b->counts, 4 * (size_t)E);
  router_host_outputs g = {.counts = gc};
  if (!partial) {
    gpu_get(gm, b->map, TE);
    gpu_get(gb, b->bitmap, (size_t)T * ((E + 7) / 8));
    gpu_get(gx, b->idx, idx_size(b->idx_dtype) * TK);
    gpu_get(gw, b->w, 4 * TK);
    gpu_get(gi, b->inter, 4 * TE);
    gpu_get(gp, b->probs, TE * dt_size(s->dt));
    if (s->qb) gpu_get(gcut, b->cutoff, 4 * (size_t)T);
    g = (router_host_outputs){.counts = gc, .map = gm, .bitmap = gb, .idx = gx,
                              .idx_dtype = b->idx_dtype, .weights = gw, .inter = gi,
                              .probs = gp, .cutoff = gcut};
  }
  failures += router_compare(s, T, x, bias, &g);
  free(gm); free(gb); free(gx); free(gp); free(gw); free(gi); free(gcut);
}

static moegen_router_fwd_args args_of(const spec *s, int T, const bufs *b, int partial) {
  moegen_router_fwd_args a = {.num_tokens = T, .logits = b->logits,
                              .expert_bias = s->bias ? b->bias : NULL,
                              .expert_counts = b->counts};
  if (!partial) {
    a.probs = b->probs;
    a.routing_map = b->map;
    a.routing_bitmap = b->bitmap;
    a.topk_indices = b->idx;
    a.index_dtype = b->idx_dtype;
    a.topk_weights = b->w;
    a.intermediate = b->inter;
    if (s->qb) a.qb_cutoff = b->cutoff;
  }
  if (s->qb) {
    a.qb_histogram = b->hist;
    a.qb_bins = QB_BINS;
    a.qb_bounds = b->bounds;
  }
  return a;
}

static void run_case(moegen_module *m, const spec *s, int T, int ties, int partial) {
  float *x = malloc(4 * (size_t)T * s->E + 4), *bias = malloc(4 * (size_t)s->E);
  bufs b = alloc_bufs(s, T, (moegen_index_dtype)(rng_u64() % 3));
  make_inputs(s, T, ties, x, bias);
  stage(s, T, &b, x, bias);
  moegen_router_fwd_args a = args_of(s, T, &b, partial);
  moegen_status st = moegen_router_fwd(m, &a, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL: router_fwd: %s: %s\n", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuCtxSynchronize());
    verify(s, T, &b, x, bias, partial);
  }
  free_bufs(&b);
  free(x);
  free(bias);
}

/* Quantile balancing: two calls of different T into one histogram that
 * starts from random counts; the result must equal start + the reference bins
 * of both calls, exactly (binned from the kernel's own scores and cutoffs,
 * which verify() compares with the reference). */
static void qb_case(moegen_module *m, const spec *s, int T1, int T2, int ties) {
  size_t HB = (size_t)s->E * QB_BINS;
  int32_t *want = malloc(4 * HB), *got = malloc(4 * HB), *hist = gpu_alloc(4 * HB);
  for (size_t i = 0; i < HB; i++) want[i] = (int32_t)(rng_u64() % 1000);
  gpu_put(hist, want, 4 * HB);
  const int Ts[2] = {T1, T2};
  int bad_bounds = moegen_router_qb_check_bounds(m, NULL, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  for (int call = 0; call < 2; call++) {
    int T = Ts[call];
    float *x = malloc(4 * (size_t)T * s->E + 4), *bias = malloc(4 * (size_t)s->E);
    float *inter = malloc(4 * (size_t)T * s->E + 4), *cut = malloc(4 * (size_t)T + 4);
    bufs b = alloc_bufs(s, T, MOEGEN_INDEX_INT32);
    make_inputs(s, T, ties, x, bias);
    stage(s, T, &b, x, bias);
    bad_bounds |= moegen_router_qb_check_bounds(m, b.bounds, NULL) != MOEGEN_OK;
    moegen_router_fwd_args a = args_of(s, T, &b, 0);
    a.qb_histogram = hist;
    moegen_status st = moegen_router_fwd(m, &a, NULL);
    if (st != MOEGEN_OK) {
      printf("  FAIL: router_fwd (qb): %s\n", moegen_module_last_error(m));
      failures++;
    }
    CU(gpu_drv->cuCtxSynchronize());
    verify(s, T, &b, x, bias, 0);
    gpu_get(inter, b.inter, 4 * (size_t)T * s->E);
    gpu_get(cut, b.cutoff, 4 * (size_t)T);
    router_ref_qb_hist(s->E, T, QB_BINS, QB_LO, QB_HI, inter, cut, want);
    free_bufs(&b);
    free(x); free(bias); free(inter); free(cut);
  }
  const float same[2] = {1.0f, 1.0f};
  float *dsame = gpu_alloc(8);
  gpu_put(dsame, same, 8);
  bad_bounds |= moegen_router_qb_check_bounds(m, dsame, NULL) != MOEGEN_ERR_INVALID_ARGUMENT;
  gpu_free(dsame);
  gpu_get(got, hist, 4 * HB);
  gpu_free(hist);
  size_t i = 0;
  while (i < HB && got[i] == want[i]) i++;
  if (i < HB)
    printf("  FAIL: qb histogram[%zu, %zu] = %d, want %d\n", i / QB_BINS, i % QB_BINS, got[i],
           want[i]);
  if (bad_bounds) printf("  FAIL: moegen_router_qb_check_bounds misjudged bounds\n");
  failures += (i < HB) + bad_bounds;
  free(want);
  free(got);
}

/* Capture one forward into a graph; replay it on fresh inputs twice. */
static void graph_case(moegen_module *m, const spec *s, int T) {
  float *x = malloc(4 * (size_t)T * s->E + 4), *bias = malloc(4 * (size_t)s->E);
  bufs b = alloc_bufs(s, T, MOEGEN_INDEX_INT64);
  CUstream stream;
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
  moegen_router_fwd_args a = args_of(s, T, &b, 0);
  CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  moegen_status st = moegen_router_fwd(m, &a, stream);
  CU(gpu_drv->cuStreamEndCapture(stream, &g));
  if (st != MOEGEN_OK) {
    printf("  FAIL: router_fwd under capture: %s\n", moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 2; rep++) {
      make_inputs(s, T, rep, x, bias);
      stage(s, T, &b, x, bias);
      gpu_replay(ge, stream);
      verify(s, T, &b, x, bias, 0);
    }
    CU(gpu_drv->cuGraphExecDestroy(ge));
  }
  CU(gpu_drv->cuGraphDestroy(g));
  CU(gpu_drv->cuStreamDestroy(stream));
  free_bufs(&b);
  free(x);
  free(bias);
}


#ifdef MOEGEN_TEST_AOT
/* Built against the AOT output of `moegen --preset deepseek-v3 --name ds3`:
 * the embedded cubin must behave as the JIT module of specs[0]. */
#include "ds3.h"
static const size_t num_specs = 1;
static moegen_module *module_for(const spec *s) {
  moegen_module *m = NULL;
  moegen_error err = {0};
  return test_module(ds3_module_create(&m), &m, &err, 1u << MOEGEN_UNIT_ROUTER, s->what);
}
#else
static const size_t num_specs = ROUTER_SPECS;
static moegen_module *module_for(const spec *s) {
  moegen_config c = config_of(s);
  return test_jit(&c, 1u << MOEGEN_UNIT_ROUTER, s->what);
}
#endif

/* T = 0 with NULL data pointers: OK, expert_counts zeroed; without it a no-op. */
static void empty_case(moegen_module *m) {
  const moegen_router_plan *p = &moegen_module_image(m)->router;
  const size_t bytes = 4 * (size_t)p->experts;
  int32_t *counts = gpu_alloc(bytes), *host = malloc(bytes);
  gpu_poison(counts, bytes);
  moegen_router_fwd_args a = {.expert_counts = counts, .qb_bins = p->qb ? 8 : 0};
  moegen_status st = moegen_router_fwd(m, &a, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  gpu_get(host, counts, bytes);
  int nonzero = 0;
  for (int e = 0; e < p->experts; e++) nonzero += host[e] != 0;
  a.expert_counts = NULL;
  moegen_status st0 = moegen_router_fwd(m, &a, NULL);
  gpu_free(counts);
  free(host);
  CHECK(st == MOEGEN_OK && st0 == MOEGEN_OK, "T = 0, NULL pointers: %s / %s: %s",
        moegen_status_string(st), moegen_status_string(st0), moegen_module_last_error(m));
  CHECK(nonzero == 0, "T = 0: %d expert_counts not zeroed", nonzero);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {0, 1, 33, 777, 4099};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, sizeof own_tokens / sizeof own_tokens[0], tokens);
  for (size_t i = 0; i < num_specs; i++) {
    const spec *s = &router_specs[i];
    moegen_module *m = module_for(s);
    if (!m) continue;
    int before = failures;
    for (int t = 0; t < nt; t++)
      for (int ties = 0; ties < 3; ties++) run_case(m, s, tokens[t], ties, 0);
    run_case(m, s, gpu_token(1000), 0, 1); /* counts only */
    empty_case(m);
    if (s->qb) {
      qb_case(m, s, gpu_token(777), gpu_token(33), 0);
      qb_case(m, s, gpu_token(100), gpu_token(1), 1); /* ties at the cutoff */
    }
    if (i == 0) graph_case(m, s, gpu_token(513));
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", s->what);
    moegen_module_destroy(m);
  }
  printf("%s\n", failures ? "router GPU test FAILED" : "router GPU test passed");
  return failures ? 1 : 0;
}
