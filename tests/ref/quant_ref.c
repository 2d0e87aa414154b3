/* tests/ref/quant_ref.c -- see quant_ref.h. */
#include "quant_ref.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "half.h"

/* Exponent bits and mantissa bits of each format. */
static void format_bits(moegen_fp8_format f, int *ebits, int *mbits) {
  *ebits = f == MOEGEN_FP8_E5M2 ? 5 : 4;
  *mbits = f == MOEGEN_FP8_E5M2 ? 2 : 3;
}

double quant_ref_fp8_value(uint8_t c, moegen_fp8_format f) {
  int ebits, mbits;
  format_bits(f, &ebits, &mbits);
  int bias = (1 << (ebits - 1)) - 1, e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
  double sign = c & 0x80 ? -1.0 : 1.0;
  if (f == MOEGEN_FP8_E4M3 && e == 15 && m == 7) return NAN;
  if (f == MOEGEN_FP8_E5M2 && e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexp((double)m, 1 - bias - mbits);
  return sign * ldexp((double)((1 << mbits) | m), e - bias - mbits);
}

/* The values of the non-negative codes 0..0x7f of each format. */
static double values[2][128];
static pthread_once_t values_once = PTHREAD_ONCE_INIT;
static void fill_values(void) {
  for (int f = 0; f < 2; f++)
    for (int c = 0; c < 128; c++) values[f][c] = quant_ref_fp8_value((uint8_t)c, (moegen_fp8_format)f);
}

uint8_t quant_ref_fp8(float v, moegen_fp8_format f) {
  pthread_once(&values_once, fill_values);
  if (isnan(v)) return 0x7f;
  const double *val = values[f == MOEGEN_FP8_E5M2];
  int top = f == MOEGEN_FP8_E5M2 ? 0x7b : 0x7e; /* the largest finite code */
  uint8_t sign = signbit(v) ? 0x80 : 0;
  double a = fabs((double)v);
  if (a >= val[top]) return sign | (uint8_t)top;
  /* the codes' values rise with the code: c with val[c] <= a < val[c + 1] */
  int lo = 0, hi = top; /* val[lo] <= a < val[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (val[mid] <= a) lo = mid;
    else hi = mid;
  }
  double below = a - val[lo], above = val[hi] - a;
  int c = below > above || (below == above && (lo & 1)) ? hi : lo;
  return sign | (uint8_t)c;
}

float quant_ref_scale(float amax, float fmax, int pow2) {
  float s = amax > 0.f ? fmax / amax : 1.f;
  if (s > FLT_MAX) s = FLT_MAX;
  if (pow2) {
    uint32_t u;
    memcpy(&u, &s, 4);
    u &= 0xff800000u;
    memcpy(&s, &u, 4);
  }
  return s;
}

float quant_ref_amax(const uint16_t *x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(bf16_to_f32(x[i])));
  return m;
}

enum { B = MOEGEN_FP8_BLOCK };

static float fp8_max(moegen_fp8_format f) { return (float)moegen_fp8_max(f); }

void quant_ref_weight_block(const uint16_t *w, int E, int n, int k, int pow2, uint8_t *q, float *s,
                            uint8_t *qt, float *st) {
  int tn = n / B, tk = k / B;
  for (int e = 0; e < E; e++)
    for (int nb = 0; nb < tn; nb++)
      for (int kb = 0; kb < tk; kb++) {
        const int64_t base = (int64_t)e * n * k;
        float m = 0.f;
        for (int r = 0; r < B; r++)
          for (int c = 0; c < B; c++)
            m = fmaxf(m, fabsf(bf16_to_f32(w[base + (int64_t)(nb * B + r) * k + kb * B + c])));
        float sc = quant_ref_scale(m, fp8_max(MOEGEN_FP8_E4M3), pow2), inv = 1.f / sc;
        s[((int64_t)e * tn + nb) * tk + kb] = inv;
        if (qt) st[((int64_t)e * tk + kb) * tn + nb] = inv;
        for (int r = 0; r < B; r++)
          for (int c = 0; c < B; c++) {
            int64_t row = nb * B + r, col = kb * B + c;
            float v = bf16_to_f32(w[base + row * k + col]) * sc;
            uint8_t b = quant_ref_fp8(v, MOEGEN_FP8_E4M3);
            q[base + row * k + col] = b;
            if (qt) qt[base + col * n + row] = b;
          }
      }
}

void quant_ref_weight_tensor(const uint16_t *w, int E, int n, int k, uint8_t *q, uint8_t *qt,
                             float *amax, float *scale_inv) {
  int64_t total = (int64_t)E * n * k;
  *amax = quant_ref_amax(w, total);
  float sc = quant_ref_scale(*amax, fp8_max(MOEGEN_FP8_E4M3), 0);
  *scale_inv = 1.f / sc;
  for (int e = 0; e < E; e++)
    for (int64_t row = 0; row < n; row++)
      for (int64_t col = 0; col < k; col++) {
        int64_t i = (int64_t)e * n * k + row * k + col;
        uint8_t b = quant_ref_fp8(bf16_to_f32(w[i]) * sc, MOEGEN_FP8_E4M3);
        q[i] = b;
        if (qt) qt[(int64_t)e * n * k + col * n + row] = b;
      }
}

void quant_ref_rows(const uint16_t *x, int64_t M, int K, int pow2, uint8_t *q, float *s, int64_t ld) {
  for (int64_t r = 0; r < M; r++)
    for (int j = 0; j < K / B; j++) {
      const int64_t at = r * K + (int64_t)j * B;
      float sc = quant_ref_scale(quant_ref_amax(x + at, B), fp8_max(MOEGEN_FP8_E4M3), pow2);
      s[(int64_t)j * ld + r] = 1.f / sc;
      for (int c = 0; c < B; c++) q[at + c] = quant_ref_fp8(bf16_to_f32(x[at + c]) * sc, MOEGEN_FP8_E4M3);
    }
}

void quant_ref_tensor(const uint16_t *x, int64_t n, moegen_fp8_format f, uint8_t *q, float *amax,
                      float *scale_inv) {
  *amax = quant_ref_amax(x, n);
  float sc = quant_ref_scale(*amax, fp8_max(f), 0);
  *scale_inv = 1.f / sc;
  for (int64_t i = 0; i < n; i++) q[i] = quant_ref_fp8(bf16_to_f32(x[i]) * sc, f);
}
