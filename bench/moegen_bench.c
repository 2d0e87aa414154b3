/* moegen-bench: times moegen's ops on the GPU and prints one JSON line per
 * (stage, model, tokens) in the schema of shared/peers/peers.py
 * ({"stage", "peer": "moegen", "model", "tokens", "ms", "gbps", ...}), so
 * shared/peers/compare.py can put it beside the PyTorch peers.
 *
 * Method (as peers.py's triton do_bench): per call, flush L2 by writing a
 * 256 MiB buffer, time the call alone with events, take the median of 200
 * calls after 20 warm-ups -- of fewer (as many as take BUDGET_MS, at least
 * MIN_REPS) where a call is longer than 10 ms: peers.py's do_bench times
 * for 200 ms. The budget counts the calls as the last warm-up took (warm
 * L2), not the flushes between them.
 * Each configuration is checked against the CPU reference before it is
 * timed. The GEMM stages also print "peer": "cublaslt" lines (the cuBLASLt
 * loop of tests/gpu/cublaslt.h, checked the same way).
 *
 * --graph times as users run small T: GRAPH_CALLS back-to-back calls of the
 * op captured in one CUDA graph, the L2 flushed before each replay, the
 * median replay / GRAPH_CALLS; rows carry "method": "graph" (peers.py
 * --cudagraphs' method; compare.py compares graph rows only with graph
 * rows), and an op that cannot be captured gives an error row.
 *
 * Usage: moegen-bench [--models a,b] [--tokens 256,4096,16384] [--stages router,...]
 *                     [--arch sm_XY] [--warm-cache] [--graph] [--router-bwd saved|recompute]
 * --router-bwd sets the config's router_bwd for every module (the stages
 * that run the router backward, router_fwd_bwd and layer_fwd_bwd, say it
 * in a "router_bwd" member).
 * --arch renders the modules for that arch instead of the device's own
 * (sm_90 on an H200 times the portable mma.sync GEMM). --warm-cache (with
 * --arch; no GPU needed) only compiles the listed models' modules into the
 * JIT cache ($MOEGEN_CACHE_DIR, ...) and exits: a GPU run with the same
 * cache directory, moegen and NVRTC versions and the same arch (the
 * device's own: sm_90a on an H100 / H200) then compiles nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const bench_model models[] = {
    {"deepseek-v3", 256, 8, 7168, 2048, 8, 4, 1, 0, MOEGEN_SCORE_SIGMOID, 2.5},
    {"qwen3-30b-a3b", 128, 8, 2048, 768, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"mixtral-8x7b", 8, 2, 4096, 14336, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
    {"gpt-oss-120b", 128, 4, 2880, 2880, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0},
};

/* Stage name on the command line -> its function. */
static const struct {
  const char *name;
  void (*run)(const bench_model *md, int T, void *flush);
} stages[] = {
    {"router", bench_router},
    {"router_fwd_bwd", bench_router_fwd_bwd},
    {"aux_loss", bench_aux_loss},
    {"gemm1", bench_gemm1},
    {"gemm2", bench_gemm2},
    {"gemm1_fp8", bench_gemm1_fp8},
    {"gemm2_fp8", bench_gemm2_fp8},
    {"gemm1_dgrad", bench_gemm1_dgrad},
    {"gemm1_wgrad", bench_gemm1_wgrad},
    {"permute", bench_permute},
    {"unpermute", bench_unpermute},
    {"layer_fwd", bench_layer_fwd},
    {"layer_fwd_bwd", bench_layer_fwd_bwd},
};

#define REPS 200
#define WARMUP 20
#define BUDGET_MS 2000.0f /* timed calls of one configuration, at most (but MIN_REPS) */
#define MIN_REPS 20
#define GRAPH_CALLS 20    /* calls in one graph under --graph (peers.py's GRAPH_CALLS) */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static int graph_method; /* --graph */
static char graph_error[200]; /* why the last bench_time_op returned NAN */

/* What one timed call is: op on stream s, or a replay of graph on s. */
typedef struct timed {
  bench_op_fn op;
  void *ctx;
  CUgraphExec graph;
  CUstream s;
} timed;

static void run_timed(const timed *t) {
  if (t->graph) CU(gpu_drv->cuGraphLaunch(t->graph, t->s));
  else t->op(t->ctx, t->s);
}

/* Median ms of one timed call: one call measures how many fit BUDGET_MS
 * (REPS at most, MIN_REPS at least), then each is timed alone with events,
 * the L2 flushed by a memset before it. */
