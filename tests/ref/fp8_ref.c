/* tests/ref/fp8_ref.c -- fp8_block test inputs on the CPU (fp8_ref.h): the
 * rounding and scale rules are quant_ref's (tests/ref/quant_ref.c, the one
 * FP8 quantizer reference); this file takes fp32 inputs (rounded to bf16,
 * what the quant ops read) and returns the dequantized values too. */
#include "fp8_ref.h"

#include <stdlib.h>
#include <string.h>

#include "quant_ref.h"

float fp8_e4m3_to_f32(uint8_t b) { return (float)quant_ref_fp8_value(b, MOEGEN_FP8_E4M3); }

uint8_t fp8_e4m3_from_f32(float v) { return quant_ref_fp8(v, MOEGEN_FP8_E4M3); }

/* bf16 bits of v, round to nearest even (finite v). */
static uint16_t bf16_of(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n fp32 values as bf16 bits (malloc'd; the caller frees). */
static uint16_t *bf16_copy(const float *x, long long n) {
  uint16_t *b = malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
  for (long long i = 0; i < n; i++) b[i] = bf16_of(x[i]);
  return b;
}

void fp8_quant_rows(int M, int K, const float *x, int ld, uint8_t *q, float *scale, float *deq) {
  uint16_t *b = bf16_copy(x, (long long)M * K);
  quant_ref_rows(b, M, K, 1, q, scale, ld);
  free(b);
  if (deq)
    for (long long r = 0; r < M; r++)
      for (int k = 0; k < K; k++)
        deq[r * K + k] = fp8_e4m3_to_f32(q[r * K + k]) * scale[(long long)(k / FP8_BLOCK) * ld + r];
}

void fp8_quant_blocks(int E, int N, int K, const float *w, uint8_t *q, float *scale, float *deq) {
  uint16_t *b = bf16_copy(w, (long long)E * N * K);
  quant_ref_weight_block(b, E, N, K, 1, q, scale, NULL, NULL);
  free(b);
  const int NB = N / FP8_BLOCK, KB = K / FP8_BLOCK;
  if (deq)
    for (long long e = 0; e < E; e++)
      for (long long n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
          const long long i = (e * N + n) * K + k;
          deq[i] = fp8_e4m3_to_f32(q[i]) * scale[(e * NB + n / FP8_BLOCK) * KB + k / FP8_BLOCK];
        }
}
