/* GPU test: the aux-loss ops against the CPU reference (tests/ref/aux_ref.c):
 *  - scores forward (every score function, random and tie-heavy logits, odd
 *    sizes; the bytemap and bitmap must be the exact top-K of the scores the
 *    GPU wrote, and bit-identical to each other) and backward;
 *  - loss forward (probs fp32/bf16/fp16, every tokens_per_expert dtype,
 *    C = E*B, host N; bitwise the same on a second run) and backward;
 *  - the loss captured once in a CUDA graph with N in a device scalar,
 *    replayed with three different N.
 * Exit 77 (skipped) without a device. */
#include "aux_ref.h"
#include "check.h"
#include "dtypes.h"
#include "gpu.h"
#include "moegen/moegen.h"

typedef struct spec {
  const char *what;
  int E, K;
  moegen_score score;
  moegen_dtype dt;
} spec;

static moegen_config config_of(const spec *s) {
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "test");
  c.experts = s->E;
  c.topk = s->K;
  c.hidden = 256;
  c.ffn = 256;
  c.score = s->score;
  c.logits_dtype = s->dt;
  return c;
}

/* ---------------------------------------------------------------- scores */

/* Top-K positions of v[0..E) (value descending, id ascending) as a 0/1 map. */
static void top_k_of(const float *v, int E, int K, uint8_t *map) {
  for (int e = 0; e < E; e++) map[e] = 0;
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!map[e] && (best < 0 || v[e] > v[best])) best = e;
    map[best] = 1;
  }
}

static void scores_case(moegen_module *m, const spec *s, int T, int ties) {
  static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  moegen_config c = config_of(s);
  int E = s->E;
  size_t TE = (size_t)T * E, NB = (size_t)(E + 7) / 8, es = dt_size(s->dt);
  float *x = malloc(4 * TE + 4), *sc = malloc(4 * TE + 4), *in = malloc(4 * TE + 4);
  float *gsc = malloc(4 * TE + 4), *gin = malloc(4 * TE + 4), *g = malloc(4 * TE + 4);
  float *dx = malloc(4 * TE + 4);
  uint8_t *gm = malloc(TE + 1), *gb = malloc((size_t)T * NB + 1), *want = malloc((size_t)E);
  void *hx = malloc(TE * es + 4), *hdx = malloc(TE * es + 4);
  for (size_t i = 0; i < TE; i++) {
    write_dt(s->dt, hx, i, ties ? few[rng_u64() % 5] : 2.0f * rng_normal());
    x[i] = read_dt(s->dt, hx, i);
    g[i] = rng_normal();
  }
  void *dlog = gpu_alloc(TE * es), *dgl = gpu_alloc(TE * es);
  float *dsc = gpu_alloc(4 * TE), *din = gpu_alloc(4 * TE), *dg = gpu_alloc(4 * TE);
  uint8_t *dmap = gpu_alloc(TE), *dbit = gpu_alloc((size_t)T * NB);
  gpu_put(dlog, hx, TE * es);
  gpu_put(dg, g, 4 * TE);
  gpu_poison(dsc, 4 * TE);
  gpu_poison(din, 4 * TE);
  gpu_poison(dmap, TE);
  gpu_poison(dbit, (size_t)T * NB);
  gpu_poison(dgl, TE * es);
  moegen_aux_scores_fwd_args fa = {.num_tokens = T, .logits = dlog, .scores = dsc,
                                   .routing_map = dmap, .routing_bitmap = dbit,
                                   .intermediate = din};
  moegen_aux_scores_bwd_args ba = {.num_tokens = T, .grad_scores = dg, .intermediate = din,
                                   .grad_logits = dgl};
  moegen_status st = moegen_aux_scores_fwd(m, &fa, NULL);
  if (st == MOEGEN_OK) st = moegen_aux_scores_bwd(m, &ba, NULL);
  if (st != MOEGEN_OK) {
    printf("  FAIL: aux_scores: %s: %s\n", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuCtxSynchronize());
    aux_ref_scores_fwd(&c, T, x, sc, NULL, in);
    gpu_get(gsc, dsc, 4 * TE);
    gpu_get(gin, din, 4 * TE);
    gpu_get(gm, dmap, TE);
    gpu_get(gb, dbit, (size_t)T * NB);
    gpu_get(hdx, dgl, TE * es);
    aux_ref_scores_bwd(&c, T, g, gin, dx);
    for (int t = 0; t < T && failures < 20; t++) {
      size_t o = (size_t)t * E;
      for (int e = 0; e < E; e++) {
        if (!close_f32(gsc[o + e], sc[o + e], E) || !close_f32(gin[o + e], in[o + e], E)) {
          printf("  FAIL: scores/intermediate[%d,%d] = %.9g / %.9g, want %.9g / %.9g\n", t, e,
                 gsc[o + e], gin[o + e], sc[o + e], in[o + e]);
          failures++;
          break;
        }
        float d = read_dt(s->dt, hdx, o + e);
        if (!close_dt(s->dt, d, dx[o + e], E)) {
          printf("  FAIL: grad_logits[%d,%d] = %.9g, want %.9g\n", t, e, d, dx[o + e]);
          failures++;
          break;
        }
      }
      top_k_of(gsc + o, E, s->K, want);
      for (int e = 0; e < E; e++) {
        int bit = (gb[(size_t)t * NB + e / 8] >> (e % 8)) & 1;
        if (gm[o + e] != want[e] || bit != want[e]) {
          printf("  FAIL: map[%d,%d] = %d, bitmap %d, want %d (top-%d of the scores)\n", t, e,
                 gm[o + e], bit, want[e], s->K);
          failures++;
          break;
        }
      }
    }
  }
  gpu_free(dlog); gpu_free(dgl); gpu_free(dsc); gpu_free(din); gpu_free(dg); gpu_free(dmap);
  gpu_free(dbit);
  free(x); free(sc); free(in); free(gsc); free(gin); free(g); free(dx); free(gm); free(gb);
  free(want); free(hx); free(hdx);
}

