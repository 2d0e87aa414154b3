/* tests/ref/fp8_ref.h -- fp8_block test inputs for the FP8 GEMMs from fp32
 * data: quant_ref.h's quantization (SPEC.md 5b: E4M3 RNE saturated to
 * +-448, dequant scales value ~= fp8 * scale, pow2 scales) of the data
 * rounded to bf16, plus the dequantized values for the fp32 reference
 * product. */
#ifndef MOEGEN_REF_FP8_REF_H
#define MOEGEN_REF_FP8_REF_H

#include <stdint.h>

#include "moegen/types.h"

#define FP8_BLOCK MOEGEN_FP8_BLOCK /* the fp8_block quantization block */
#define FP8_E4M3_MAX ((float)moegen_fp8_max(MOEGEN_FP8_E4M3))

/* v as E4M3 (RNE, saturating; NaN -> 0x7f). */
uint8_t fp8_e4m3_from_f32(float v);
/* The E4M3 byte's value. */
float fp8_e4m3_to_f32(uint8_t b);

/* Rows [0, M) of x [M, K] (K % 128 == 0) in 1x128 blocks along K: q [M, K]
 * e4m3, scale [K / 128, ld] fp32 dequant scales (row r of block j at
 * scale[j * ld + r]; ld >= M), deq [M, K] = fp8 * scale (may be NULL). */
void fp8_quant_rows(int M, int K, const float *x, int ld, uint8_t *q, float *scale, float *deq);

/* w [E, N, K] (N, K % 128 == 0) in 128x128 blocks: q [E, N, K] e4m3, scale
 * [E, N / 128, K / 128] fp32 dequant scales, deq [E, N, K] (may be NULL). */
void fp8_quant_blocks(int E, int N, int K, const float *w, uint8_t *q, float *scale, float *deq);

#endif
