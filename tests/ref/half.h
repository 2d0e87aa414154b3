/* tests/ref/half.h -- host bf16/fp16 <-> fp32 conversions (round to nearest even). */
#ifndef MOEGEN_REF_HALF_H
#define MOEGEN_REF_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static inline float fp16_to_f32(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return s ? -v : v;
}

static inline uint16_t f32_to_fp16(float f) {
  if (isnan(f)) return 0x7e00;
  uint16_t s = signbit(f) ? 0x8000 : 0;
  float a = fabsf(f);
  if (a >= 65520.0f) return s | 0x7c00;
  if (a < ldexpf(1.0f, -14)) return s | (uint16_t)nearbyintf(a * ldexpf(1.0f, 24));
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  uint32_t q = (uint32_t)nearbyintf(m * 2048.0f); /* 11 significant bits */
  if (q == 2048) { q = 1024; e++; }
  if (e + 14 >= 31) return s | 0x7c00;
  return s | (uint16_t)((e + 14) << 10) | (uint16_t)(q & 1023);
}

#endif
