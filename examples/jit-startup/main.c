/* examples/jit-startup/main.c -- the in-process JIT as a program uses it at
 * start: moegen_jit renders a preset's kernels for the current device and
 * moegen_module_load compiles them with NVRTC (each compile unit on its own
 * thread) or loads them from the on-disk cache. Prints the first load's time
 * (cold: compiled; warm: from the cache), a second module's load (from the
 * cache the first filled), then the time per call of the router forward and
 * of the two grouped GEMM forwards (sm_90 devices) on random data, the GEMMs
 * on the T*K rows grouped by the router's per-expert counts.
 *
 * usage: moegen-jit-startup [PRESET [TOKENS [ITERS]]]
 *        (defaults qwen3-30b-a3b, 1000, 100; moegen --list-presets lists them)
 * MOEGEN_CACHE_DIR=$(mktemp -d) makes the first load cold.
 * Exit status: 0 ok, 1 an error or a failed check, 77 no usable GPU. */
#include <stdatomic.h>

#include "example.h"
#include "preset.h"
#include "moegen/moegen.h"

static atomic_int compiles; /* progress lines: one per unit NVRTC compiles */

/* The runtime's log sink; called from the units' compile threads. */
static void on_log(const char *line, void *user) {
  (void)user;
  atomic_fetch_add(&compiles, 1);
  fprintf(stderr, "%s\n", line);
}

/* moegen_jit + moegen_module_load of cfg, timed and reported as `label`. */
static moegen_module *jit_load(const moegen_config *cfg, const char *label) {
  moegen_error err = {0};
  moegen_module *m = NULL;
  int before = atomic_load(&compiles);
  double t0 = example_now();
  moegen_status st = moegen_jit(cfg, NULL /* the current device's arch */, &m, &err);
  if (st != MOEGEN_OK) printf("moegen_jit: %s\n", err.msg);
  example_check(st, m, "moegen_jit");
  double t1 = example_now();
  example_check(moegen_module_load(m), m, "module load");
  double t2 = example_now();
  int n = atomic_load(&compiles) - before;
  char how[64];
  if (n) snprintf(how, sizeof how, "cold: NVRTC compiled %d unit%s", n, n > 1 ? "s" : "");
  else snprintf(how, sizeof how, "warm: every unit from the disk cache");
  printf("%s: render %.1f ms, load %.1f ms (%s)\n", label, 1e3 * (t1 - t0), 1e3 * (t2 - t1), how);
  return m;
}

/* Runs launch(m, args) `iters` times on stream after one untimed call;
 * returns microseconds per call. */
typedef moegen_status (*launch_fn)(moegen_module *m, const void *args, CUstream stream);
static double time_calls(moegen_module *m, launch_fn launch, const void *args,
                         cudaStream_t stream, int iters, const char *what) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  example_check(launch(m, args, (CUstream)stream), m, what);
  CUDA_CHECK(cudaEventRecord(e0, stream));
  for (int i = 0; i < iters; i++) example_check(launch(m, args, (CUstream)stream), m, what);
  CUDA_CHECK(cudaEventRecord(e1, stream));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return 1e3 * ms / iters;
}

static moegen_status launch_router(moegen_module *m, const void *a, CUstream s) {
  return moegen_router_fwd(m, a, s);
}
static moegen_status launch_gemm(moegen_module *m, const void *a, CUstream s) {
  return moegen_gemm_fwd(m, a, s);
}

