/* tests/ref/gemm_ref.c -- grouped GEMM forward on the CPU. */
#include "gemm_ref.h"

enum { LANES = 8 }; /* independent fp32 partial sums (vectorizable) */

/* sum_k a[k] b[k] in fp32 over LANES interleaved partial sums. */
static float dot(const float *a, const float *b, int K) {
  float part[LANES] = {0};
  int k = 0;
  for (; k + LANES <= K; k += LANES)
    for (int l = 0; l < LANES; l++) part[l] += a[k + l] * b[k + l];
  for (; k < K; k++) part[0] += a[k] * b[k];
  float s = 0;
  for (int l = 0; l < LANES; l++) s += part[l];
  return s;
}

void gemm_ref_fwd(int E, int N, int K, const int32_t *counts, const float *x, const float *w,
                  float *y) {
  long long row = 0;
  for (int e = 0; e < E; e++) {
    const float *we = w + (long long)e * N * K;
    for (int r = 0; r < counts[e]; r++, row++)
      for (int n = 0; n < N; n++) y[row * N + n] = dot(x + row * K, we + (long long)n * K, K);
  }
}
