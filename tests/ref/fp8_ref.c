/* tests/ref/fp8_ref.c -- fp8_block quantization on the CPU (fp8_ref.h). */
#include "fp8_ref.h"

#include <math.h>
#include <string.h>

float fp8_e4m3_to_f32(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e ? ldexpf(1.f + m / 8.f, e - 7) : ldexpf(m / 8.f, -6);
  return s ? -v : v;
}

uint8_t fp8_e4m3_from_f32(float v) {
  if (isnan(v)) return 0x7f;
  const uint8_t s = signbit(v) ? 0x80 : 0;
  float a = fabsf(v);
  if (a >= FP8_E4M3_MAX) return s | 0x7e; /* saturate: 448 = 1.75 * 2^8 */
  /* The spacing of a's binade (subnormals: 2^-9), then RNE to a multiple of it. */
  int ex;
  frexpf(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
  const int e = ex - 1 < -6 ? -6 : ex - 1;
  const float q = rintf(ldexpf(a, 3 - e)); /* a / 2^(e-3), nearest even (default rounding) */
  a = ldexpf(q, e - 3);
  if (a >= FP8_E4M3_MAX) return s | 0x7e;
  if (a == 0.f) return s;
  frexpf(a, &ex);
  if (ex - 1 < -6) return s | (uint8_t)q; /* subnormal: mantissa = a / 2^-9 */
  const int be = ex - 1 + 7, man = (int)ldexpf(a, 3 - (ex - 1)) - 8;
  return s | (uint8_t)(be << 3) | (uint8_t)man;
}

/* The dequant scale of a block of amax a: 1 / (448 / a rounded down to a power of two). */
static float block_scale(float a) {
  if (!(a > 0.f) || !isfinite(a)) return 1.f;
  int ex;
  frexpf(FP8_E4M3_MAX / a, &ex); /* 448 / a in [2^(ex-1), 2^ex) */
  return ldexpf(1.f, 1 - ex);
}

void fp8_quant_rows(int M, int K, const float *x, int ld, uint8_t *q, float *scale, float *deq) {
  for (int r = 0; r < M; r++)
    for (int j = 0; j < K / FP8_BLOCK; j++) {
      const long long o = (long long)r * K + (long long)j * FP8_BLOCK;
      float a = 0.f;
      for (int i = 0; i < FP8_BLOCK; i++) a = fmaxf(a, fabsf(x[o + i]));
      const float s = block_scale(a);
      scale[(long long)j * ld + r] = s;
      for (int i = 0; i < FP8_BLOCK; i++) {
        q[o + i] = fp8_e4m3_from_f32(x[o + i] / s);
        if (deq) deq[o + i] = fp8_e4m3_to_f32(q[o + i]) * s;
      }
    }
}

void fp8_quant_blocks(int E, int N, int K, const float *w, uint8_t *q, float *scale, float *deq) {
  const int NB = N / FP8_BLOCK, KB = K / FP8_BLOCK;
  for (int e = 0; e < E; e++)
    for (int nb = 0; nb < NB; nb++)
      for (int kb = 0; kb < KB; kb++) {
        const long long o = ((long long)e * N + (long long)nb * FP8_BLOCK) * K + (long long)kb * FP8_BLOCK;
        float a = 0.f;
        for (int n = 0; n < FP8_BLOCK; n++)
          for (int k = 0; k < FP8_BLOCK; k++) a = fmaxf(a, fabsf(w[o + (long long)n * K + k]));
        const float s = block_scale(a);
        scale[((long long)e * NB + nb) * KB + kb] = s;
        for (int n = 0; n < FP8_BLOCK; n++)
          for (int k = 0; k < FP8_BLOCK; k++) {
            const long long i = o + (long long)n * K + k;
            q[i] = fp8_e4m3_from_f32(w[i] / s);
            if (deq) deq[i] = fp8_e4m3_to_f32(q[i]) * s;
          }
      }
}