static float median_ms(const timed *t, void *flush) {
  CUevent ev[2 * REPS];
  for (int i = 0; i < 2 * REPS; i++) CU(gpu_drv->cuEventCreate(&ev[i], 0));
  CU(gpu_drv->cuEventRecord(ev[0], t->s));
  run_timed(t);
  CU(gpu_drv->cuEventRecord(ev[1], t->s));
  CU(gpu_drv->cuEventSynchronize(ev[1]));
  float one;
  CU(gpu_drv->cuEventElapsedTime(&one, ev[0], ev[1]));
  int reps = one * REPS <= BUDGET_MS ? REPS : (int)(BUDGET_MS / one);
  if (reps < MIN_REPS) reps = MIN_REPS;
  for (int i = 0; i < reps; i++) {
    CU(gpu_drv->cuMemsetD8Async((CUdeviceptr)(uintptr_t)flush, (unsigned char)i, BENCH_FLUSH_BYTES,
                                t->s));
    CU(gpu_drv->cuEventRecord(ev[2 * i], t->s));
    run_timed(t);
    CU(gpu_drv->cuEventRecord(ev[2 * i + 1], t->s));
  }
  CU(gpu_drv->cuCtxSynchronize());
  float ms[REPS];
  for (int i = 0; i < reps; i++) CU(gpu_drv->cuEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (int i = 0; i < 2 * REPS; i++) gpu_drv->cuEventDestroy(ev[i]);
  qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
  return ms[reps / 2];
}

/* Per call ms of GRAPH_CALLS back-to-back calls of op captured in one CUDA
 * graph (peers.py's graph method: median replay / GRAPH_CALLS); NAN with
 * graph_error set if op fails or cannot be captured. */
static float time_graph(bench_op_fn op, void *ctx, void *flush) {
  CUstream s;
  CU(gpu_drv->cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));
  moegen_status st = MOEGEN_OK;
  for (int i = 0; i < 3 && st == MOEGEN_OK; i++) st = op(ctx, s); /* warm, outside the capture */
  CU(gpu_drv->cuStreamSynchronize(s));
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  CUresult r = st == MOEGEN_OK ? gpu_drv->cuStreamBeginCapture(s, 1 /* THREAD_LOCAL */) : 0;
  for (int i = 0; i < GRAPH_CALLS && st == MOEGEN_OK && !r; i++) st = op(ctx, s);
  if (st == MOEGEN_OK && !r) r = gpu_drv->cuStreamEndCapture(s, &g);
  else if (!r) gpu_drv->cuStreamEndCapture(s, &g); /* ends the failed capture */
  if (st == MOEGEN_OK && !r) r = gpu_drv->cuGraphInstantiate(&e, g, 0);
  float result = NAN;
  if (st != MOEGEN_OK || r) {
    char why[160] = "";
    if (r) moegen_driver_describe(r, why, sizeof why);
    snprintf(graph_error, sizeof graph_error, "not capturable: %s",
             st != MOEGEN_OK ? moegen_status_string(st) : why);
  } else {
    result = median_ms(&(timed){NULL, NULL, e, s}, flush) / GRAPH_CALLS;
  }
  if (e) gpu_drv->cuGraphExecDestroy(e);
  if (g) gpu_drv->cuGraphDestroy(g);
  CU(gpu_drv->cuStreamSynchronize(s));
  gpu_drv->cuStreamDestroy(s);
  return result;
}

float bench_time_op(bench_op_fn op, void *ctx, void *flush) {
  if (graph_method) return time_graph(op, ctx, flush);
  for (int i = 0; i < WARMUP - 1; i++) op(ctx, NULL); /* the last warm-up is median_ms's measure */
  return median_ms(&(timed){op, ctx, NULL, NULL}, flush);
}

static moegen_router_bwd_mode router_bwd_mode; /* --router-bwd */

moegen_config bench_config_of(const bench_model *md) {
  moegen_config c = layer_config(md, md->name);
  c.router_bwd = router_bwd_mode;
  return c;
}

const char *bench_router_bwd_json(void) {
  return router_bwd_mode == MOEGEN_ROUTER_BWD_RECOMPUTE ? ", \"router_bwd\": \"recompute\""
                                                        : ", \"router_bwd\": \"saved\"";
}

int bench_config_fp8(const bench_model *md, moegen_config *c) {
  if (md->H % MOEGEN_FP8_BLOCK || md->F % MOEGEN_FP8_BLOCK) return 0;
  *c = bench_config_of(md);
  c->recipe = MOEGEN_RECIPE_FP8_BLOCK;
  return 1;
}

/* ", \"method\": \"graph\"" under --graph, else "". */
static const char *method_json(void) { return graph_method ? ", \"method\": \"graph\"" : ""; }

void bench_error_peer(const char *stage, const char *peer, const bench_model *md, int T,
                      const char *why) {
  printf("{\"stage\": \"%s\", \"peer\": \"%s\", \"model\": \"%s\", \"tokens\": %d%s, "
         "\"error\": \"%s\"}\n", stage, peer, md->name, T, method_json(), why);
  fflush(stdout);
}

