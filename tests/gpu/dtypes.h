/* tests/gpu/dtypes.h -- host-side element types of GPU tests: fp32 / bf16 /
 * fp16 buffers as floats, and SPEC.md section 6 comparisons. */
#ifndef MOEGEN_TESTS_DTYPES_H
#define MOEGEN_TESTS_DTYPES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "half.h"
#include "moegen/config.h"

static inline size_t dt_size(moegen_dtype d) { return d == MOEGEN_DTYPE_FP32 ? 4 : 2; }

static inline float round_dt(moegen_dtype d, float x) {
  return d == MOEGEN_DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(x))
       : d == MOEGEN_DTYPE_FP16 ? fp16_to_f32(f32_to_fp16(x)) : x;
}

static inline float read_dt(moegen_dtype d, const void *p, size_t i) {
  if (d == MOEGEN_DTYPE_FP32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return d == MOEGEN_DTYPE_BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

static inline void write_dt(moegen_dtype d, void *p, size_t i, float x) {
  if (d == MOEGEN_DTYPE_FP32) ((float *)p)[i] = x;
  else ((uint16_t *)p)[i] = d == MOEGEN_DTYPE_BF16 ? f32_to_bf16(x) : f32_to_fp16(x);
}

/* SPEC.md 6: fp32 tolerance for a tensor of E columns. NaN never passes. */
static inline int close_f32(float got, float want, int E) {
  if (isnan(got) || isnan(want)) return 0;
  if (isinf(want) || isinf(got)) return got == want;
  double atol = fmax(1e-5, 4e-7 * E), rtol = fmax(1.3e-6, 4e-7 * E);
  return fabs((double)got - want) <= atol + rtol * fabs(want);
}

/* A 16-bit output is right if it is within one ulp of the rounded reference. */
static inline int close_dt(moegen_dtype d, float got, float want, int E) {
  if (d == MOEGEN_DTYPE_FP32) return close_f32(got, want, E);
  if (isnan(got) || isnan(want)) return 0;
  double ulp = d == MOEGEN_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024;
  return fabs((double)got - round_dt(d, want)) <= 1e-6 + ulp * fabs(want);
}

/* Two outputs each within close_dt of one reference (two implementations,
 * e.g. router_bwd saved and recompute) are within twice its tolerance of
 * each other. NaN never passes. */
static inline int close_pair(moegen_dtype d, float a, float b, int E) {
  if (isnan(a) || isnan(b)) return 0;
  double m = fmax(fabs(a), fabs(b));
  if (d == MOEGEN_DTYPE_FP32)
    return fabs((double)a - b) <= 2 * (fmax(1e-5, 4e-7 * E) + fmax(1.3e-6, 4e-7 * E) * m);
  return fabs((double)a - b) <= 2 * (1e-6 + (d == MOEGEN_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024) * m);
}

#endif
