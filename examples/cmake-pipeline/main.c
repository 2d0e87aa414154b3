/* examples/cmake-pipeline/main.c -- runs the module that moegen_generate()
 * built into this program (example_moe.lua, AOT): the router forward on
 * T = 1000 tokens of random logits, then the experts' two grouped GEMMs
 * (EXAMPLE_ARCH, sm_90a by default; any arch from sm_80 has them) on T*K rows grouped by the router's per-expert counts,
 * which the GEMMs read on the device.
 *
 * Checks what holds for any data: each token's K expert indices are distinct,
 * in [0, E) and in at most group_topk groups; its K weights are positive and
 * sum to the scaling factor (normalized configs; at most that otherwise);
 * the counts are the histogram of the indices and sum to T*K; every GEMM
 * output row is written and sampled rows match a CPU product (inputs chosen
 * so the fp32 sums are exact: SPEC.md 6's 1e-5 + 1.6e-2 |ref|).
 * Exit status: 0 all checks pass, 1 a check failed, 77 no usable GPU. */
#include <math.h>
#include <stdbool.h>

#include "example.h"
#include "example_moe.h" /* generated: EXAMPLE_MOE_*, example_moe_module_create() */

#define T 1000           /* tokens */
#define SAMPLED_ROWS 64  /* GEMM output rows checked against the CPU */

static int failures;

static void check(bool ok, const char *what, int where) {
  if (!ok && failures++ < 10) printf("FAIL: %s (at %d)\n", what, where);
}

/* Router forward on random logits; checks the invariants and returns the
 * per-expert counts (device [E] int32, and on the host in counts). */
