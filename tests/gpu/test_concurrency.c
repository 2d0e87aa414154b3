/* GPU test: the runtime driven from two host threads at once, as a user
 * with two streams would. Two threads (pthreads), each with its own stream
 * and buffers, run moegen_layer_fwd + moegen_layer_bwd ROUNDS times at once,
 * over every token count of the list (T = 0 with NULL data pointers too)
 * and both weight-grad modes (bf16, fp32 accumulate into main_grad); every
 * output (y, dx, dlogits, dw1, dw2) must equal, bit for bit (memcmp), that
 * of a serial run of the same inputs done first on the main thread.
 *
 *  - phase 1: thread 0 drives a fresh module of config A, thread 1 one of
 *    config B (each thread owns its module): their first calls load the
 *    modules' units (the lazy per-device set-up of runtime/module.c) at once.
 *  - phase 2: both threads drive one fresh module of config A (two input
 *    sets): the lazy load and set-up of one module raced by two threads.
 *
 * The serial reference is run twice (it must be deterministic: the layer's
 * route-weight gradient is summed with fp32 atomics, see
 * moegen_layer_bwd; these configs give each row at most two nonzero
 * addends onto 0, so the sum is the same either way: F <= 64 is one
 * output tile of the sm_90a dgrad + SwiGLU kernel and at most two warps of
 * the portable one) and checked against the CPU reference
 * (tests/ref/layer_ref.c, layer_test.h tolerances). Outputs are poisoned
 * before every run (saved and workspace are not: initcheck sees a read of
 * scratch the layer did not write). Inputs are fresh random values (gpu.h
 * seed). In small-shape mode (gpu.h) T runs over MOEGEN_TEST_TOKENS.
 * Exit 77 (skipped) without a device. */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "layer_ref.h"
#include "layer_test.h"
#include "moegen/moegen.h"

/* Rounds each thread runs per phase: every (T, accumulate) pair twice. */
#define ROUNDS_PER_PAIR 2

/* The two configs. F <= 64 keeps dlogits deterministic (top); F = 64
 * also keeps every GEMM dimension at least one 64-wide TMA box. */
static const layer_model specs[2] = {
    {"A: sigmoid E=64 K=6, 8 groups keep 3, bias, x2.5, H=264 F=64", 64, 6, 264, 64, 8, 3, 1, 0,
     MOEGEN_SCORE_SIGMOID, 2.5},
    {"B: softmax pre E=32 K=4, H=136 F=64", 32, 4, 136, 64, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0},
};

static moegen_config config_of(const layer_model *ls) { return layer_config(ls, "conctest"); }

/* The token counts (into tokens[]) and their largest, the bound every
 * buffer is sized for. */
static int ntok, max_T, tokens[GPU_MAX_TOKENS];

/* One input set of one config, its buffers, its stream, and the serial
 * run's outputs. Owned by one thread at a time. */
typedef struct job {
  const layer_model *ls;
  moegen_config c;
  moegen_layer_shape sh;                     /* at max_T */
  size_t n1, n2;                             /* elements of w1 [E, 2F, H], w2 [E, H, F] */
  float *hx, *hlogits, *hbias, *hw1, *hw2, *hdy; /* host copies (bf16 values; bias fp32) */
  void *x, *logits, *w1, *w2, *dy;           /* device inputs: [max_T, H], [max_T, E], w1, w2, [max_T, H] */
  float *bias;                               /* device [E] */
  void *y, *dx, *dlogits;                    /* device outputs [max_T, H], [max_T, H], [max_T, E] bf16 */
  void *dw1, *dw2;                           /* device [E, 2F, H], [E, H, F]: bf16 or fp32 (room for fp32) */
  void *saved, *ws;                          /* sh.saved_bytes, sh.workspace_bytes */
  CUstream stream;                           /* non-blocking */
  unsigned char *ref[GPU_MAX_TOKENS][2];     /* serial outputs of tokens[t], accumulate a (out_bytes) */
} job;

/* Bytes of one run's outputs at T tokens: y, dx, dlogits, dw1, dw2 in that
 * order (the weight grads fp32 with accumulate, else bf16). */
static size_t out_bytes(const job *j, int T, int acc) {
  return 2 * ((size_t)T * j->c.hidden * 2 + (size_t)T * j->c.experts) +
         (acc ? 4 : 2) * (j->n1 + j->n2);
}

