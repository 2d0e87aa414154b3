/* tests/ref/quant_ref.h -- CPU reference of the FP8 quantization (SPEC.md
 * 5b; the quant ops of moegen/runtime.h), written from the formats'
 * definitions: a value becomes the nearest FP8 value (found among the
 * format's finite values in double precision, ties to the even code),
 * saturated to +-FP8_MAX. Inputs are bf16 bits. The scaled value x * s is
 * one fp32 product, as on the GPU, so the GPU must match these bytes and
 * scales exactly (non-finite inputs aside). */
#ifndef MOEGEN_REF_QUANT_REF_H
#define MOEGEN_REF_QUANT_REF_H

#include <stdint.h>

#include "moegen/types.h"

/* v as FP8 format f: round to nearest, ties to even, saturate to +-max;
 * NaN -> 0x7f; the sign bit is v's (-0 and values rounding to 0 from below
 * give 0x80). */
uint8_t quant_ref_fp8(float v, moegen_fp8_format f);

/* The value of FP8 code c of format f (NaN for the NaN codes, +-inf for
 * E5M2's). */
double quant_ref_fp8_value(uint8_t c, moegen_fp8_format f);

/* The quant scale of amax for format maximum fmax: fmax / amax in fp32,
 * 1 for amax = 0 (or NaN), FLT_MAX where the quotient overflows, its
 * mantissa cleared when pow2. */
float quant_ref_scale(float amax, float fmax, int pow2);

/* max |x| over n bf16 values (0 for n = 0). */
float quant_ref_amax(const uint16_t *x, int64_t n);

/* fp8_block weights: w [E, n, k] -> q [E, n, k] e4m3, s [E, n/128, k/128]
 * dequant scales (n, k multiples of 128); qt [E, k, n] and st
 * [E, k/128, n/128] too when qt is not NULL. */
void quant_ref_weight_block(const uint16_t *w, int E, int n, int k, int pow2, uint8_t *q, float *s,
                            uint8_t *qt, float *st);

/* fp8_tensorwise weights: one scale from the amax of all of w [E, n, k];
 * q [E, n, k] (and qt [E, k, n] when not NULL) e4m3, *amax, *scale_inv. */
void quant_ref_weight_tensor(const uint16_t *w, int E, int n, int k, uint8_t *q, uint8_t *qt,
                             float *amax, float *scale_inv);

/* fp8_block rows: x [M, K] -> q [M, K] e4m3, s[j * ld + r] the dequant
 * scale of x[r, 128 j .. 128 j + 127] (K a multiple of 128). */
void quant_ref_rows(const uint16_t *x, int64_t M, int K, int pow2, uint8_t *q, float *s, int64_t ld);

/* fp8_tensorwise: x [n] -> q [n] in format f with the scale of the
 * tensor's amax (fp32 scales); *amax, *scale_inv. */
void quant_ref_tensor(const uint16_t *x, int64_t n, moegen_fp8_format f, uint8_t *q, float *amax,
                      float *scale_inv);

#endif
