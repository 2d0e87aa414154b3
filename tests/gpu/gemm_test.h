/* tests/gpu/gemm_test.h -- what the grouped GEMM GPU tests share: row sums,
 * exact random bf16 operands, and the (E, H, F) module. After check.h. */
#ifndef MOEGEN_TESTS_GEMM_TEST_H
#define MOEGEN_TESTS_GEMM_TEST_H

#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "half.h"

static inline int sum_of(const int32_t *c, int E) {
  int s = 0;
  for (int e = 0; e < E; e++) s += c[e];
  return s;
}

/* Random values scale * {-4, ..., 4} into host fp32 h and, if d, device
 * bf16 d. With x steps of 1/4 and w steps of 1/16 every product and partial
 * sum is exact in fp32 (multiples of 1/64 below 2^24/64), so the reference
 * is the exact result and the only error left is the output's rounding. */
static inline void fill(float *h, void *d, size_t n, float scale) {
  uint16_t *b = malloc(2 * n + 2);
  for (size_t i = 0; i < n; i++) {
    b[i] = f32_to_bf16(scale * (float)((int)(rng_u64() % 9) - 4));
    h[i] = bf16_to_f32(b[i]);
  }
  if (d) gpu_put(d, b, 2 * n);
  free(b);
}

/* A module of E experts, hidden H, ffn F (topk 1), with `units` loaded. */
static inline moegen_module *module_of(int E, int H, int F, unsigned units) {
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "gemmtest");
  c.experts = E;
  c.topk = 1;
  c.hidden = H;
  c.ffn = F;
  char what[96];
  snprintf(what, sizeof what, "module E=%d H=%d F=%d", E, H, F);
  return test_jit(&c, units, what);
}

#endif
