/* tests/unit/test_quant_ref.c -- the FP8 CPU reference's own rules
 * (tests/ref/quant_ref.h), on the CPU: every code of E4M3 and E5M2 decodes
 * to its value and encodes back; midpoints round to the even code;
 * saturation to +-FP8_MAX (values past it, infinities), NaN, signed zero,
 * subnormals; the scale rule (amax 0 -> 1, overflow -> FLT_MAX, pow2). The
 * GPU test (tests/gpu/test_quant.c) then holds the kernels to these bytes. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant_ref.h"
#include "runtime_check.h"

static void formats(void) {
  for (int f = 0; f < 2; f++) {
    moegen_fp8_format F = (moegen_fp8_format)f;
    uint8_t top = f ? 0x7b : 0x7e;
    CHECK(quant_ref_fp8_value(top, F) == moegen_fp8_max(F), "format %d max %g", f,
          quant_ref_fp8_value(top, F));
    for (int c = 0; c < 256; c++) {
      double v = quant_ref_fp8_value((uint8_t)c, F);
      if (isnan(v) || isinf(v)) continue;
      CHECK(quant_ref_fp8((float)v, F) == c, "format %d code %02x (%g) encodes to %02x", f, c, v,
            quant_ref_fp8((float)v, F));
      if ((c & 0x7f) < top) { /* the midpoint to the next code goes to the even one */
        double next = quant_ref_fp8_value((uint8_t)(c + 1), F), mid = (v + next) / 2;
        int even = c & 1 ? c + 1 : c;
        CHECK(quant_ref_fp8((float)mid, F) == even, "format %d midpoint %g after %02x -> %02x", f,
              mid, c, quant_ref_fp8((float)mid, F));
        CHECK(quant_ref_fp8(nextafterf((float)mid, (float)next), F) == ((c & 0x80) | ((c & 0x7f) + 1)),
              "format %d just above the midpoint after %02x", f, c);
      }
    }
    CHECK(quant_ref_fp8(NAN, F) == 0x7f && quant_ref_fp8(-0.f, F) == 0x80 && quant_ref_fp8(0.f, F) == 0,
          "format %d NaN and zeros", f);
    CHECK(quant_ref_fp8(INFINITY, F) == top && quant_ref_fp8(-INFINITY, F) == (0x80 | top) &&
              quant_ref_fp8(1e30f, F) == top && quant_ref_fp8(-3.4e38f, F) == (0x80 | top),
          "format %d saturation", f);
    CHECK(quant_ref_fp8(-1e-30f, F) == 0x80, "format %d tiny negative -> -0", f);
  }
  /* E4M3: 448 = 0x7e; 464 (the midpoint to the missing 480) and 500 saturate */
  CHECK(quant_ref_fp8(464.f, MOEGEN_FP8_E4M3) == 0x7e && quant_ref_fp8(500.f, MOEGEN_FP8_E4M3) == 0x7e &&
            quant_ref_fp8(449.f, MOEGEN_FP8_E4M3) == 0x7e,
        "e4m3 near the max");
  /* subnormals: 2^-9 is code 1; 2^-10 ties to 0; 3 * 2^-10 ties to code 2 */
  CHECK(quant_ref_fp8(ldexpf(1, -9), MOEGEN_FP8_E4M3) == 1 &&
            quant_ref_fp8(ldexpf(1, -10), MOEGEN_FP8_E4M3) == 0 &&
            quant_ref_fp8(3 * ldexpf(1, -10), MOEGEN_FP8_E4M3) == 2 &&
            quant_ref_fp8(ldexpf(1, -6), MOEGEN_FP8_E4M3) == 8,
        "e4m3 subnormals");
  CHECK(quant_ref_fp8(ldexpf(1, -16), MOEGEN_FP8_E5M2) == 1 &&
            quant_ref_fp8(60000.f, MOEGEN_FP8_E5M2) == 0x7b &&
            quant_ref_fp8(1.25f, MOEGEN_FP8_E5M2) == 0x3d && quant_ref_fp8(1.125f, MOEGEN_FP8_E5M2) == 0x3c,
        "e5m2 values");
}

static void scales(void) {
  CHECK(quant_ref_scale(0.f, 448.f, 0) == 1.f && quant_ref_scale(0.f, 448.f, 1) == 1.f, "amax 0");
  CHECK(quant_ref_scale(1.f, 448.f, 0) == 448.f && quant_ref_scale(1.f, 448.f, 1) == 256.f, "amax 1");
  CHECK(quant_ref_scale(3.f, 448.f, 0) == 448.f / 3.f && quant_ref_scale(3.f, 448.f, 1) == 128.f,
        "amax 3");
  CHECK(quant_ref_scale(1e-40f, 448.f, 0) == FLT_MAX && quant_ref_scale(1e-40f, 448.f, 1) == ldexpf(1, 127),
        "overflowing quotient");
  CHECK(quant_ref_scale(57344.f, 57344.f, 0) == 1.f, "e5m2 max");
  /* a row: each 1x128 tile its own scale; an all-zero tile scale 1 and zero bytes */
  uint16_t x[256];
  for (int i = 0; i < 128; i++) x[i] = 0x3f80 | (uint16_t)(i & 1 ? 0x8000 : 0); /* +-1 */
  memset(x + 128, 0, 256);
  uint8_t q[256];
  float s[8];
  quant_ref_rows(x, 1, 256, 1, q, s, 4);
  CHECK(s[0] == 1.f / 256.f && s[4] == 1.f && q[0] == 0x78 && q[1] == 0xf8 && q[128] == 0,
        "rows: scales %g %g, bytes %02x %02x %02x", s[0], s[4], q[0], q[1], q[128]);
}

int main(void) {
  formats();
  scales();
  return check_result("test_quant_ref");
}
