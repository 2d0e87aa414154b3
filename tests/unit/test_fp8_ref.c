/* CPU test of the fp8_block quantizer reference (tests/ref/fp8_ref.c):
 * every E4M3 byte round-trips, midpoints round to even, values past 448
 * saturate, and block quantization picks power-of-two dequant scales with
 * the block's amax inside the E4M3 range and every value within half an
 * E4M3 step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fp8_ref.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL " __VA_ARGS__); printf("\n"); failures++; } } while (0)

int main(void) {
  for (int b = 0; b < 256; b++) {
    const float v = fp8_e4m3_to_f32((uint8_t)b);
    if ((b & 0x7f) == 0x7f) { CHECK(isnan(v), "byte %#x is NaN", b); continue; }
    const uint8_t back = fp8_e4m3_from_f32(v);
    CHECK(back == b || (v == 0.f && (back & 0x7f) == 0), "byte %#x -> %g -> %#x", b, v, back);
    if ((b & 0x7f) < 0x7e) { /* the midpoint to the next byte rounds to the even mantissa */
      const float mid = 0.5f * (v + fp8_e4m3_to_f32((uint8_t)(b + 1)));
      const uint8_t r = fp8_e4m3_from_f32(mid), want = (b & 1) ? (uint8_t)(b + 1) : (uint8_t)b;
      CHECK(r == want, "midpoint %g of byte %#x -> %#x, want %#x", mid, b, r, want);
    }
  }
  CHECK(fp8_e4m3_from_f32(1e6f) == 0x7e && fp8_e4m3_from_f32(-500.f) == 0xfe, "saturation");
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.f && fp8_e4m3_to_f32(0x01) == ldexpf(1.f, -9), "448, 2^-9");
  enum { M = 3, K = 256, LD = 8 };
  float x[M * K], deq[M * K], scale[2 * LD];
  uint8_t q[M * K];
  for (int i = 0; i < M * K; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * (i < K ? 1e-3f : 37.f);
  for (int i = 0; i < K; i++) x[2 * K + i] = 0.f; /* an all-zero row: scale 1 */
  fp8_quant_rows(M, K, x, LD, q, scale, deq);
  for (int r = 0; r < M; r++)
    for (int j = 0; j < K / FP8_BLOCK; j++) {
      const float s = scale[j * LD + r];
      int ex;
      CHECK(frexpf(s, &ex) == 0.5f, "row %d block %d: scale %g not a power of two", r, j, s);
      float amax = 0.f;
      for (int i = 0; i < FP8_BLOCK; i++) {
        const int k = r * K + j * FP8_BLOCK + i;
        amax = fmaxf(amax, fabsf(x[k]));
        CHECK(fabsf(deq[k] - x[k]) <= fmaxf(fabsf(x[k]) / 16.f, ldexpf(s, -10)),
              "x[%d] = %g dequantizes to %g", k, x[k], deq[k]);
      }
      CHECK(amax == 0.f ? s == 1.f : amax / s <= FP8_E4M3_MAX && amax / s > FP8_E4M3_MAX / 2,
            "row %d block %d: amax %g / scale %g", r, j, amax, s);
    }
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures != 0;
}
