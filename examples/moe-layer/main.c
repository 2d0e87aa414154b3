/* examples/moe-layer/main.c -- a whole MoE layer, forward and backward, on
 * random data: JIT a preset, size the layer's memory once with
 * moegen_layer_shape_of, run moegen_layer_fwd and moegen_layer_bwd, print
 * the time per call, and check CHECK_TOKENS tokens' y against the CPU
 * reference (tests/ref/layer_ref.c, fp64 on the host; every gradient is
 * checked by tests/gpu/test_layer.c, at shapes small enough for a CPU).
 *
 * usage: moegen-moe-layer [PRESET [TOKENS [ITERS]]]
 *        (defaults qwen3-30b-a3b, 512, 20)
 * Exit status: 0 ok, 1 an error or a failed check, 77 no usable GPU (the
 * layer needs an sm_80 or later device). */
#include <math.h>

#include "example.h"
#include "preset.h"
#include "layer_ref.h"
#include "router_ref.h"
#include "moegen/moegen.h"

#define CHECK_TOKENS 4

/* A bf16 tensor on the device and the block it repeats (see example.h). */
typedef struct tensor {
  void *d;
  uint16_t *block;
  size_t n;
} tensor;

static tensor random_tensor(size_t n, float scale) {
  tensor t = {NULL, NULL, n};
  t.d = example_random_bf16_kept(n, scale, &t.block);
  return t;
}

static float value(const tensor *t, size_t i) {
  return example_bf16_to_f32(t->block[i % example_block_of(t->n)]);
}

/* Host copy of elements [off, off + n) of t into h + off. */
static void host_range(const tensor *t, float *h, size_t off, size_t n) {
  for (size_t i = off; i < off + n; i++) h[i] = value(t, i);
}

/* Largest |got - want| over max |want| of n bf16 device values at dev. */
static double rel_error(const void *dev, const float *want, size_t n) {
  uint16_t *h = malloc(2 * n);
  CUDA_CHECK(cudaMemcpy(h, dev, 2 * n, cudaMemcpyDeviceToHost));
  double dmax = 0, rmax = 0;
  for (size_t i = 0; i < n; i++) {
    float g = example_bf16_to_f32(h[i]);
    dmax = fmax(dmax, isnan(g) ? INFINITY : fabs((double)g - want[i]));
    rmax = fmax(rmax, fabs(want[i]));
  }
  free(h);
  return rmax > 0 ? dmax / rmax : dmax;
}