int main(int argc, char **argv) {
  const char *preset = argc > 1 ? argv[1] : "qwen3-30b-a3b";
  int T = argc > 2 ? atoi(argv[2]) : 1000, iters = argc > 3 ? atoi(argv[3]) : 100;
  if (T < 1 || iters < 1) {
    fprintf(stderr, "usage: %s [PRESET [TOKENS [ITERS]]]\n", argv[0]);
    return 1;
  }
  moegen_config cfg = example_preset(preset);
  example_device_or_skip(); /* moegen_jit reads the arch of the current device */
  moegen_set_log(on_log, NULL);

  moegen_module *m = jit_load(&cfg, "first module");
  moegen_module_destroy(jit_load(&cfg, "second module"));
  const moegen_image *img = moegen_module_image(m);
  const int E = cfg.experts, K = cfg.topk;
  printf("%s: E=%d K=%d H=%d F=%d, %s; T=%d tokens, %d calls each\n", preset, E, K, cfg.hidden,
         cfg.ffn, img->arch, T, iters);
  if (cfg.logits_dtype != MOEGEN_DTYPE_BF16) {
    printf("FAIL: this example feeds bf16 logits; %s's are another dtype\n", preset);
    return 1;
  }

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  void *d_logits = example_random_bf16((size_t)T * E, 4.0f); /* [T, E] bf16 */
  float *bias = malloc(4 * (size_t)E), *d_bias, *d_weights;
  for (int e = 0; e < E; e++) bias[e] = 0.1f * example_uniform();
  int32_t *d_indices, *d_counts, *counts = malloc(4 * (size_t)E);
  CUDA_CHECK(cudaMalloc((void **)&d_bias, 4 * (size_t)E));
  CUDA_CHECK(cudaMalloc((void **)&d_indices, 4 * (size_t)T * K));
  CUDA_CHECK(cudaMalloc((void **)&d_weights, 4 * (size_t)T * K));
  CUDA_CHECK(cudaMalloc((void **)&d_counts, 4 * (size_t)E));
  CUDA_CHECK(cudaMemcpy(d_bias, bias, 4 * (size_t)E, cudaMemcpyHostToDevice));

  moegen_router_fwd_args ra = {
      .num_tokens = T,
      .logits = d_logits,                            /* [T, E] */
      .expert_bias = cfg.expert_bias ? d_bias : NULL, /* [E] fp32 */
      .topk_indices = d_indices,                     /* [T, K] int32 */
      .topk_weights = d_weights,                     /* [T, K] fp32 */
      .expert_counts = d_counts,                     /* [E] int32 */
  };
  double us = time_calls(m, launch_router, &ra, stream, iters, "router forward");
  printf("router forward: %.2f us/call\n", us);
  CUDA_CHECK(cudaMemcpy(counts, d_counts, 4 * (size_t)E, cudaMemcpyDeviceToHost));
  long total = 0;
  for (int e = 0; e < E; e++) total += counts[e];
  int failed = total != (long)T * K;
  if (failed) printf("FAIL: the expert counts sum to %ld, not T*K = %ld\n", total, (long)T * K);

  if (!(img->units >> MOEGEN_UNIT_GEMM & 1u)) printf("gemm: not in this module (arch %s), skipped\n", img->arch);
  for (int g = 1; (img->units >> MOEGEN_UNIT_GEMM & 1u) && g <= 2; g++) {
    moegen_gemm_fwd_shape s;
    example_check(moegen_gemm_fwd_shape_of(img, (moegen_gemm_id)g, (int64_t)T * K, &s), m,
                  "gemm shape");
    int64_t rows = s.x[0], N = s.w[1], Kd = s.w[2];
    moegen_gemm_fwd_args ga = {
        .which = (moegen_gemm_id)g,
        .max_rows = rows,
        .x = example_random_bf16((size_t)(rows * Kd), 1.0f),   /* [rows, K] */
        .w = example_random_bf16((size_t)(E * N * Kd), 0.05f), /* [E, N, K] */
        .counts = d_counts,                                    /* [E] the router's */
        .workspace_bytes = s.workspace_bytes,                  /* sm_90a: the tile ticket */
    };
    CUDA_CHECK(cudaMalloc(&ga.y, 2 * (size_t)(rows * N)));   /* [rows, N] */
    if (s.workspace_bytes) CUDA_CHECK(cudaMalloc(&ga.workspace, s.workspace_bytes));
    us = time_calls(m, launch_gemm, &ga, stream, iters, "gemm forward");
    printf("gemm%d forward [%lld, %lld] x [%d, %lld, %lld]^T: %.2f us/call, %.1f TFLOP/s\n", g,
           (long long)rows, (long long)Kd, E, (long long)N, (long long)Kd, us,
           2.0 * (double)rows * (double)N * (double)Kd / (us * 1e6));
    cudaFree((void *)ga.x);
    cudaFree((void *)ga.w);
    cudaFree(ga.y);
    cudaFree(ga.workspace);
  }
  cudaFree(d_logits); cudaFree(d_bias); cudaFree(d_indices); cudaFree(d_weights);
  cudaFree(d_counts);
  free(bias);
  free(counts);
  CUDA_CHECK(cudaStreamDestroy(stream));
  moegen_module_destroy(m);
  return failed;
}
