/* tests/ref/gemm_bwd_ref.h -- CPU references of the grouped GEMM backward
 * (SPEC.md 5: dgrad dx_e = dy_e w_e, wgrad dw_e = dy_e^T x_e, db_e = column
 * sums of dy_e) and of gemm1 with the SwiGLU epilogue; fp32 accumulation.
 * Expert e owns rows [o_e, o_e + counts[e]) (o_e = sum of earlier counts);
 * all matrices fp32 row-major, inputs already rounded to bf16 by the caller. */
#ifndef MOEGEN_REF_GEMM_BWD_REF_H
#define MOEGEN_REF_GEMM_BWD_REF_H

#include <stdint.h>

/* dx[r, k] = sum_n dy[r, n] w[e, n, k]. dy [sum, N], w [E, N, K], dx [sum, K]
 * (rows of experts only; other rows untouched). */
void gemm_ref_dgrad(int E, int N, int K, const int32_t *counts, const float *dy, const float *w,
                    float *dx);

/* dw[e, n, k] (+)= sum_r dy[r, n] x[r, k] and, if db is not NULL, db[e, n]
 * (+)= sum_r dy[r, n] over the rows r of expert e; "+=" when accumulate,
 * else "=" (an empty expert gets zeros). dy [sum, N], x [sum, K], dw [E, N,
 * K], db [E, N]. */
void gemm_ref_wgrad(int E, int N, int K, const int32_t *counts, const float *dy, const float *x,
                    float *dw, float *db, int accumulate);

/* h = x w_e^T + bias[e] ([sum, 2F]; bias [E, 2F] or NULL) and act[r, f] =
 * silu(h[r, f]) * h[r, F + f] * prob[r] ([sum, F]; prob [sum] or NULL). */
void gemm_ref_glu(int E, int F, int H, const int32_t *counts, const float *x, const float *w,
                  const float *bias, const float *prob, float *h, float *act);

/* SwiGLU backward after gemm2's dgrad: dact = dgrad(dy [sum, H], w2 [E, H,
 * F]); with g = h[r, f], u = h[r, F + f], p = prob[r] (1 if prob is NULL):
 * dh[r, f] = dact p u silu'(g), dh[r, F + f] = dact p silu(g) ([sum, 2F]),
 * dprob[r] = sum_f dact silu(g) u and dprob_scale[r] = sum_f |dact silu(g) u|
 * (for tolerances; both [sum], may be NULL). */
void gemm_ref_dglu(int E, int F, int H, const int32_t *counts, const float *dy, const float *w2,
                   const float *h, const float *prob, float *dh, double *dprob,
                   double *dprob_scale);

#endif