int main(int argc, char **argv) {
  const char *preset = argc > 1 ? argv[1] : "qwen3-30b-a3b";
  int T = argc > 2 ? atoi(argv[2]) : 512, iters = argc > 3 ? atoi(argv[3]) : 20;
  if (T < CHECK_TOKENS || iters < 1) {
    fprintf(stderr, "usage: %s [PRESET [TOKENS >= %d [ITERS]]]\n", argv[0], CHECK_TOKENS);
    return 1;
  }
  moegen_config cfg = example_preset(preset);
  moegen_error err = {0};
  cfg.logits_dtype = MOEGEN_DTYPE_BF16;
  example_device_or_skip();
  moegen_module *m = NULL;
  moegen_status st = moegen_jit(&cfg, NULL, &m, &err);
  if (st != MOEGEN_OK) printf("moegen_jit: %s\n", err.msg);
  example_check(st, m, "moegen_jit");
  example_check(moegen_module_load(m), m, "module load");
  moegen_layer_shape sh;
  st = moegen_layer_shape_of(moegen_module_image(m), T, &sh);
  if (st == MOEGEN_ERR_NOT_SUPPORTED) {
    printf("SKIP: the layer needs the grouped GEMM (sm_80 or later); this device is %s\n",
           moegen_module_image(m)->arch);
    return EXAMPLE_SKIP;
  }
  example_check(st, m, "moegen_layer_shape_of");
  const int E = cfg.experts, H = cfg.hidden, F = cfg.ffn, K = cfg.topk;
  printf("%s: E=%d K=%d H=%d F=%d, T=%d; saved %.1f MiB, workspace %.1f MiB\n", preset, E, K, H,
         F, T, sh.saved_bytes / 1048576.0, sh.workspace_bytes / 1048576.0);

  const size_t nx = (size_t)T * H, nl = (size_t)T * E;
  tensor x = random_tensor(nx, 1.0f), logits = random_tensor(nl, 2.0f);
  tensor dy = random_tensor(nx, 1.0f);
  tensor w1 = random_tensor((size_t)E * 2 * F * H, 1.0f / sqrtf((float)H));
  tensor w2 = random_tensor((size_t)E * H * F, 1.0f / sqrtf((float)F));
  float *bias = malloc(4 * (size_t)E), *d_bias;
  for (int e = 0; e < E; e++) bias[e] = 0.1f * example_uniform();
  void *y, *dx, *dlogits, *dw1, *dw2, *saved, *ws;
  CUDA_CHECK(cudaMalloc((void **)&d_bias, 4 * (size_t)E));
  CUDA_CHECK(cudaMemcpy(d_bias, bias, 4 * (size_t)E, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&y, 2 * nx));                         /* [T, H] */
  CUDA_CHECK(cudaMalloc(&dx, 2 * nx));                        /* [T, H] */
  CUDA_CHECK(cudaMalloc(&dlogits, 2 * nl));                   /* [T, E] */
  CUDA_CHECK(cudaMalloc(&dw1, 2 * w1.n));                     /* [E, 2F, H] */
  CUDA_CHECK(cudaMalloc(&dw2, 2 * w2.n));                     /* [E, H, F] */
  CUDA_CHECK(cudaMalloc(&saved, sh.saved_bytes));             /* cudaMalloc: 256-byte aligned */
  CUDA_CHECK(cudaMalloc(&ws, sh.workspace_bytes));

  moegen_layer_fwd_args f = {.num_tokens = T, .max_tokens = T, .x = x.d, .logits = logits.d,
                             .expert_bias = cfg.expert_bias ? d_bias : NULL, .w1 = w1.d,
                             .w2 = w2.d, .y = y, .saved = saved, .saved_bytes = sh.saved_bytes,
                             .workspace = ws, .workspace_bytes = sh.workspace_bytes};
  moegen_layer_bwd_args b = {.num_tokens = T, .max_tokens = T, .dy = dy.d, .w1 = w1.d,
                             .w2 = w2.d, .saved = saved, .saved_bytes = sh.saved_bytes, .dx = dx,
                             .dlogits = dlogits, .dw1 = dw1, .dw2 = dw2, .workspace = ws,
                             .workspace_bytes = sh.workspace_bytes};
  cudaStream_t stream;
  cudaEvent_t e0, e1, e2;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventCreate(&e2));
  float fwd_ms = 0, bwd_ms = 0;
  for (int i = 0; i <= iters; i++) { /* call 0 warms up */
    CUDA_CHECK(cudaEventRecord(e0, stream));
    example_check(moegen_layer_fwd(m, &f, (CUstream)stream), m, "moegen_layer_fwd");
    CUDA_CHECK(cudaEventRecord(e1, stream));
    example_check(moegen_layer_bwd(m, &b, (CUstream)stream), m, "moegen_layer_bwd");
    CUDA_CHECK(cudaEventRecord(e2, stream));
    CUDA_CHECK(cudaEventSynchronize(e2));
    float a, c;
    CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
    CUDA_CHECK(cudaEventElapsedTime(&c, e1, e2));
    if (i) fwd_ms += a / iters, bwd_ms += c / iters;
  }
  double flops = 2.0 * T * K * (3.0 * H * F);
  printf("forward  %.3f ms/call (%.1f TFLOP/s)\nbackward %.3f ms/call (%.1f TFLOP/s)\n", fwd_ms,
         flops / fwd_ms / 1e9, bwd_ms, 2 * flops / bwd_ms / 1e9);

  /* The reference for CHECK_TOKENS tokens spread over T; the full-size host
   * weights are filled only for the experts those tokens route to. */
  const int n = CHECK_TOKENS;
  float *xs = malloc(4 * (size_t)n * H), *ls = malloc(4 * (size_t)n * E);
  size_t rows[CHECK_TOKENS];
  for (int i = 0; i < n; i++) {
    rows[i] = (size_t)(T - 1) * i / (n - 1);
    for (int j = 0; j < H; j++) xs[(size_t)i * H + j] = value(&x, rows[i] * H + j);
    for (int e = 0; e < E; e++) ls[(size_t)i * E + e] = value(&logits, rows[i] * E + e);
  }
  const size_t per1 = (size_t)2 * F * H, per2 = (size_t)H * F;
  float *hw1 = calloc(w1.n, 4), *hw2 = calloc(w2.n, 4);
  if (!hw1 || !hw2) {
    printf("FAIL: no host memory for the reference weights\n");
    return 1;
  }
  int32_t *idx = malloc(4 * (size_t)n * K); /* the sample's routes: the experts it needs */
  router_ref_fwd(&cfg, n, ls, cfg.expert_bias ? bias : NULL, NULL, NULL, idx, NULL, NULL, NULL);
  for (int r = 0; r < n * K; r++) {
    host_range(&w1, hw1, (size_t)idx[r] * per1, per1);
    host_range(&w2, hw2, (size_t)idx[r] * per2, per2);
  }
  layer_ref_io io = {n, xs, ls, cfg.expert_bias ? bias : NULL, hw1, hw2, NULL};
  float *ry = malloc(4 * (size_t)n * H);
  layer_ref_fwd(&cfg, &io, ry);
  double worst = 0;
  for (int i = 0; i < n; i++)
    worst = fmax(worst, rel_error((char *)y + 2 * rows[i] * H, ry + (size_t)i * H, (size_t)H));
  int ok = worst < 2e-2;
  printf("check of y for %d tokens against the CPU reference: max |d| / max |ref| = %.2e: %s\n",
         n, worst, ok ? "ok" : "FAIL");
  free(xs), free(ls), free(hw1), free(hw2), free(idx), free(ry), free(bias);
  cudaFree(y), cudaFree(dx), cudaFree(dlogits), cudaFree(dw1), cudaFree(dw2), cudaFree(saved);
  cudaFree(ws), cudaFree(d_bias), cudaFree(x.d), cudaFree(logits.d), cudaFree(dy.d);
  cudaFree(w1.d), cudaFree(w2.d);
  free(x.block), free(logits.block), free(dy.block), free(w1.block), free(w2.block);
  cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2), cudaStreamDestroy(stream);
  moegen_module_destroy(m);
  return ok ? 0 : 1;
}
