/* GPU test: router backward against the CPU reference
 * (tests/ref/router_bwd_ref.c) for every score function and option, every
 * routing format (bytemap, bitmap, int16/int32/int64 indices; results must
 * be bit-identical), dense and compact (grad_weights) grads, random and
 * tie-heavy inputs, odd sizes, poisoned outputs, both router_bwd modes.
 * The forward (moegen_router_fwd, tested by test_router.c) of the saved
 * module makes the saved state; the reference takes the GPU's intermediate
 * and map. The module of the same config with router_bwd = recompute routes
 * the same logits identically without an intermediate (which it refuses),
 * its backward reads the logits, and its grads must match the reference
 * fed the state recomputed on the host from the logits and map
 * (router_ref_state), and the saved module's grads within twice the
 * tolerance (both are within it of one reference).
 * Exit 77 (skipped) without a device. */
#include "check.h"
#include "dtypes.h"
#include "gpu.h"
#include "moegen/moegen.h"
#include "router_bwd_ref.h"
#include "router_spec.h"

/* The routing formats the backward takes. */
enum { FMT_BYTEMAP, FMT_BITMAP, FMT_IDX16, FMT_IDX32, FMT_IDX64, NUM_FMTS };
static const char *const fmt_names[NUM_FMTS] = {"bytemap", "bitmap", "int16 indices",
                                               "int32 indices", "int64 indices"};

/* Device state of one case: the forward's outputs and the backward's inputs. */
typedef struct bufs {
  void *logits, *probs, *grad, *out[NUM_FMTS], *outr[NUM_FMTS]; /* outr: recompute's */
  float *bias, *w, *inter, *gw;
  uint8_t *map, *bitmap, *mapr; /* mapr: the recompute module's forward */
  void *idx[3]; /* int16, int32, int64 */
} bufs;

static const moegen_index_dtype idx_dtypes[3] = {MOEGEN_INDEX_INT16, MOEGEN_INDEX_INT32,
                                                 MOEGEN_INDEX_INT64};

static bufs alloc_bufs(const spec *s, int T) {
  size_t TE = (size_t)T * s->E, TK = (size_t)T * s->K, es = dt_size(s->dt);
  bufs b = {.logits = gpu_alloc(TE * es), .probs = gpu_alloc(TE * es), .grad = gpu_alloc(TE * es),
            .bias = gpu_alloc(4 * (size_t)s->E), .w = gpu_alloc(4 * TK),
            .inter = gpu_alloc(4 * TE), .gw = gpu_alloc(4 * TK), .map = gpu_alloc(TE),
            .mapr = gpu_alloc(TE),
            .bitmap = gpu_alloc((size_t)T * ((s->E + 7) / 8)),
            .idx = {gpu_alloc(2 * TK), gpu_alloc(4 * TK), gpu_alloc(8 * TK)}};
  for (int f = 0; f < NUM_FMTS; f++) b.out[f] = gpu_alloc(TE * es), b.outr[f] = gpu_alloc(TE * es);
  return b;
}

static void free_bufs(bufs *b) {
  gpu_free(b->logits); gpu_free(b->probs); gpu_free(b->grad); gpu_free(b->bias);
  gpu_free(b->w); gpu_free(b->inter); gpu_free(b->gw); gpu_free(b->map); gpu_free(b->bitmap);
  gpu_free(b->mapr);
  for (int i = 0; i < 3; i++) gpu_free(b->idx[i]);
  for (int f = 0; f < NUM_FMTS; f++) gpu_free(b->out[f]), gpu_free(b->outr[f]);
}

/* Random logits (tie-heavy: 5 values) and bias; runs the saved module m's
 * forward into b, and the recompute module mr's (no intermediate) into
 * b->mapr, which must equal b->map. */
