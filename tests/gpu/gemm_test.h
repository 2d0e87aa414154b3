/* tests/gpu/gemm_test.h -- what the grouped GEMM GPU tests share: row sums,
 * exact random bf16 operands, and the (E, H, F) module. After check.h. */
#ifndef MOEGEN_TESTS_GEMM_TEST_H
#define MOEGEN_TESTS_GEMM_TEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Uploads counts [E] to dcounts [E] and their running sums to doffsets
 * [E + 1] (device int32), so a case can split rows either way. */
static inline void put_counts(int32_t *dcounts, int32_t *doffsets, const int32_t *counts, int E) {
  int32_t *off = malloc(4 * (size_t)E + 4);
  off[0] = 0;
  for (int e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
  gpu_put(dcounts, counts, 4 * (size_t)E);
  gpu_put(doffsets, off, 4 * (size_t)E + 4);
  free(off);
}

/* rows rows spread over E experts, each on a uniformly random one (at few
 * rows most experts stay empty), into c[E]. */
static inline void spread_rows(int rows, int E, int32_t *c) {
  for (int e = 0; e < E; e++) c[e] = 0;
  for (int r = 0; r < rows; r++) c[rng_u64() % (uint64_t)E]++;
}

/* How many row sets a GEMM case runs: 1 (its own counts), or in
 * small-shape mode (gpu.h) one per MOEGEN_TEST_TOKENS count. */
static inline int count_sets(void) { return gpu_small() ? gpu_token_env()->n : 1; }

/* The counts of set `set` (< count_sets()) of a case whose own counts are
 * own[E]: own, or in small-shape mode the set-th listed count of rows
 * spread over the experts (spread_rows). Into c[E]. Returns the buffer
 * bound (max_rows) of the set: that of the case's own counts, their sum +
 * `extra` rows (or more if the set has more rows), so that every set takes
 * the kernels (tall or not) the case takes. */
static inline int counts_of_set(int set, const int32_t *own, int E, int extra, int32_t *c) {
  if (gpu_small()) spread_rows(gpu_token_env()->t[set], E, c);
  else memcpy(c, own, 4 * (size_t)E);
  const int rows = sum_of(c, E), own_rows = sum_of(own, E);
  return (rows > own_rows ? rows : own_rows) + extra;
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