/* ---------------------------------------------------------------- loss */

static size_t tpe_size(moegen_count_dtype d) {
  return d == MOEGEN_COUNT_INT64 ? 8 : d == MOEGEN_COUNT_BF16 || d == MOEGEN_COUNT_INT16 ? 2 : 4;
}

/* Random counts in 0..8R+1, the most a real routing of R tokens with K <= 8
 * gives (bf16: at most 256, to stay exact; int16: at most 32767); host values in tpe, device bytes
 * in raw. Larger counts would push an fp16 loss past 65504. */
static void make_tpe(moegen_count_dtype d, int64_t C, int64_t R, float *tpe, void *raw) {
  int64_t cap = 8 * R + 1;
  if (d == MOEGEN_COUNT_BF16 && cap > 256) cap = 256;
  if (d == MOEGEN_COUNT_INT16 && cap > 32767) cap = 32767;
  for (int64_t c = 0; c < C; c++) {
    int64_t v = (int64_t)(rng_u64() % (uint64_t)(cap + 1));
    if (rng_u64() % 7 == 0) v = 0; /* zero-token experts */
    tpe[c] = (float)v;
    switch (d) {
      case MOEGEN_COUNT_INT64: ((int64_t *)raw)[c] = v; break;
      case MOEGEN_COUNT_FP32: ((float *)raw)[c] = (float)v; break;
      case MOEGEN_COUNT_BF16: ((uint16_t *)raw)[c] = f32_to_bf16((float)v); break;
      case MOEGEN_COUNT_INT16: ((int16_t *)raw)[c] = (int16_t)v; break;
      default: ((int32_t *)raw)[c] = (int32_t)v; break;
    }
  }
}