static int forward(moegen_module *m, moegen_module *mr, const spec *s, int T, int ties,
                   const bufs *b) {
  static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  size_t TE = (size_t)T * s->E, es = dt_size(s->dt);
  void *hx = malloc(TE * es + 4);
  float *bias = malloc(4 * (size_t)s->E);
  for (size_t i = 0; i < TE; i++) write_dt(s->dt, hx, i, ties ? few[rng_u64() % 5] : 2.0f * rng_normal());
  for (int e = 0; e < s->E; e++) bias[e] = ties ? 0.25f * (float)(rng_u64() % 2) : 0.1f * rng_normal();
  gpu_put(b->logits, hx, TE * es);
  gpu_put(b->bias, bias, 4 * (size_t)s->E);
  free(hx);
  free(bias);
  moegen_router_fwd_args a = {.num_tokens = T, .logits = b->logits,
                              .expert_bias = s->bias ? b->bias : NULL, .probs = b->probs,
                              .routing_map = b->map, .routing_bitmap = b->bitmap,
                              .topk_indices = b->idx[1], .index_dtype = MOEGEN_INDEX_INT32,
                              .topk_weights = b->w, .intermediate = b->inter};
  moegen_status st = moegen_router_fwd(m, &a, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL: router_fwd: %s: %s\n", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
    return -1;
  }
  gpu_poison(b->mapr, (size_t)T * s->E);
  moegen_router_fwd_args ar = {.num_tokens = T, .logits = b->logits,
                               .expert_bias = s->bias ? b->bias : NULL, .routing_map = b->mapr};
  st = moegen_router_fwd(mr, &ar, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL: router_fwd (recompute): %s: %s\n", moegen_status_string(st),
           moegen_module_last_error(mr));
    failures++;
    return -1;
  }
  CU(gpu_drv->cuCtxSynchronize());
  uint8_t *h = malloc(2 * TE + 2);
  gpu_get(h, b->map, TE);
  gpu_get(h + TE, b->mapr, TE);
  int same = memcmp(h, h + TE, TE) == 0;
  free(h);
  if (!same) {
    printf("  FAIL: the recompute module's forward routes otherwise than the saved one's\n");
    failures++;
    return -1;
  }
  return 0;
}

/* int16 and int64 copies of the forward's int32 indices. */
static void widen_indices(const spec *s, int T, const bufs *b) {
  size_t TK = (size_t)T * s->K;
  int32_t *i32 = malloc(4 * TK + 4);
  int16_t *i16 = malloc(2 * TK + 2);
  int64_t *i64 = malloc(8 * TK + 8);
  gpu_get(i32, b->idx[1], 4 * TK);
  for (size_t i = 0; i < TK; i++) {
    i16[i] = (int16_t)i32[i];
    i64[i] = i32[i];
  }
  gpu_put(b->idx[0], i16, 2 * TK);
  gpu_put(b->idx[2], i64, 8 * TK);
  free(i32); free(i16); free(i64);
}

/* Runs the backward with routing format f into b->out[f] (recompute: of
 * the recompute module, from the logits, into b->outr[f]; poisoned first). */
static int backward(moegen_module *m, const spec *s, int T, const bufs *b, int f, int compact,
                    int recompute) {
  size_t TE = (size_t)T * s->E;
  void *out = recompute ? b->outr[f] : b->out[f];
  gpu_poison(out, TE * dt_size(s->dt));
  moegen_router_bwd_args a = {.num_tokens = T, .grad_logits = out};
  if (recompute) a.logits = b->logits;
  else a.intermediate = b->inter;
  if (compact) a.grad_weights = b->gw;
  else a.grad_probs = b->grad;
  if (f == FMT_BYTEMAP) a.routing_map = b->map;
  else if (f == FMT_BITMAP) a.routing_bitmap = b->bitmap;
  else {
    a.topk_indices = b->idx[f - FMT_IDX16];
    a.index_dtype = idx_dtypes[f - FMT_IDX16];
  }
  moegen_status st = moegen_router_bwd(m, &a, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL: router_bwd (%s%s%s): %s: %s\n", fmt_names[f], compact ? ", compact" : "",
           recompute ? ", recompute" : "", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
    return -1;
  }
  return 0;
}