/* Job j of config ls (m: a module of it, for the layer's shape at max_T):
 * fresh random inputs on the host and the device, outputs, saved and
 * workspace allocated (not written), its stream. */
static void make_job(job *j, const layer_model *ls, const moegen_module *m) {
  memset(j, 0, sizeof *j);
  j->ls = ls;
  j->c = config_of(ls);
  moegen_layer_shape_of(moegen_module_image(m), max_T, &j->sh);
  const int E = ls->E, H = ls->H, F = ls->F;
  const size_t nx = (size_t)max_T * H, nl = (size_t)max_T * E;
  j->n1 = (size_t)E * 2 * F * H;
  j->n2 = (size_t)E * H * F;
  j->hx = malloc(4 * nx + 4), j->hlogits = malloc(4 * nl + 4), j->hdy = malloc(4 * nx + 4);
  j->hbias = malloc(4 * (size_t)E), j->hw1 = malloc(4 * j->n1), j->hw2 = malloc(4 * j->n2);
  j->x = gpu_alloc(2 * nx), j->logits = gpu_alloc(2 * nl), j->dy = gpu_alloc(2 * nx);
  j->bias = gpu_alloc(4 * (size_t)E), j->w1 = gpu_alloc(2 * j->n1), j->w2 = gpu_alloc(2 * j->n2);
  j->y = gpu_alloc(2 * nx), j->dx = gpu_alloc(2 * nx), j->dlogits = gpu_alloc(2 * nl);
  j->dw1 = gpu_alloc(4 * j->n1), j->dw2 = gpu_alloc(4 * j->n2);
  j->saved = gpu_alloc(j->sh.saved_bytes), j->ws = gpu_alloc(j->sh.workspace_bytes);
  fill_bf16(j->hx, j->x, nx, 1.0f);
  fill_bf16(j->hlogits, j->logits, nl, 2.0f);
  fill_bf16(j->hdy, j->dy, nx, 1.0f);
  fill_bf16(j->hw1, j->w1, j->n1, 1.0f / sqrtf((float)H));
  fill_bf16(j->hw2, j->w2, j->n2, 1.0f / sqrtf((float)F));
  for (int e = 0; e < E; e++) j->hbias[e] = 0.1f * rng_normal();
  gpu_put(j->bias, j->hbias, 4 * (size_t)E);
  CU(gpu_drv->cuStreamCreate(&j->stream, MOEGEN_CU_STREAM_NON_BLOCKING));
}

/* Frees what make_job and serial_reference made. */
static void free_job(job *j) {
  free(j->hx), free(j->hlogits), free(j->hdy), free(j->hbias), free(j->hw1), free(j->hw2);
  void *dev[] = {j->x, j->logits, j->dy, j->bias, j->w1, j->w2, j->y, j->dx, j->dlogits,
                 j->dw1, j->dw2, j->saved, j->ws};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu_free(dev[i]);
  for (int t = 0; t < ntok; t++) free(j->ref[t][0]), free(j->ref[t][1]);
  if (j->stream) gpu_drv->cuStreamDestroy(j->stream);
}

/* One layer forward + backward of job j at T tokens (accumulate acc) on
 * module m and j's stream: the outputs poisoned first and main_grad set to
 * 1.5 (acc = 1), both on the stream; then the host waits for the stream
 * and copies the outputs into out (out_bytes(j, T, acc)). At T = 0 every
 * [T, ...] pointer, saved and workspace are NULL (the op allows it).
 * Safe on any thread whose current context is the test's. Returns 0, or -1
 * with the reason in why. */