/* Device inputs and outputs of one loss case. */
typedef struct loss_bufs {
  void *probs, *tpe, *aux, *aux2, *grad_aux, *grad, *ws;
  float *cc;
  int64_t *n_dev;
  size_t ws_bytes;
} loss_bufs;

static void loss_case(moegen_module *m, int64_t R, int E, int B, moegen_dtype pd,
                      moegen_count_dtype td) {
  int64_t C = (int64_t)E * B, n = R * C;
  int K = 1 + (int)(rng_u64() % 8);
  float coeff = 1e-3f * (1 + (float)(rng_u64() % 10));
  int64_t N = R > 0 ? R : 1;
  size_t es = dt_size(pd);
  float *p = malloc(4 * (size_t)n + 4), *tpe = malloc(4 * (size_t)C);
  float *want_g = malloc(4 * (size_t)n + 4);
  void *hp = malloc(es * (size_t)n + 4), *htpe = malloc(8 * (size_t)C), *hg = malloc(es * (size_t)n + 4);
  for (int64_t i = 0; i < n; i++) {
    write_dt(pd, hp, (size_t)i, rng_uniform());
    p[i] = read_dt(pd, hp, (size_t)i);
  }
  make_tpe(td, C, R, tpe, htpe);
  moegen_aux_loss_shape sh;
  moegen_status st = moegen_aux_loss_shape_of(moegen_module_image(m), R, C, &sh);
  CHECK(st == MOEGEN_OK && sh.grad_probs[0] == R && sh.grad_probs[1] == C, "aux_loss_shape_of");
  loss_bufs b = {.probs = gpu_alloc(es * (size_t)n), .tpe = gpu_alloc(8 * (size_t)C),
                 .aux = gpu_alloc(16), .aux2 = gpu_alloc(16), .grad_aux = gpu_alloc(16),
                 .grad = gpu_alloc(es * (size_t)n), .ws = gpu_alloc(sh.workspace_bytes),
                 .cc = gpu_alloc(16), .ws_bytes = sh.workspace_bytes};
  gpu_put(b.probs, hp, es * (size_t)n);
  gpu_put(b.tpe, htpe, tpe_size(td) * (size_t)C);
  gpu_poison(b.aux, 16);
  gpu_poison(b.aux2, 16);
  gpu_poison(b.cc, 16);
  gpu_poison(b.grad, es * (size_t)n);
  gpu_poison(b.ws, sh.workspace_bytes);
  float ga = rng_normal();
  unsigned char hga[4];
  write_dt(pd, hga, 0, ga);
  ga = read_dt(pd, hga, 0);
  gpu_put(b.grad_aux, hga, es);
  moegen_aux_loss_fwd_args fa = {.rows = R, .cols = C, .probs = b.probs, .probs_dtype = (int)pd,
                                 .tokens_per_expert = b.tpe, .tpe_dtype = td,
                                 .total_num_tokens = N, .num_experts = E, .topk = K,
                                 .coeff = coeff, .aux_loss = b.aux, .aux_const = b.cc,
                                 .workspace = b.ws, .workspace_bytes = b.ws_bytes};
  moegen_aux_loss_bwd_args ba = {.rows = R, .cols = C, .aux_const = b.cc,
                                 .tokens_per_expert = b.tpe, .tpe_dtype = td,
                                 .grad_aux = b.grad_aux, .grad_dtype = (int)pd,
                                 .grad_probs = b.grad};
  st = moegen_aux_loss_fwd(m, &fa, NULL);
  if (st == MOEGEN_OK) st = moegen_aux_loss_bwd(m, &ba, NULL);
  if (st == MOEGEN_OK) {
    fa.aux_loss = b.aux2; /* a second run: the same bits */
    st = moegen_aux_loss_fwd(m, &fa, NULL);
  }
  if (st != MOEGEN_OK) {
    printf("  FAIL: aux_loss: %s: %s\n", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuCtxSynchronize());
    float cc = aux_ref_loss_const(E, K, coeff, N), gcc;
    double want = aux_ref_loss_fwd(R, C, p, tpe, cc);
    unsigned char a1[4] = {0}, a2[4] = {0};
    gpu_get(&gcc, b.cc, 4);
    gpu_get(a1, b.aux, es);
    gpu_get(a2, b.aux2, es);
    float got = read_dt(pd, a1, 0);
    const char *what = "";
    if (gcc != cc) what = "Cc";
    else if (!close_dt(pd, got, (float)want, (int)C)) what = "aux";
    else if (memcmp(a1, a2, es)) what = "a second run (not deterministic)";
    if (*what) {
      printf("  FAIL: aux loss R=%lld C=%lld probs %s tpe %d: %s: aux %.9g (again %.9g), want "
             "%.9g; Cc %.9g, want %.9g\n", (long long)R, (long long)C, moegen_dtype_name(pd),
             (int)td, what, got, read_dt(pd, a2, 0), want, gcc, cc);
      failures++;
    }
    aux_ref_loss_bwd(R, C, cc, tpe, ga, want_g);
    gpu_get(hg, b.grad, es * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      float x = read_dt(pd, hg, (size_t)i);
      if (x != round_dt(pd, want_g[i])) {
        printf("  FAIL: aux grad_probs[%lld,%lld] = %.9g, want %.9g\n", (long long)(i / C),
               (long long)(i % C), x, round_dt(pd, want_g[i]));
        failures++;
        break;
      }
    }
  }
  gpu_free(b.probs); gpu_free(b.tpe); gpu_free(b.aux); gpu_free(b.aux2); gpu_free(b.grad_aux);
  gpu_free(b.grad); gpu_free(b.ws); gpu_free(b.cc);
  free(p); free(tpe); free(want_g); free(hp); free(htpe); free(hg);
}