/* The dense grad the reference sees: the uploaded grad, or for compact
 * grads the grad_weights scattered over the indices. */
static void host_grad(const spec *s, int T, const bufs *b, int compact, float *g) {
  size_t TE = (size_t)T * s->E, TK = (size_t)T * s->K;
  if (!compact) {
    void *h = malloc(TE * dt_size(s->dt) + 4);
    gpu_get(h, b->grad, TE * dt_size(s->dt));
    for (size_t i = 0; i < TE; i++) g[i] = read_dt(s->dt, h, i);
    free(h);
    return;
  }
  float *w = malloc(4 * TK + 4);
  int32_t *idx = malloc(4 * TK + 4);
  gpu_get(w, b->gw, 4 * TK);
  gpu_get(idx, b->idx[1], 4 * TK);
  memset(g, 0, 4 * TE);
  for (size_t i = 0; i < TK; i++) g[i / s->K * s->E + idx[i]] = w[i];
  free(w);
  free(idx);
}

/* All formats bit-identical to the first one's result, which matches the
 * reference (recompute: fed the state recomputed from the logits) and, for
 * recompute, the saved module's result (verified before) within close_pair. */
static void verify(const spec *s, int T, const bufs *b, int compact, int recompute) {
  moegen_config c = config_of(s);
  size_t TE = (size_t)T * s->E, bytes = TE * dt_size(s->dt);
  float *g = malloc(4 * TE + 4), *inter = malloc(4 * TE + 4), *want = malloc(4 * TE + 4);
  uint8_t *map = malloc(TE + 1);
  void *got = malloc(bytes + 4), *other = malloc(bytes + 4);
  const char *mode = recompute ? ", recompute" : "";
  host_grad(s, T, b, compact, g);
  gpu_get(map, b->map, TE);
  if (recompute) { /* other: the logits, for a moment */
    float *x = malloc(4 * TE + 4);
    gpu_get(other, b->logits, bytes);
    for (size_t i = 0; i < TE; i++) x[i] = read_dt(s->dt, other, i);
    router_ref_state(&c, T, x, map, inter);
    free(x);
  } else {
    gpu_get(inter, b->inter, 4 * TE);
  }
  router_ref_bwd(&c, T, g, inter, map, want);
  void *const *out = recompute ? b->outr : b->out;
  int first = compact ? FMT_IDX16 : FMT_BYTEMAP;
  gpu_get(got, out[first], bytes);
  int bad = 0;
  for (size_t i = 0; i < TE && bad < 1; i++) {
    float x = read_dt(s->dt, got, i);
    if (!close_dt(s->dt, x, want[i], s->E)) {
      printf("  FAIL: grad_logits[%zu,%zu] (%s%s%s) = %.9g, want %.9g\n", i / s->E, i % s->E,
             fmt_names[first], compact ? ", compact" : "", mode, x, want[i]);
      failures++;
      bad++;
    }
  }
  for (int f = first + 1; f < NUM_FMTS && !bad; f++) {
    gpu_get(other, out[f], bytes);
    if (memcmp(got, other, bytes)) {
      printf("  FAIL: grad_logits with %s differs from %s%s (must be bit-identical)\n",
             fmt_names[f], fmt_names[first], mode);
      failures++;
      bad++;
    }
  }
  if (recompute && !bad) {
    gpu_get(other, b->out[first], bytes);
    for (size_t i = 0; i < TE && !bad; i++) {
      float x = read_dt(s->dt, got, i), y = read_dt(s->dt, other, i);
      if (!close_pair(s->dt, x, y, s->E)) {
        printf("  FAIL: grad_logits[%zu,%zu] (%s%s): recompute %.9g, saved %.9g\n", i / s->E,
               i % s->E, fmt_names[first], compact ? ", compact" : "", x, y);
        failures++;
        bad++;
      }
    }
  }
  free(g); free(inter); free(want); free(map); free(got); free(other);
}

