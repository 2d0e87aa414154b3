/* tests/ref/gemm_bwd_ref.c -- grouped GEMM backward and SwiGLU forward on the CPU. */
#include "gemm_bwd_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_ref.h"

void gemm_ref_dgrad(int E, int N, int K, const int32_t *counts, const float *dy, const float *w,
                    float *dx) {
  long long row = 0;
  for (int e = 0; e < E; e++) {
    const float *we = w + (long long)e * N * K;
    for (int r = 0; r < counts[e]; r++, row++) {
      float *out = dx + row * K;
      for (int k = 0; k < K; k++) out[k] = 0;
      for (int n = 0; n < N; n++) { /* row axpy: vectorizes over k */
        const float a = dy[row * N + n], *wr = we + (long long)n * K;
        if (a != 0)
          for (int k = 0; k < K; k++) out[k] += a * wr[k];
      }
    }
  }
}

void gemm_ref_wgrad(int E, int N, int K, const int32_t *counts, const float *dy, const float *x,
                    float *dw, float *db, int accumulate) {
  long long row = 0;
  for (int e = 0; e < E; e++) {
    float *we = dw + (long long)e * N * K, *be = db ? db + (long long)e * N : NULL;
    if (!accumulate) {
      memset(we, 0, sizeof(float) * (size_t)N * (size_t)K);
      if (be) memset(be, 0, sizeof(float) * (size_t)N);
    }
    for (int r = 0; r < counts[e]; r++, row++) {
      const float *xr = x + row * K;
      for (int n = 0; n < N; n++) {
        const float a = dy[row * N + n];
        if (be) be[n] += a;
        if (a == 0) continue;
        float *out = we + (long long)n * K;
        for (int k = 0; k < K; k++) out[k] += a * xr[k];
      }
    }
  }
}

void gemm_ref_glu(int E, int F, int H, const int32_t *counts, const float *x, const float *w,
                  const float *bias, const float *prob, float *h, float *act) {
  const int N = 2 * F;
  gemm_ref_fwd(E, N, H, counts, x, w, h);
  long long row = 0;
  for (int e = 0; e < E; e++)
    for (int r = 0; r < counts[e]; r++, row++) {
      float *hr = h + row * N;
      if (bias)
        for (int n = 0; n < N; n++) hr[n] += bias[(long long)e * N + n];
      const float p = prob ? prob[row] : 1.0f;
      for (int f = 0; f < F; f++) {
        const double g = hr[f];
        act[row * F + f] = (float)(g / (1.0 + exp(-g)) * hr[F + f] * p);
      }
    }
}

void gemm_ref_dglu(int E, int F, int H, const int32_t *counts, const float *dy, const float *w2,
                   const float *h, const float *prob, float *dh, double *dprob,
                   double *dprob_scale) {
  long long total = 0;
  for (int e = 0; e < E; e++) total += counts[e];
  float *dact = malloc(sizeof(float) * (size_t)(total * F + 1));
  gemm_ref_dgrad(E, H, F, counts, dy, w2, dact);
  for (long long r = 0; r < total; r++) {
    const double p = prob ? prob[r] : 1.0;
    double sum = 0, scale = 0;
    for (int f = 0; f < F; f++) {
      const double g = h[r * 2 * F + f], u = h[r * 2 * F + F + f], da = dact[r * F + f];
      const double s = 1 / (1 + exp(-g)), sl = g * s;
      dh[r * 2 * F + f] = (float)(da * p * u * s * (1 + g * (1 - s)));
      dh[r * 2 * F + F + f] = (float)(da * p * sl);
      sum += da * sl * u;
      scale += fabs(da * sl * u);
    }
    if (dprob) dprob[r] = sum;
    if (dprob_scale) dprob_scale[r] = scale;
  }
  free(dact);
}