static int run_once(moegen_module *m, job *j, int T, int acc, unsigned char *out, char *why,
                    size_t why_size) {
  const moegen_driver *d = gpu_drv;
  const size_t nx = (size_t)T * j->c.hidden, nl = (size_t)T * j->c.experts;
  const int have = T > 0;
  CUstream s = j->stream;
  CUresult r = 0;
  if (nx) r = d->cuMemsetD8Async((CUdeviceptr)(uintptr_t)j->y, 0xff, 2 * nx, s);
  if (!r && nx) r = d->cuMemsetD8Async((CUdeviceptr)(uintptr_t)j->dx, 0xff, 2 * nx, s);
  if (!r && nl) r = d->cuMemsetD8Async((CUdeviceptr)(uintptr_t)j->dlogits, 0xff, 2 * nl, s);
  if (!r && acc) r = d->cuMemsetD32Async((CUdeviceptr)(uintptr_t)j->dw1, 0x3fc00000u, j->n1, s);
  if (!r && acc) r = d->cuMemsetD32Async((CUdeviceptr)(uintptr_t)j->dw2, 0x3fc00000u, j->n2, s);
  if (!r && !acc) r = d->cuMemsetD8Async((CUdeviceptr)(uintptr_t)j->dw1, 0xff, 2 * j->n1, s);
  if (!r && !acc) r = d->cuMemsetD8Async((CUdeviceptr)(uintptr_t)j->dw2, 0xff, 2 * j->n2, s);
  if (r) {
    snprintf(why, why_size, "poisoning the outputs: CUresult %d", (int)r);
    return -1;
  }
  moegen_layer_fwd_args fa = {.num_tokens = T, .max_tokens = max_T,
                              .x = have ? j->x : NULL, .logits = have ? j->logits : NULL,
                              .expert_bias = have && j->c.expert_bias ? j->bias : NULL,
                              .w1 = have ? j->w1 : NULL, .w2 = have ? j->w2 : NULL,
                              .y = have ? j->y : NULL, .saved = have ? j->saved : NULL,
                              .saved_bytes = have ? j->sh.saved_bytes : 0,
                              .workspace = have ? j->ws : NULL,
                              .workspace_bytes = have ? j->sh.workspace_bytes : 0};
  moegen_layer_bwd_args ba = {.num_tokens = T, .max_tokens = max_T,
                              .dy = have ? j->dy : NULL, .w1 = fa.w1, .w2 = fa.w2,
                              .saved = fa.saved, .saved_bytes = fa.saved_bytes,
                              .dx = have ? j->dx : NULL, .dlogits = have ? j->dlogits : NULL,
                              .dw1 = j->dw1, .dw2 = j->dw2, .accumulate = acc,
                              .workspace = fa.workspace, .workspace_bytes = fa.workspace_bytes};
  moegen_status st = moegen_layer_fwd(m, &fa, s);
  if (st == MOEGEN_OK) st = moegen_layer_bwd(m, &ba, s);
  if (st != MOEGEN_OK) {
    snprintf(why, why_size, "layer %s: %s", moegen_status_string(st), moegen_module_last_error(m));
    return -1;
  }
  if ((r = d->cuStreamSynchronize(s)) != 0) {
    snprintf(why, why_size, "cuStreamSynchronize: CUresult %d", (int)r);
    return -1;
  }
  const size_t w = acc ? 4 : 2;
  const struct { const void *dev; size_t bytes; } part[5] = {
      {j->y, 2 * nx}, {j->dx, 2 * nx}, {j->dlogits, 2 * nl}, {j->dw1, w * j->n1}, {j->dw2, w * j->n2}};
  for (int i = 0; i < 5; i++) { /* the stream is idle: a copy on the legacy stream sees its writes */
    if (part[i].bytes && (r = d->cuMemcpyDtoH(out, (CUdeviceptr)(uintptr_t)part[i].dev, part[i].bytes))) {
      snprintf(why, why_size, "cuMemcpyDtoH: CUresult %d", (int)r);
      return -1;
    }
    out += part[i].bytes;
  }
  return 0;
}

/* The serial outputs of job j against the CPU reference: both modes, the
 * y, dx and dlogits of accumulate = 1 bit-identical to those of 0, and
 * main_grad = 1.5 + the weight grads. */