/* One capture with N in a device scalar; three replays with other N. */
static void loss_graph_case(moegen_module *m, int64_t R, int E) {
  int64_t C = E, n = R * C;
  float *p = malloc(4 * (size_t)n + 4), *tpe = malloc(4 * (size_t)C);
  int32_t *htpe = malloc(8 * (size_t)C);
  for (int64_t i = 0; i < n; i++) p[i] = rng_uniform();
  make_tpe(MOEGEN_COUNT_INT32, C, R, tpe, htpe);
  moegen_aux_loss_shape sh;
  moegen_aux_loss_shape_of(moegen_module_image(m), R, C, &sh);
  void *dp = gpu_alloc(4 * (size_t)n), *dt = gpu_alloc(4 * (size_t)C), *ws = gpu_alloc(sh.workspace_bytes);
  float *aux = gpu_alloc(16), *cc = gpu_alloc(16);
  int64_t *dn = gpu_alloc(16);
  gpu_put(dp, p, 4 * (size_t)n);
  gpu_put(dt, htpe, 4 * (size_t)C);
  moegen_aux_loss_fwd_args fa = {.rows = R, .cols = C, .probs = dp, .probs_dtype = 0,
                                 .tokens_per_expert = dt, .tpe_dtype = MOEGEN_COUNT_INT32,
                                 .total_num_tokens_dev = dn, .num_experts = E, .topk = 4,
                                 .coeff = 1e-2f, .aux_loss = aux, .aux_const = cc,
                                 .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  CUstream stream;
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
  CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  moegen_status st = moegen_aux_loss_fwd(m, &fa, stream);
  CU(gpu_drv->cuStreamEndCapture(stream, &g));
  if (st != MOEGEN_OK) {
    printf("  FAIL: aux_loss_fwd under capture: %s\n", moegen_module_last_error(m));
    failures++;
  } else {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    static const int64_t Ns[] = {1000, 7, 123456};
    for (int i = 0; i < 3; i++) {
      gpu_put(dn, &Ns[i], 8);
      gpu_poison(aux, 16);
      gpu_replay(ge, stream);
      float got, gcc, want_cc = aux_ref_loss_const(E, 4, 1e-2f, Ns[i]);
      double want = aux_ref_loss_fwd(R, C, p, tpe, want_cc);
      gpu_get(&got, aux, 4);
      gpu_get(&gcc, cc, 4);
      if (gcc != want_cc || !close_f32(got, (float)want, (int)C)) {
        printf("  FAIL: graph replay with device N = %lld: aux %.9g, want %.9g; Cc %.9g, want "
               "%.9g\n", (long long)Ns[i], got, want, gcc, want_cc);
        failures++;
      }
    }
    CU(gpu_drv->cuGraphExecDestroy(ge));
  }
  CU(gpu_drv->cuGraphDestroy(g));
  CU(gpu_drv->cuStreamDestroy(stream));
  gpu_free(dp); gpu_free(dt); gpu_free(ws); gpu_free(aux); gpu_free(cc); gpu_free(dn);
  free(p); free(tpe); free(htpe);
}

/* Bad loss arguments are refused with a message. */
static void loss_arg_checks(moegen_module *m) {
  char dummy_ws[16];
  moegen_aux_loss_fwd_args fa = {.rows = 4, .cols = 10, .probs = dummy_ws, .tokens_per_expert = dummy_ws,
                                 .total_num_tokens = 4, .num_experts = 4, .topk = 1,
                                 .aux_loss = dummy_ws, .workspace = dummy_ws, .workspace_bytes = 1 << 20};
  CHECK(moegen_aux_loss_fwd(m, &fa, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
            strstr(moegen_module_last_error(m), "multiple"), "cols %% E accepted: %s",
        moegen_module_last_error(m));
  fa.cols = 8;
  fa.total_num_tokens = 0;
  CHECK(moegen_aux_loss_fwd(m, &fa, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "no N accepted");
  fa.total_num_tokens = 4;
  fa.workspace_bytes = 4;
  CHECK(moegen_aux_loss_fwd(m, &fa, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "small workspace accepted");
}

static const spec specs[] = {
    {"deepseek-v3: sigmoid E=256 K=8 bf16", 256, 8, MOEGEN_SCORE_SIGMOID, MOEGEN_DTYPE_BF16},
    {"qwen3: softmax E=128 K=8 bf16", 128, 8, MOEGEN_SCORE_SOFTMAX, MOEGEN_DTYPE_BF16},
    {"mixtral: softmax E=8 K=2 fp32", 8, 2, MOEGEN_SCORE_SOFTMAX, MOEGEN_DTYPE_FP32},
    {"sqrtsoftplus E=130 K=5 fp32", 130, 5, MOEGEN_SCORE_SQRTSOFTPLUS, MOEGEN_DTYPE_FP32},
    {"sigmoid E=32 K=1 fp16", 32, 1, MOEGEN_SCORE_SIGMOID, MOEGEN_DTYPE_FP16},
    {"sqrtsoftplus E=1024 K=32 bf16", 1024, 32, MOEGEN_SCORE_SQRTSOFTPLUS, MOEGEN_DTYPE_BF16},
    {"softmax E=2048 K=32 fp32", 2048, 32, MOEGEN_SCORE_SOFTMAX, MOEGEN_DTYPE_FP32},
    {"sigmoid E=2048 K=2 bf16", 2048, 2, MOEGEN_SCORE_SIGMOID, MOEGEN_DTYPE_BF16},
    {"softmax E=7 K=7 fp16", 7, 7, MOEGEN_SCORE_SOFTMAX, MOEGEN_DTYPE_FP16},
};

/* T = 0 / R = 0 with NULL data pointers: the score ops and the loss
 * backward do nothing; the loss forward writes aux = 0 and Cc. */
static void empty_case(moegen_module *m) {
  const moegen_aux_plan *p = &moegen_module_image(m)->aux;
  moegen_status s1 = moegen_aux_scores_fwd(m, &(moegen_aux_scores_fwd_args){0}, NULL);
  moegen_status s2 = moegen_aux_scores_bwd(m, &(moegen_aux_scores_bwd_args){0}, NULL);
  moegen_status s3 = moegen_aux_loss_bwd(m, &(moegen_aux_loss_bwd_args){.cols = p->experts}, NULL);
  CHECK(s1 == MOEGEN_OK && s2 == MOEGEN_OK && s3 == MOEGEN_OK, "T = 0 no-ops: %s %s %s: %s",
        moegen_status_string(s1), moegen_status_string(s2), moegen_status_string(s3),
        moegen_module_last_error(m));
  moegen_aux_loss_shape sh;
  CHECK(moegen_aux_loss_shape_of(moegen_module_image(m), 0, p->experts, &sh) == MOEGEN_OK,
        "aux_loss_shape_of(0 rows)");
  float *out = gpu_alloc(8), host[2];
  void *ws = gpu_alloc(sh.workspace_bytes);
  gpu_poison(out, 8);
  moegen_aux_loss_fwd_args a = {.cols = p->experts, .probs_dtype = MOEGEN_DTYPE_FP32,
                                .total_num_tokens = 5, .num_experts = p->experts, .topk = p->topk,
                                .coeff = 0.5f, .aux_loss = out, .aux_const = out + 1,
                                .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  moegen_status st = moegen_aux_loss_fwd(m, &a, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  gpu_get(host, out, 8);
  gpu_free(out);
  gpu_free(ws);
  const float cc = ((float)p->experts * 0.5f) / (float)p->topk / 5.f / 5.f;
  CHECK(st == MOEGEN_OK, "aux_loss_fwd R = 0: %s: %s", moegen_status_string(st),
        moegen_module_last_error(m));
  CHECK(host[0] == 0.f && fabsf(host[1] - cc) <= 1e-6f * cc, "R = 0: aux %g (want 0), Cc %g (want %g)",
        (double)host[0], (double)host[1], (double)cc);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {0, 1, 33, 777}, own_rows[] = {0, 1, 33, 777, 4099};
  int tokens[GPU_MAX_TOKENS], rows[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, sizeof own_tokens / sizeof own_tokens[0], tokens);
  const int nr = gpu_tokens(own_rows, sizeof own_rows / sizeof own_rows[0], rows);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    const spec *s = &specs[i];
    moegen_config c = config_of(s);
    moegen_module *m = test_jit(&c, 1u << MOEGEN_UNIT_ROUTER_TRAIN, s->what);
    if (!m) continue;
    int before = failures;
    for (int t = 0; t < nt; t++)
      for (int ties = 0; ties < 2; ties++) scores_case(m, s, tokens[t], ties);
    printf("%s scores: %s\n", failures == before ? "ok  " : "FAIL", s->what);
    if (i == 0) { /* the loss does not depend on the config: sweep it once */
      before = failures;
      for (int r = 0; r < nr; r++)
        for (int pd = 0; pd < 3; pd++)
          for (int td = 0; td <= MOEGEN_COUNT_INT16; td++)
            loss_case(m, rows[r], r % 2 ? 130 : 256, 1 + r % 3, (moegen_dtype)pd,
                      (moegen_count_dtype)td);
      loss_case(m, gpu_token(65536), 256, 1, MOEGEN_DTYPE_FP32, MOEGEN_COUNT_INT32); /* every block busy */
      loss_graph_case(m, gpu_token(4099), 256);
      loss_arg_checks(m);
      empty_case(m);
      printf("%s aux loss (all dtypes, graph replay with device N)\n",
             failures == before ? "ok  " : "FAIL");
    }
    moegen_module_destroy(m);
  }
  printf("%s\n", failures ? "aux GPU test FAILED" : "aux GPU test passed");
  return failures ? 1 : 0;
}