static int32_t *run_router(moegen_module *m, cudaStream_t stream, int32_t *counts) {
  const int E = EXAMPLE_MOE_EXPERTS, K = EXAMPLE_MOE_TOPK;
  char v[64];
  double scaling = atof(example_config_value(m, "scaling", v, sizeof v));
  int groups = atoi(example_config_value(m, "groups", v, sizeof v));
  int group_topk = atoi(example_config_value(m, "group_topk", v, sizeof v));
  bool softmax = strcmp(example_config_value(m, "score", v, sizeof v), "\"softmax\"") == 0;
  bool pre = strcmp(example_config_value(m, "pre_softmax", v, sizeof v), "true") == 0;
  bool normalized = !pre && (softmax || K > 1); /* SPEC.md 1, step 4 */

  moegen_router_fwd_shape shape;
  example_check(moegen_router_fwd_shape_of(moegen_module_image(m), T, &shape), m, "router shape");
  uint16_t *logits = malloc(2 * (size_t)T * E);
  float bias[EXAMPLE_MOE_EXPERTS];
  for (size_t i = 0; i < (size_t)T * E; i++) logits[i] = example_f32_to_bf16(4 * example_uniform());
  for (int e = 0; e < E; e++) bias[e] = 0.1f * example_uniform();

  void *d_logits;
  float *d_bias, *d_weights;
  int32_t *d_indices, *d_counts;
  CUDA_CHECK(cudaMalloc(&d_logits, 2 * (size_t)T * E));
  CUDA_CHECK(cudaMalloc((void **)&d_bias, sizeof bias));
  size_t tk = (size_t)(shape.topk_indices[0] * shape.topk_indices[1]); /* [T, K] */
  CUDA_CHECK(cudaMalloc((void **)&d_indices, 4 * tk));
  CUDA_CHECK(cudaMalloc((void **)&d_weights, 4 * tk));
  CUDA_CHECK(cudaMalloc((void **)&d_counts, 4 * (size_t)shape.expert_counts[0]));
  CUDA_CHECK(cudaMemcpy(d_logits, logits, 2 * (size_t)T * E, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_bias, bias, sizeof bias, cudaMemcpyHostToDevice));

  moegen_router_fwd_args a = {
      .num_tokens = T,
      .logits = d_logits,                                  /* [T, E] bf16 */
      .expert_bias = EXAMPLE_MOE_HAS_EXPERT_BIAS ? d_bias : NULL, /* [E] fp32 */
      .topk_indices = d_indices,                           /* [T, K] int32 */
      .index_dtype = MOEGEN_INDEX_INT32,
      .topk_weights = d_weights,                           /* [T, K] fp32 */
      .expert_counts = d_counts,                           /* [E] int32 */
  };
  example_check(moegen_router_fwd(m, &a, (CUstream)stream), m, "router forward");
  CUDA_CHECK(cudaStreamSynchronize(stream));

  int32_t *idx = malloc(4 * (size_t)T * K);
  float *w = malloc(4 * (size_t)T * K);
  CUDA_CHECK(cudaMemcpy(idx, d_indices, 4 * (size_t)T * K, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(w, d_weights, 4 * (size_t)T * K, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(counts, d_counts, 4 * (size_t)E, cudaMemcpyDeviceToHost));

  int hist[EXAMPLE_MOE_EXPERTS] = {0};
  for (int t = 0; t < T; t++) {
    bool seen[EXAMPLE_MOE_EXPERTS] = {false}, group_used[64] = {false};
    int groups_used = 0;
    double sum = 0;
    for (int k = 0; k < K; k++) {
      int e = idx[t * K + k];
      check(e >= 0 && e < E, "expert index out of range", t);
      if (e < 0 || e >= E) continue;
      check(!seen[e], "expert selected twice by one token", t);
      seen[e] = true;
      hist[e]++;
      if (groups > 0 && !group_used[e / (E / groups)]) {
        group_used[e / (E / groups)] = true;
        groups_used++;
      }
      check(w[t * K + k] > 0, "weight not positive", t);
      sum += w[t * K + k];
    }
    check(groups == 0 || groups_used <= group_topk, "token uses more than group_topk groups", t);
    check(normalized ? fabs(sum - scaling) <= 1e-4 * scaling : sum <= scaling * (1 + 1e-5),
          normalized ? "weights do not sum to the scaling factor" : "weights sum above scaling",
          t);
  }
  long total = 0;
  for (int e = 0; e < E; e++) {
    check(counts[e] == hist[e], "expert count differs from the indices' histogram", e);
    total += counts[e];
  }
  check(total == (long)T * K, "counts do not sum to T*K", (int)total);
  printf("router: T=%d E=%d K=%d: indices, weights (sum %g%s) and counts checked\n", T, E, K,
         scaling, normalized ? "" : " at most");

  free(logits); free(idx); free(w);
  cudaFree(d_logits); cudaFree(d_bias); cudaFree(d_indices); cudaFree(d_weights);
  return d_counts;
}

/* n random values q * {-4, ..., 4} as fp32 (host h) and bf16 (returned,
 * device): with q = 1/4 for x and 1/16 for w every partial sum is exact. */
static void *exact_bf16(float *h, size_t n, float q) {
  uint16_t *b = malloc(2 * n);
  for (size_t i = 0; i < n; i++) {
    b[i] = example_f32_to_bf16(q * (float)((int)(example_rng() % 9) - 4));
    h[i] = example_bf16_to_f32(b[i]);
  }
  void *d;
  CUDA_CHECK(cudaMalloc(&d, 2 * n));
  CUDA_CHECK(cudaMemcpy(d, b, 2 * n, cudaMemcpyHostToDevice));
  free(b);
  return d;
}

/* One grouped GEMM y = x w_e^T over rows grouped by counts (device d_counts,
 * host counts, summing to rows), checked on SAMPLED_ROWS rows. */
static void run_gemm(moegen_module *m, moegen_gemm_id which, int rows, const int32_t *d_counts,
                     const int32_t *counts, cudaStream_t stream) {
  const int E = EXAMPLE_MOE_EXPERTS;
  moegen_gemm_fwd_shape s;
  example_check(moegen_gemm_fwd_shape_of(moegen_module_image(m), which, rows, &s), m,
                "gemm shape");
  int N = (int)s.w[1], Kd = (int)s.w[2];
  float *x = malloc(4 * (size_t)rows * Kd), *w = malloc(4 * (size_t)E * N * Kd);
  uint16_t *y = malloc(2 * (size_t)rows * N);
  void *d_x = exact_bf16(x, (size_t)rows * Kd, 1.0f / 4);
  void *d_w = exact_bf16(w, (size_t)E * N * Kd, 1.0f / 16);
  void *d_y, *d_ws = NULL;
  CUDA_CHECK(cudaMalloc(&d_y, 2 * (size_t)rows * N));
  if (s.workspace_bytes) CUDA_CHECK(cudaMalloc(&d_ws, s.workspace_bytes)); /* sm_90a: the tile ticket */
  CUDA_CHECK(cudaMemset(d_y, 0xff, 2 * (size_t)rows * N)); /* NaN: rows left unwritten show */

  moegen_gemm_fwd_args a = {
      .which = which,
      .max_rows = rows,
      .x = d_x,           /* [rows, K] bf16, rows grouped by expert */
      .w = d_w,           /* [E, N, K] bf16 */
      .y = d_y,           /* [rows, N] bf16 */
      .counts = d_counts, /* [E] int32, the router's, read on the device */
      .workspace = d_ws,  /* scratch of s.workspace_bytes */
      .workspace_bytes = s.workspace_bytes,
  };
  example_check(moegen_gemm_fwd(m, &a, (CUstream)stream), m, "gemm forward");
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(y, d_y, 2 * (size_t)rows * N, cudaMemcpyDeviceToHost));

  for (size_t i = 0; i < (size_t)rows * N; i++)
    if (isnan(example_bf16_to_f32(y[i]))) {
      check(false, "gemm output element not written (NaN)", (int)i);
      break;
    }
  for (int sample = 0; sample < SAMPLED_ROWS && rows > 0; sample++) {
    int r = (int)(example_rng() % (uint64_t)rows), e = 0, first = 0;
    while (e < E - 1 && r >= first + counts[e]) first += counts[e++];
    for (int n = 0; n < N; n++) {
      float ref = 0;
      for (int k = 0; k < Kd; k++) ref += x[(size_t)r * Kd + k] * w[((size_t)e * N + n) * Kd + k];
      float got = example_bf16_to_f32(y[(size_t)r * N + n]);
      check(fabsf(got - ref) <= 1e-5f + 1.6e-2f * fabsf(ref), "gemm output differs from CPU", r);
    }
  }
  printf("gemm%d: %d rows, N=%d K=%d, %d experts: %d sampled rows checked\n", (int)which, rows, N,
         Kd, E, SAMPLED_ROWS);
  free(x); free(w); free(y);
  cudaFree(d_x); cudaFree(d_w); cudaFree(d_y); cudaFree(d_ws);
}

int main(void) {
  example_device_or_skip();
  moegen_module *m = NULL;
  example_check(example_moe_module_create(&m), m, "module create");
  example_check(moegen_module_load(m), m, "module load"); /* no compile: AOT cubins */
  const moegen_image *img = moegen_module_image(m);
  printf("module %s for %s\n", img->name, img->arch);

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  int32_t counts[EXAMPLE_MOE_EXPERTS];
  int32_t *d_counts = run_router(m, stream, counts);
  if (img->units >> MOEGEN_UNIT_GEMM & 1u) { /* the unit is empty without GEMM kernels */
    run_gemm(m, MOEGEN_GEMM1, T * EXAMPLE_MOE_TOPK, d_counts, counts, stream);
    run_gemm(m, MOEGEN_GEMM2, T * EXAMPLE_MOE_TOPK, d_counts, counts, stream);
  } else {
    printf("gemm: not in this module (arch %s), skipped\n", img->arch);
  }
  cudaFree(d_counts);
  CUDA_CHECK(cudaStreamDestroy(stream));
  moegen_module_destroy(m);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
