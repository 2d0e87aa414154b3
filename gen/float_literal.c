/* gen/float_literal.c -- config numbers as the floats the kernels use. */
#include "float_literal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

bool moegen_float_of(double d, float *f) {
  /* Above FLT_MAX, doubles below the midpoint to the next power of two
   * round to FLT_MAX; from the midpoint on (FLT_MAX is odd) to infinity.
   * Converting them with a cast would be undefined behaviour. */
  const double overflow = (double)FLT_MAX + 0x1p103;
  if (isnan(d) || fabs(d) >= overflow) return false;
  float r = fabs(d) > FLT_MAX ? copysignf(FLT_MAX, (float)copysign(1.0, d)) : (float)d;
  if (!isnormal(r)) return false;
  *f = r;
  return true;
}

void moegen_float_literal(float f, char *buf, size_t size) {
  snprintf(buf, size, "%af", (double)f);
}