static void run_case(moegen_module *m, moegen_module *mr, const spec *s, int T, int ties) {
  bufs b = alloc_bufs(s, T);
  size_t TE = (size_t)T * s->E, TK = (size_t)T * s->K, es = dt_size(s->dt);
  if (forward(m, mr, s, T, ties, &b) == 0) {
    widen_indices(s, T, &b);
    void *hg = malloc(TE * es + 4);
    float *hw = malloc(4 * TK + 4);
    for (size_t i = 0; i < TE; i++) write_dt(s->dt, hg, i, rng_normal());
    for (size_t i = 0; i < TK; i++) hw[i] = rng_normal();
    gpu_put(b.grad, hg, TE * es);
    gpu_put(b.gw, hw, 4 * TK);
    free(hg);
    free(hw);
    for (int compact = 0; compact < 2; compact++) {
      int ok = 1;
      for (int recompute = 0; recompute < 2 && ok; recompute++)
        for (int f = compact ? FMT_IDX16 : FMT_BYTEMAP; f < NUM_FMTS && ok; f++)
          ok = backward(recompute ? mr : m, s, T, &b, f, compact, recompute) == 0;
      if (!ok) break;
      CU(gpu_drv->cuCtxSynchronize());
      verify(s, T, &b, compact, 0);
      verify(s, T, &b, compact, 1);
    }
  }
  free_bufs(&b);
}

/* Argument checks: bad combinations are refused with a message, no launch. */
static void arg_checks(moegen_module *m, const spec *s) {
  bufs b = alloc_bufs(s, 4);
  moegen_router_bwd_args a = {.num_tokens = 4, .grad_probs = b.grad, .intermediate = b.inter,
                              .grad_logits = b.out[0]};
  CHECK(moegen_router_bwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "no routing accepted");
  a.routing_map = b.map;
  a.routing_bitmap = b.bitmap;
  CHECK(moegen_router_bwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "two routings accepted");
  a.routing_bitmap = NULL;
  a.grad_weights = b.gw;
  CHECK(moegen_router_bwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "two grads accepted");
  a.grad_probs = NULL;
  CHECK(moegen_router_bwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT,
        "grad_weights without indices accepted");
  CHECK(strstr(moegen_module_last_error(m), "topk_indices") != NULL, "message: %s",
        moegen_module_last_error(m));
  moegen_router_bwd_shape sh;
  CHECK(moegen_router_bwd_shape_of(moegen_module_image(m), 5, &sh) == MOEGEN_OK &&
            sh.grad_logits[0] == 5 && sh.grad_logits[1] == s->E && sh.workspace_bytes == 0,
        "shape_of");
  a.grad_weights = NULL;
  a.grad_probs = b.grad;
  a.logits = b.logits;
  CHECK(moegen_router_bwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
            strstr(moegen_module_last_error(m), "router_bwd = saved"),
        "logits accepted by a saved module: %s", moegen_module_last_error(m));
  free_bufs(&b);
}

/* The recompute module's argument rules: no intermediate either way, the
 * logits required; its shapes. */