void bench_error(const char *stage, const bench_model *md, int T, const char *why) {
  bench_error_peer(stage, "moegen", md, T, why);
}

void bench_peer_result(const char *stage, const char *peer, const bench_model *md, int T, float ms,
                       const char *extra) {
  if (isnan(ms)) {
    bench_error_peer(stage, peer, md, T, graph_error);
    return;
  }
  printf("{\"stage\": \"%s\", \"peer\": \"%s\", \"model\": \"%s\", \"tokens\": %d%s, "
         "\"ms\": %.6f%s}\n", stage, peer, md->name, T, method_json(), ms, extra);
  fflush(stdout);
}

void bench_result(const char *stage, const bench_model *md, int T, float ms, const char *extra) {
  bench_peer_result(stage, "moegen", md, T, ms, extra);
}

static const char *bench_arch; /* --arch, or NULL: the device's */

moegen_module *bench_module(const bench_model *md, const char *stage, int T) {
  moegen_config c = bench_config_of(md);
  return bench_module_of(&c, md, stage, T);
}

moegen_module *bench_module_of(const moegen_config *c, const bench_model *md, const char *stage, int T) {
  moegen_error err = {0};
  moegen_module *m = NULL;
  moegen_status st = moegen_jit(c, bench_arch, &m, &err);
  if (st == MOEGEN_OK) st = moegen_module_load(m);
  if (st != MOEGEN_OK) {
    bench_error(stage, md, T, moegen_status_string(st));
    moegen_module_destroy(m);
    return NULL;
  }
  return m;
}

static int listed(const char *list, const char *name) {
  if (!list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* --warm-cache: compiles the listed models' modules for --arch into the JIT
 * cache (moegen_jit_warm; no GPU needed), so that a run on the GPU machine
 * with the same cache directory compiles nothing. 0, or 1 on the first error. */
static int warm_cache(const char *model_list) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    if (!listed(model_list, models[i].name)) continue;
    for (int fp8 = 0; fp8 < 2; fp8++) { /* the bf16 module, then the fp8_block one (the *_fp8 stages) */
      moegen_config c = bench_config_of(&models[i]);
      if (fp8 && !bench_config_fp8(&models[i], &c)) continue;
      moegen_error err = {0};
      int compiled = 0;
      if (moegen_jit_warm(&c, bench_arch, &compiled, &err) != MOEGEN_OK) {
        fprintf(stderr, "moegen-bench: %s: %s\n", models[i].name, err.msg);
        return 1;
      }
      fprintf(stderr, "moegen-bench: %s%s for %s: %d kernels compiled into the cache (0: all were "
              "there)\n", models[i].name, fp8 ? " (fp8_block)" : "", bench_arch, compiled);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *model_list = NULL, *token_list = "256,4096,16384", *stage_list = "router";
  int warm = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--models") && i + 1 < argc) model_list = argv[++i];
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) token_list = argv[++i];
    else if (!strcmp(argv[i], "--stages") && i + 1 < argc) stage_list = argv[++i];
    else if (!strcmp(argv[i], "--arch") && i + 1 < argc) bench_arch = argv[++i];
    else if (!strcmp(argv[i], "--warm-cache")) warm = 1;
    else if (!strcmp(argv[i], "--graph")) graph_method = 1;
    else if (!strcmp(argv[i], "--router-bwd") && i + 1 < argc && !strcmp(argv[i + 1], "saved")) i++;
    else if (!strcmp(argv[i], "--router-bwd") && i + 1 < argc && !strcmp(argv[i + 1], "recompute"))
      i++, router_bwd_mode = MOEGEN_ROUTER_BWD_RECOMPUTE;
    else {
      fprintf(stderr, "usage: moegen-bench [--models a,b] [--tokens 256,4096] [--stages");
      for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++)
        fprintf(stderr, "%s%s", s ? "," : " ", stages[s].name);
      fprintf(stderr, "] [--arch sm_XY] [--warm-cache] [--graph] [--router-bwd saved|recompute]\n");
      return 64;
    }
  }
  if (warm) return warm_cache(model_list);
  gpu_init_or_skip();
  rng_seed();
  void *flush = gpu_alloc(BENCH_FLUSH_BYTES);
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    if (!listed(model_list, models[i].name)) continue;
    for (const char *p = token_list; *p;) {
      int T = (int)strtol(p, (char **)&p, 10);
      if (*p == ',') p++;
      for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++)
        if (listed(stage_list, stages[s].name)) stages[s].run(&models[i], T, flush);
    }
  }
  gpu_free(flush);
  return 0;
}