static void verify_reference(job *j) {
  const int E = j->c.experts, H = j->c.hidden;
  for (int t = 0; t < ntok; t++) {
    const int T = tokens[t];
    const size_t nx = (size_t)T * H, nl = (size_t)T * E;
    float *y = malloc(4 * nx + 4), *dx = malloc(4 * nx + 4), *dl = malloc(4 * nl + 4);
    float *dw1 = malloc(4 * j->n1), *dw2 = malloc(4 * j->n2);
    layer_ref_io io = {T, j->hx, j->hlogits, j->c.expert_bias ? j->hbias : NULL, j->hw1, j->hw2, j->hdy};
    layer_ref_fwd(&j->c, &io, y);
    layer_ref_bwd(&j->c, &io, dx, dl, dw1, dw2);
    char what[160];
    int ok = 1;
    for (int acc = 0; acc < 2; acc++) {
      const unsigned char *o = j->ref[t][acc];
      const size_t w = acc ? 4 : 2;
      if (acc) { /* main_grad = 1.5 + grad */
        for (size_t i = 0; i < j->n1; i++) dw1[i] += 1.5f;
        for (size_t i = 0; i < j->n2; i++) dw2[i] += 1.5f;
      }
      snprintf(what, sizeof what, "%s T=%d%s", j->ls->name, T, acc ? " main_grad" : "");
      const size_t at_dl = 4 * nx, at_w1 = at_dl + 2 * nl, at_w2 = at_w1 + w * j->n1;
      if (!acc) {
        ok &= layer_compare("serial y", o, 0, y, nx);
        ok &= layer_compare("serial dx", o + 2 * nx, 0, dx, nx);
        ok &= layer_compare("serial dlogits", o + at_dl, 0, dl, nl);
      } else if (memcmp(o, j->ref[t][0], at_w1) != 0) {
        printf("  FAIL %s: y, dx or dlogits differ from those of accumulate = 0\n", what);
        ok = 0;
      }
      ok &= layer_compare(acc ? "serial dw1 (fp32 +=)" : "serial dw1", o + at_w1, acc, dw1, j->n1);
      ok &= layer_compare(acc ? "serial dw2 (fp32 +=)" : "serial dw2", o + at_w2, acc, dw2, j->n2);
      if (!ok) break;
    }
    printf("%s serial reference %s T=%d against the CPU reference\n", ok ? "ok  " : "FAIL",
           j->ls->name, T);
    failures += !ok;
    free(y), free(dx), free(dl), free(dw1), free(dw2);
  }
}

/* The serial run of job j on module m (main thread), twice per (T, mode):
 * both must agree bit for bit (else the layer is not deterministic for
 * this config and the test cannot compare bits: a failure); kept in j->ref. */
static int serial_reference(moegen_module *m, job *j) {
  char why[512];
  for (int t = 0; t < ntok; t++)
    for (int acc = 0; acc < 2; acc++) {
      const size_t n = out_bytes(j, tokens[t], acc);
      unsigned char *again = malloc(n + 1);
      j->ref[t][acc] = malloc(n + 1);
      int rc = run_once(m, j, tokens[t], acc, j->ref[t][acc], why, sizeof why);
      if (rc == 0) rc = run_once(m, j, tokens[t], acc, again, why, sizeof why);
      const int same = rc == 0 && memcmp(again, j->ref[t][acc], n) == 0;
      free(again);
      if (rc) {
        printf("FAIL serial %s T=%d accumulate=%d: %s\n", j->ls->name, tokens[t], acc, why);
        failures++;
        return -1;
      }
      if (!same) {
        printf("FAIL serial %s T=%d accumulate=%d: two serial runs differ: the layer is not "
               "deterministic for this config, so the test cannot compare bits\n",
               j->ls->name, tokens[t], acc);
        failures++;
        return -1;
      }
    }
  verify_reference(j);
  return 0;
}

/* What one thread does in a phase, and what it found. */
typedef struct worker {
  CUcontext ctx;             /* made current on the thread */
  moegen_module *m;          /* its module (or the one both share) */
  job *j;                    /* its inputs, buffers and stream */
  pthread_barrier_t *start;  /* both threads start their rounds together */
  int rounds, runs, mismatches;
  char first[640];           /* the first failure, if any */
} worker;

/* Runs w->rounds layer forward + backward rounds over every (T, mode),
 * comparing each run's outputs with the serial ones. */
