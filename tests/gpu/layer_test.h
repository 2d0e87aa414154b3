/* tests/gpu/layer_test.h -- what the MoE layer GPU tests (test_layer.c,
 * test_concurrency.c) share: a layer config (layer_model.h), the units a
 * layer needs, random bf16 inputs, and the comparison with the CPU
 * reference (tests/ref/layer_ref.c). After check.h. */
#ifndef MOEGEN_TESTS_LAYER_TEST_H
#define MOEGEN_TESTS_LAYER_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "half.h"
#include "layer_model.h"

/* Every compile unit moegen_layer_fwd / _bwd launches kernels of. */
#define LAYER_UNITS                                                                           \
  (1u << MOEGEN_UNIT_ROUTER | 1u << MOEGEN_UNIT_ROUTER_TRAIN | 1u << MOEGEN_UNIT_PERMUTE | \
   1u << MOEGEN_UNIT_GEMM | 1u << MOEGEN_UNIT_GEMM_TRAIN)

/* n bf16 values scale * normal into host h (as floats) and device d. */
static inline void fill_bf16(float *h, void *d, size_t n, float scale) {
  uint16_t *b = malloc(2 * n + 2);
  for (size_t i = 0; i < n; i++) {
    b[i] = f32_to_bf16(scale * rng_normal());
    h[i] = bf16_to_f32(b[i]);
  }
  gpu_put(d, b, 2 * n);
  free(b);
}

/* Compares n host values got (bf16, or fp32 if f32) with the reference ref
 * (SPEC.md 6, bf16 GEMM outputs): relative Frobenius error < 1e-2 and
 * max |d| / max |ref| < 2e-2; NaN (an unwritten poisoned output) fails.
 * Prints a FAIL line naming `what` and returns 0 if they differ. */
static inline int layer_compare(const char *what, const void *got, int f32, const float *ref,
                                size_t n) {
  double d2 = 0, r2 = 0, dmax = 0, rmax = 0;
  size_t nan = 0;
  for (size_t i = 0; i < n; i++) {
    float g = f32 ? ((const float *)got)[i] : bf16_to_f32(((const uint16_t *)got)[i]);
    if (isnan(g)) nan++;
    double d = fabs((double)g - ref[i]);
    d2 += d * d;
    r2 += (double)ref[i] * ref[i];
    dmax = fmax(dmax, d);
    rmax = fmax(rmax, fabs(ref[i]));
  }
  double frob = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
  double rel = rmax > 0 ? dmax / rmax : dmax;
  int ok = !nan && frob < 1e-2 && rel < 2e-2;
  if (!ok)
    printf("  FAIL %s: frob %.3e max|d|/max|ref| %.3e (%zu NaN of %zu)\n", what, frob, rel, nan, n);
  return ok;
}

#endif
