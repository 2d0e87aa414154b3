/* tests/ref/gemm_ref.h -- CPU reference of the grouped GEMM forward
 * (SPEC.md 5: y_e = x_e w_e^T per expert, fp32 accumulation). */
#ifndef MOEGEN_REF_GEMM_REF_H
#define MOEGEN_REF_GEMM_REF_H

#include <stdint.h>

/* For each expert e with rows [o_e, o_e + counts[e]) (o_e the sum of the
 * earlier counts): y[r, n] = sum_k x[r, k] w[e, n, k]. x [sum, K], w [E, N,
 * K], y [sum, N], all fp32 row-major (inputs already rounded to bf16 by the
 * caller; y before rounding). Rows of experts only: other rows of y are
 * left as they are. */
void gemm_ref_fwd(int E, int N, int K, const int32_t *counts, const float *x, const float *w,
                  float *y);

#endif