static void *work(void *arg) {
  worker *w = arg;
  job *j = w->j;
  const moegen_driver *d = gpu_drv;
  size_t most = 0;
  for (int t = 0; t < ntok; t++) {
    size_t n = out_bytes(j, tokens[t], 1);
    most = n > most ? n : most;
  }
  unsigned char *out = malloc(most + 1);
  CUresult r = d->cuCtxSetCurrent(w->ctx);
  pthread_barrier_wait(w->start);
  if (r) snprintf(w->first, sizeof w->first, "cuCtxSetCurrent: CUresult %d", (int)r);
  for (int i = 0; i < w->rounds && !r; i++) {
    const int t = i % ntok, acc = i / ntok % 2, T = tokens[t];
    char why[512];
    if (run_once(w->m, j, T, acc, out, why, sizeof why) != 0) {
      snprintf(w->first, sizeof w->first, "round %d (T=%d, accumulate=%d): %s", i, T, acc, why);
      w->mismatches++;
      break;
    }
    w->runs++;
    if (memcmp(out, j->ref[t][acc], out_bytes(j, T, acc)) != 0) {
      if (!w->mismatches)
        snprintf(w->first, sizeof w->first,
                 "round %d (T=%d, accumulate=%d): outputs differ from the serial run's", i, T, acc);
      w->mismatches++;
    }
  }
  free(out);
  return NULL;
}

/* Two threads at once: thread i drives module m[i] with job j[i]. */
static void run_phase(const char *what, CUcontext ctx, moegen_module *m0, job *j0,
                      moegen_module *m1, job *j1) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  const int rounds = ROUNDS_PER_PAIR * 2 * ntok;
  worker w[2] = {{.ctx = ctx, .m = m0, .j = j0, .start = &start, .rounds = rounds},
                 {.ctx = ctx, .m = m1, .j = j1, .start = &start, .rounds = rounds}};
  pthread_t th[2];
  int started = 0;
  for (; started < 2; started++)
    if (pthread_create(&th[started], NULL, work, &w[started]) != 0) break;
  if (started < 2) { /* the other thread waits at the barrier: run this one here */
    printf("FAIL %s: pthread_create failed\n", what);
    failures++;
    if (started == 1) work(&w[1]);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  int ok = started == 2;
  for (int i = 0; i < 2; i++) {
    if (w[i].mismatches || w[i].runs != rounds) {
      printf("  FAIL thread %d (%s): %d of %d runs, %d mismatched or failed; first: %s\n", i,
             w[i].j->ls->name, w[i].runs, rounds, w[i].mismatches, w[i].first);
      ok = 0;
    }
  }
  failures += !ok;
  printf("%s %s: two threads, %d rounds each, bit-identical to the serial run\n",
         ok ? "ok  " : "FAIL", what, rounds);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {0, 1, 77, 300};
  ntok = gpu_tokens(own_tokens, sizeof own_tokens / sizeof own_tokens[0], tokens);
  for (int t = 0; t < ntok; t++) max_T = tokens[t] > max_T ? tokens[t] : max_T;
  moegen_config cfg[2] = {config_of(&specs[0]), config_of(&specs[1])};
  /* The serial run's modules, loaded up front; then the fresh ones of the
   * phases (units = 0: nothing loaded until the threads' first calls). */
  moegen_module *ref[2], *fresh[3];
  for (int i = 0; i < 2; i++) ref[i] = test_jit(&cfg[i], LAYER_UNITS, specs[i].name);
  for (int i = 0; i < 3; i++) fresh[i] = test_jit(&cfg[i == 1], 0, specs[i == 1].name);
  if (ref[0] && ref[1] && fresh[0] && fresh[1] && fresh[2]) {
    CUcontext ctx;
    CU(gpu_drv->cuCtxGetCurrent(&ctx));
    job jobs[3]; /* A, B, and A with other inputs */
    for (int i = 0; i < 3; i++) make_job(&jobs[i], &specs[i == 1], ref[i == 1]);
    CU(gpu_drv->cuCtxSynchronize()); /* the uploads ran on the legacy stream */
    int ready = 1;
    for (int i = 0; i < 3; i++) ready &= serial_reference(ref[i == 1], &jobs[i]) == 0;
    if (ready) {
      run_phase("phase 1: modules A and B, one a thread", ctx, fresh[0], &jobs[0], fresh[1], &jobs[1]);
      run_phase("phase 2: one module A shared by both threads", ctx, fresh[2], &jobs[0], fresh[2],
                &jobs[2]);
    }
    for (int i = 0; i < 3; i++) free_job(&jobs[i]);
  }
  for (int i = 0; i < 2; i++) moegen_module_destroy(ref[i]);
  for (int i = 0; i < 3; i++) moegen_module_destroy(fresh[i]);
  printf("%s\n", failures ? "concurrency GPU test FAILED" : "concurrency GPU test passed");
  return failures ? 1 : 0;
}
