/* GPU test: the MoE layer (moegen_layer_fwd / _bwd) against the CPU
 * reference (tests/ref/layer_ref.c) for the routing of the four bench
 * models (E, K, score, groups, bias, scaling) with small H and F that are
 * not tile multiples, at T = 1 and an odd T; forward y, backward dx,
 * dlogits, dw1, dw2 (bf16 and fp32 accumulate); and the whole forward +
 * backward captured in one CUDA graph, replayed with new inputs (a new
 * routing) at the same T; and one model again with router_bwd = recompute
 * (no router intermediate in saved: the backward reads the logits), eager
 * and captured, its saved smaller by the intermediate's bytes. Tolerance (SPEC.md 6, bf16 GEMM outputs): relative
 * Frobenius error < 1e-2 and max |d| / max |ref| < 2e-2. NaN fails.
 * Exit 77 (skipped) without a device. */
#include <math.h>

#include "check.h"
#include "dtypes.h"
#include "gpu.h"
#include "layer_ref.h"
#include "layer_test.h"
#include "moegen/moegen.h"

enum { H = 264, F = 136 }; /* multiples of 8, not of any tile */

static const layer_model models[] = {
    {"deepseek-v3", 256, 8, H, F, 8, 4, 1, 0, MOEGEN_SCORE_SIGMOID, 2.5},
    {"qwen3-30b-a3b", 128, 8, H, F, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"mixtral-8x7b", 8, 2, H, F, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"gpt-oss-120b", 128, 4, H, F, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
};

static moegen_config config_of(const layer_model *md) { return layer_config(md, "layertest"); }

/* Compares n device values (bf16, or fp32 if f32) with ref; 0 if they differ. */
static int compare(const char *what, const void *dev, int f32, const float *ref, size_t n) {
  void *h = malloc((f32 ? 4 : 2) * n + 4);
  gpu_get(h, dev, (f32 ? 4 : 2) * n);
  int ok = layer_compare(what, h, f32, ref, n);
  free(h);
  return ok;
}

/* Host and device tensors of one layer problem at max_tokens = T. */
typedef struct problem {
  moegen_config c;
  int T;
  moegen_layer_shape sh;
  float *x, *logits, *bias, *w1, *w2, *dy;             /* host */
  void *dx_, *dlogits_, *dbias, *dw1_, *dw2_, *ddy;    /* device inputs */
  void *y, *gx, *glogits, *gw1, *gw2, *saved, *ws;     /* device outputs */
} problem;

static void new_inputs(problem *p) {
  const int T = p->T, E = p->c.experts;
  fill_bf16(p->x, p->dx_, (size_t)T * H, 1.0f);
  fill_bf16(p->logits, p->dlogits_, (size_t)T * E, 2.0f);
  fill_bf16(p->dy, p->ddy, (size_t)T * H, 1.0f);
}

static problem make_problem(moegen_module *m, const layer_model *md, int T) {
  problem p = {.c = config_of(md), .T = T};
  if (moegen_module_image(m)->router_bwd.recompute) p.c.router_bwd = MOEGEN_ROUTER_BWD_RECOMPUTE;
  const int E = md->E;
  moegen_layer_shape_of(moegen_module_image(m), T, &p.sh);
  size_t nx = (size_t)T * H, nl = (size_t)T * E, n1 = (size_t)E * 2 * F * H, n2 = (size_t)E * H * F;
  p.x = malloc(4 * nx + 4), p.logits = malloc(4 * nl + 4), p.bias = malloc(4 * (size_t)E);
  p.w1 = malloc(4 * n1), p.w2 = malloc(4 * n2), p.dy = malloc(4 * nx + 4);
  p.dx_ = gpu_alloc(2 * nx), p.dlogits_ = gpu_alloc(2 * nl), p.dbias = gpu_alloc(4 * (size_t)E);
  p.dw1_ = gpu_alloc(2 * n1), p.dw2_ = gpu_alloc(2 * n2), p.ddy = gpu_alloc(2 * nx);
  p.y = gpu_alloc(2 * nx), p.gx = gpu_alloc(2 * nx), p.glogits = gpu_alloc(2 * nl);
  p.gw1 = gpu_alloc(4 * n1), p.gw2 = gpu_alloc(4 * n2); /* fp32: room for main_grad */
  p.saved = gpu_alloc(p.sh.saved_bytes), p.ws = gpu_alloc(p.sh.workspace_bytes);
  for (int e = 0; e < E; e++) p.bias[e] = 0.1f * rng_normal();
  gpu_put(p.dbias, p.bias, 4 * (size_t)E);
  fill_bf16(p.w1, p.dw1_, n1, 1.0f / sqrtf((float)H));
  fill_bf16(p.w2, p.dw2_, n2, 1.0f / sqrtf((float)F));
  new_inputs(&p);
  return p;
}

static void free_problem(problem *p) {
  free(p->x), free(p->logits), free(p->bias), free(p->w1), free(p->w2), free(p->dy);
  gpu_free(p->dx_), gpu_free(p->dlogits_), gpu_free(p->dbias), gpu_free(p->dw1_);
  gpu_free(p->dw2_), gpu_free(p->ddy), gpu_free(p->y), gpu_free(p->gx), gpu_free(p->glogits);
  gpu_free(p->gw1), gpu_free(p->gw2), gpu_free(p->saved), gpu_free(p->ws);
}

static moegen_layer_fwd_args fwd_args(const problem *p) {
  return (moegen_layer_fwd_args){.num_tokens = p->T, .max_tokens = p->T, .x = p->dx_,
                                 .logits = p->dlogits_,
                                 .expert_bias = p->c.expert_bias ? p->dbias : NULL,
                                 .w1 = p->dw1_, .w2 = p->dw2_, .y = p->y, .saved = p->saved,
                                 .saved_bytes = p->sh.saved_bytes, .workspace = p->ws,
                                 .workspace_bytes = p->sh.workspace_bytes};
}

static moegen_layer_bwd_args bwd_args(const problem *p, int accumulate) {
  return (moegen_layer_bwd_args){.num_tokens = p->T, .max_tokens = p->T, .dy = p->ddy,
                                 .w1 = p->dw1_, .w2 = p->dw2_,
                                 .logits = p->c.router_bwd == MOEGEN_ROUTER_BWD_RECOMPUTE
                                               ? p->dlogits_ : NULL,
                                 .saved = p->saved, .saved_bytes = p->sh.saved_bytes, .dx = p->gx,
                                 .dlogits = p->glogits, .dw1 = p->gw1, .dw2 = p->gw2,
                                 .accumulate = accumulate, .workspace = p->ws,
                                 .workspace_bytes = p->sh.workspace_bytes};
}

/* Poisons the outputs. */
static void poison(problem *p) {
  size_t nx = (size_t)p->T * H, nl = (size_t)p->T * p->c.experts;
  gpu_poison(p->y, 2 * nx), gpu_poison(p->gx, 2 * nx), gpu_poison(p->glogits, 2 * nl);
  gpu_poison(p->gw1, 4 * (size_t)p->c.experts * 2 * F * H);
  gpu_poison(p->gw2, 4 * (size_t)p->c.experts * H * F);
  gpu_poison(p->saved, p->sh.saved_bytes), gpu_poison(p->ws, p->sh.workspace_bytes);
}

/* Checks every output against the reference; accumulate: dw are fp32 = base + grad. */
static void verify(problem *p, const char *what, int accumulate, const float *base1,
                   const float *base2) {
  const int T = p->T, E = p->c.experts;
  size_t nx = (size_t)T * H, nl = (size_t)T * E, n1 = (size_t)E * 2 * F * H, n2 = (size_t)E * H * F;
  layer_ref_io io = {T, p->x, p->logits, p->c.expert_bias ? p->bias : NULL, p->w1, p->w2, p->dy};
  float *y = malloc(4 * nx + 4), *dx = malloc(4 * nx + 4), *dl = malloc(4 * nl + 4);
  float *dw1 = malloc(4 * n1), *dw2 = malloc(4 * n2);
  layer_ref_fwd(&p->c, &io, y);
  layer_ref_bwd(&p->c, &io, dx, dl, dw1, dw2);
  if (accumulate) {
    for (size_t i = 0; i < n1; i++) dw1[i] += base1[i];
    for (size_t i = 0; i < n2; i++) dw2[i] += base2[i];
  }
  char label[160];
  const char *names[] = {"y", "dx", "dlogits", "dw1", "dw2"};
  const void *dev[] = {p->y, p->gx, p->glogits, p->gw1, p->gw2};
  const float *ref[] = {y, dx, dl, dw1, dw2};
  size_t n[] = {nx, nx, nl, n1, n2};
  int ok = 1;
  for (int i = 0; i < 5; i++) {
    snprintf(label, sizeof label, "%s %s", what, names[i]);
    ok &= compare(label, dev[i], i >= 3 && accumulate, ref[i], n[i]);
  }
  failures += !ok;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  free(y), free(dx), free(dl), free(dw1), free(dw2);
}

static int run(moegen_module *m, problem *p, int accumulate, CUstream s) {
  moegen_layer_fwd_args fa = fwd_args(p);
  moegen_layer_bwd_args ba = bwd_args(p, accumulate);
  moegen_status st = moegen_layer_fwd(m, &fa, s);
  if (st == MOEGEN_OK) st = moegen_layer_bwd(m, &ba, s);
  if (st != MOEGEN_OK) {
    printf("  FAIL layer: %s: %s\n", moegen_status_string(st), moegen_module_last_error(m));
    failures++;
  }
  return st == MOEGEN_OK;
}

/* Forward + backward at T, bf16 weight grads, then fp32 accumulate into
 * random main_grad. */
static void case_eager(moegen_module *m, const layer_model *md, int T) {
  problem p = make_problem(m, md, T);
  char what[128];
  poison(&p);
  if (run(m, &p, 0, NULL)) {
    CU(gpu_drv->cuCtxSynchronize());
    snprintf(what, sizeof what, "%s T=%d", md->name, T);
    verify(&p, what, 0, NULL, NULL);
  }
  size_t n1 = (size_t)md->E * 2 * F * H, n2 = (size_t)md->E * H * F;
  float *b1 = malloc(4 * n1), *b2 = malloc(4 * n2);
  for (size_t i = 0; i < n1; i++) b1[i] = rng_normal();
  for (size_t i = 0; i < n2; i++) b2[i] = rng_normal();
  gpu_put(p.gw1, b1, 4 * n1);
  gpu_put(p.gw2, b2, 4 * n2);
  if (run(m, &p, 1, NULL)) {
    CU(gpu_drv->cuCtxSynchronize());
    snprintf(what, sizeof what, "%s T=%d main_grad", md->name, T);
    verify(&p, what, 1, b1, b2);
  }
  free(b1), free(b2);
  free_problem(&p);
}

/* Forward + backward captured once; replayed twice with new x, logits, dy. */
static void case_graph(moegen_module *m, const layer_model *md, int T) {
  problem p = make_problem(m, md, T);
  CUstream s;
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamCreate(&s, MOEGEN_CU_STREAM_NON_BLOCKING));
  CU(gpu_drv->cuStreamBeginCapture(s, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  int ok = run(m, &p, 0, s);
  CU(gpu_drv->cuStreamEndCapture(s, &g));
  if (ok) {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 2; rep++) {
      new_inputs(&p);
      poison(&p);
      gpu_replay(ge, s);
      char what[128];
      snprintf(what, sizeof what, "%s T=%d graph replay %d", md->name, T, rep);
      verify(&p, what, 0, NULL, NULL);
    }
    CU(gpu_drv->cuGraphExecDestroy(ge));
  }
  CU(gpu_drv->cuGraphDestroy(g));
  CU(gpu_drv->cuStreamDestroy(s));
  free_problem(&p);
}

/* Argument checks: T past max_tokens, short saved/workspace. */
static void case_args(moegen_module *m, const layer_model *md) {
  problem p = make_problem(m, md, 4);
  moegen_layer_fwd_args fa = fwd_args(&p);
  fa.num_tokens = 5;
  CHECK(moegen_layer_fwd(m, &fa, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "T > max_tokens accepted");
  fa = fwd_args(&p);
  fa.saved_bytes -= 1;
  CHECK(moegen_layer_fwd(m, &fa, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "short saved accepted");
  moegen_layer_bwd_args ba = bwd_args(&p, 0);
  ba.workspace_bytes = 0;
  CHECK(moegen_layer_bwd(m, &ba, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "short workspace accepted");
  fa = fwd_args(&p);
  fa.num_tokens = 0;
  CHECK(moegen_layer_fwd(m, &fa, NULL) == MOEGEN_OK, "T = 0: %s", moegen_module_last_error(m));
  free_problem(&p);
  printf("ok   argument checks\n");
}

/* T = 0 with NULL data pointers, saved and workspace: the forward does
 * nothing; the backward zeroes the bf16 weight grads (accumulate = 0) or
 * leaves fp32 main_grad as it is (accumulate = 1). */
static void case_empty(moegen_module *m) {
  moegen_layer_shape sh;
  CHECK(moegen_layer_shape_of(moegen_module_image(m), 4, &sh) == MOEGEN_OK, "layer_shape_of");
  const size_t n1 = (size_t)(sh.w1[0] * sh.w1[1] * sh.w1[2]), n2 = (size_t)(sh.w2[0] * sh.w2[1] * sh.w2[2]);
  void *dw1 = gpu_alloc(4 * n1), *dw2 = gpu_alloc(4 * n2); /* room for fp32 */
  float *h1 = malloc(4 * n1), *h2 = malloc(4 * n2);
  moegen_status sf = moegen_layer_fwd(m, &(moegen_layer_fwd_args){.max_tokens = 4}, NULL);
  gpu_poison(dw1, 4 * n1);
  gpu_poison(dw2, 4 * n2);
  moegen_status s0 =
      moegen_layer_bwd(m, &(moegen_layer_bwd_args){.max_tokens = 4, .dw1 = dw1, .dw2 = dw2}, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  gpu_get(h1, dw1, 2 * n1);
  gpu_get(h2, dw2, 2 * n2);
  int bad = 0;
  for (size_t i = 0; i < n1 / 2; i++) bad += h1[i] != 0; /* bf16 pairs as 32-bit words */
  for (size_t i = 0; i < n2 / 2; i++) bad += h2[i] != 0;
  for (size_t i = 0; i < n1; i++) h1[i] = 1.5f;
  for (size_t i = 0; i < n2; i++) h2[i] = -2.f;
  gpu_put(dw1, h1, 4 * n1);
  gpu_put(dw2, h2, 4 * n2);
  moegen_status s1 = moegen_layer_bwd(
      m, &(moegen_layer_bwd_args){.max_tokens = 4, .dw1 = dw1, .dw2 = dw2, .accumulate = 1}, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  gpu_get(h1, dw1, 4 * n1);
  gpu_get(h2, dw2, 4 * n2);
  for (size_t i = 0; i < n1; i++) bad += h1[i] != 1.5f;
  for (size_t i = 0; i < n2; i++) bad += h2[i] != -2.f;
  gpu_free(dw1);
  gpu_free(dw2);
  free(h1);
  free(h2);
  CHECK(sf == MOEGEN_OK && s0 == MOEGEN_OK && s1 == MOEGEN_OK, "T = 0, NULL pointers: %s %s %s: %s",
        moegen_status_string(sf), moegen_status_string(s0), moegen_status_string(s1),
        moegen_module_last_error(m));
  CHECK(bad == 0, "T = 0: %d weight-grad words wrong (want zeros, or main_grad kept)", bad);
  printf("ok   T = 0 with NULL pointers\n");
}

/* md with router_bwd = recompute: eager at each T and captured; its saved
 * holds no router intermediate; the backward refuses a NULL logits, and the
 * saved module's a given one. */
static void case_recompute(const layer_model *md, int nt, const int *tokens) {
  layer_model mr = *md;
  char name[96];
  snprintf(name, sizeof name, "%s router_bwd=recompute", md->name);
  mr.name = name;
  moegen_config c = config_of(md);
  moegen_module *saved = test_jit(&c, LAYER_UNITS, md->name);
  c.router_bwd = MOEGEN_ROUTER_BWD_RECOMPUTE;
  moegen_module *m = test_jit(&c, LAYER_UNITS, name);
  if (m && saved) {
    for (int t = 0; t < nt; t++) case_eager(m, &mr, tokens[t]);
    case_graph(m, &mr, gpu_token(45));
    const int T = 100;
    moegen_layer_shape a, b;
    moegen_layer_shape_of(moegen_module_image(saved), T, &a);
    moegen_layer_shape_of(moegen_module_image(m), T, &b);
    const size_t inter = (4 * (size_t)T * md->E + 255) / 256 * 256;
    if (a.saved_bytes - b.saved_bytes != inter || a.workspace_bytes != b.workspace_bytes) {
      printf("  FAIL recompute saved_bytes %zu, saved mode's %zu: want %zu fewer\n",
             b.saved_bytes, a.saved_bytes, inter);
      failures++;
    }
    problem p = make_problem(m, &mr, 4);
    moegen_layer_fwd_args fa = fwd_args(&p);
    moegen_layer_bwd_args ba = bwd_args(&p, 0);
    moegen_status f = moegen_layer_fwd(m, &fa, NULL);
    ba.logits = NULL;
    moegen_status n = moegen_layer_bwd(m, &ba, NULL);
    const int refused = strstr(moegen_module_last_error(m), "router_bwd = recompute") != NULL;
    free_problem(&p);
    p = make_problem(saved, md, 4);
    ba = bwd_args(&p, 0);
    ba.logits = p.dlogits_;
    moegen_status g = moegen_layer_bwd(saved, &ba, NULL);
    free_problem(&p);
    if (f != MOEGEN_OK || n != MOEGEN_ERR_INVALID_ARGUMENT || !refused ||
        g != MOEGEN_ERR_INVALID_ARGUMENT) {
      printf("  FAIL recompute logits rules: fwd %s, bwd without logits %s (%s), saved module's "
             "bwd with logits %s\n", moegen_status_string(f), moegen_status_string(n),
             moegen_module_last_error(m), moegen_status_string(g));
      failures++;
    } else {
      printf("ok   %s: saved %zu bytes fewer, logits rules\n", name, inter);
    }
  }
  moegen_module_destroy(m);
  moegen_module_destroy(saved);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {1, 77};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, 2, tokens);
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    moegen_config c = config_of(&models[i]);
    moegen_module *m = test_jit(&c, LAYER_UNITS, models[i].name);
    if (!m) continue;
    for (int t = 0; t < nt; t++) case_eager(m, &models[i], tokens[t]);
    if (i == 0) {
      case_graph(m, &models[i], gpu_token(45));
      case_args(m, &models[i]);
      case_empty(m);
    }
    moegen_module_destroy(m);
  }
  case_recompute(&models[2], nt, tokens);
  printf("%s\n", failures ? "layer GPU test FAILED" : "layer GPU test passed");
  return failures ? 1 : 0;
}