static void arg_checks_recompute(moegen_module *mr, const spec *s) {
  bufs b = alloc_bufs(s, 4);
  moegen_router_bwd_args a = {.num_tokens = 4, .grad_probs = b.grad, .routing_map = b.map,
                              .intermediate = b.inter, .logits = b.logits,
                              .grad_logits = b.out[0]};
  CHECK(moegen_router_bwd(mr, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
            strstr(moegen_module_last_error(mr), "router_bwd = recompute"),
        "intermediate accepted by a recompute backward: %s", moegen_module_last_error(mr));
  a.intermediate = NULL;
  a.logits = NULL;
  CHECK(moegen_router_bwd(mr, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
            strstr(moegen_module_last_error(mr), "logits is NULL"),
        "a recompute backward without logits: %s", moegen_module_last_error(mr));
  moegen_router_fwd_args f = {.num_tokens = 4, .logits = b.logits,
                              .expert_bias = s->bias ? b.bias : NULL, .routing_map = b.map,
                              .intermediate = b.inter};
  CHECK(moegen_router_fwd(mr, &f, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
            strstr(moegen_module_last_error(mr), "router_bwd = recompute"),
        "intermediate accepted by a recompute forward: %s", moegen_module_last_error(mr));
  moegen_router_fwd_shape fs;
  CHECK(moegen_router_fwd_shape_of(moegen_module_image(mr), 5, &fs) == MOEGEN_OK &&
            fs.intermediate[0] == 0 && fs.intermediate[1] == 0 && fs.probs[0] == 5 &&
            fs.probs[1] == s->E,
        "recompute forward shape: intermediate [%lld, %lld]", (long long)fs.intermediate[0],
        (long long)fs.intermediate[1]);
  free_bufs(&b);
}

static const spec specs[] = {
    {"deepseek-v3: sigmoid, 8 groups keep 4, bias, x2.5", 256, 8, 8, 4, 1, 0, MOEGEN_SCORE_SIGMOID, 2.5, MOEGEN_DTYPE_BF16, 0},
    {"qwen3: softmax pre", 128, 8, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"mixtral: softmax post E=8 K=2", 8, 2, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"gpt-oss: softmax post fp32", 128, 4, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"llama4: sigmoid K=1 fp16", 128, 1, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP16, 0},
    {"sqrtsoftplus E=130 K=5 bias x1.5 fp32", 130, 5, 0, 0, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 1.5, MOEGEN_DTYPE_FP32, 0},
    {"sqrtsoftplus E=32 K=2 4 groups keep 2 bf16", 32, 2, 4, 2, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"softmax pre E=32 K=5 x2 fp16", 32, 5, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 2.0, MOEGEN_DTYPE_FP16, 0},
    {"softmax pre 8 groups keep 4 E=256 K=8 fp32", 256, 8, 8, 4, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"softmax post E=1024 K=32 bf16", 1024, 32, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"sigmoid E=2048 K=32 bias fp32", 2048, 32, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"sqrtsoftplus E=2048 K=8 16 groups keep 4 x2.5 bf16", 2048, 8, 16, 4, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 2.5, MOEGEN_DTYPE_BF16, 0},
    {"sigmoid E=1024 K=1 bias fp16", 1024, 1, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP16, 0},
    {"softmax pre E=2048 K=2 bf16", 2048, 2, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"sigmoid E=8 K=8 x2 fp32", 8, 8, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 2.0, MOEGEN_DTYPE_FP32, 0},
};

/* T = 0 with every pointer NULL: a no-op. */
static void empty_case(moegen_module *m) {
  moegen_status st = moegen_router_bwd(m, &(moegen_router_bwd_args){0}, NULL);
  CHECK(st == MOEGEN_OK, "T = 0, NULL pointers: %s: %s", moegen_status_string(st),
        moegen_module_last_error(m));
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {0, 1, 33, 777};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, sizeof own_tokens / sizeof own_tokens[0], tokens);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    const spec *s = &specs[i];
    moegen_config c = config_of(s);
    const unsigned units = 1u << MOEGEN_UNIT_ROUTER | 1u << MOEGEN_UNIT_ROUTER_TRAIN;
    moegen_module *m = test_jit(&c, units, s->what);
    c.router_bwd = MOEGEN_ROUTER_BWD_RECOMPUTE;
    moegen_module *mr = test_jit(&c, units, s->what);
    if (!m || !mr) {
      moegen_module_destroy(m);
      moegen_module_destroy(mr);
      continue;
    }
    int before = failures;
    for (int t = 0; t < nt; t++)
      for (int ties = 0; ties < 2; ties++) run_case(m, mr, s, tokens[t], ties);
    if (i == 0) {
      arg_checks(m, s);
      arg_checks_recompute(mr, s);
    }
    empty_case(m);
    empty_case(mr);
    printf("%s %s (saved and recompute)\n", failures == before ? "ok  " : "FAIL", s->what);
    moegen_module_destroy(m);
    moegen_module_destroy(mr);
  }
  printf("%s\n", failures ? "router backward GPU test FAILED" : "router backward GPU test passed");
  return failures ? 1 : 0;
}
