/* examples/common/example.h -- what the examples share: CUDA runtime checks,
 * exit 77 without a GPU, bf16 conversion, random device data, a clock and a
 * reader for the module's own config text.
 *
 * The examples use the CUDA runtime (linked statically, so they start on a
 * machine without a driver) the way an application would; moegen's ops run
 * on the context current on the calling thread, here device 0's primary
 * context, which the runtime makes current. */
#ifndef MOEGEN_EXAMPLE_H
#define MOEGEN_EXAMPLE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "moegen/runtime.h"

#define EXAMPLE_SKIP 77 /* CTest's SKIP_RETURN_CODE */

/* Exits 1 with the call and CUDA's message on a failed runtime call. */
#define CUDA_CHECK(call)                                                             \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Makes device 0 and its primary context current; exits 77 (skip) when the
 * machine has no driver or no device, 1 when the driver is too old for the
 * CUDA runtime the example was built with. */
static inline void example_device_or_skip(void) {
  int n = 0, driver = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  cudaDriverGetVersion(&driver); /* 0: no driver installed */
  if (e == cudaErrorNoDevice || (e != cudaSuccess && driver == 0) || (e == cudaSuccess && n == 0)) {
    printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    exit(EXAMPLE_SKIP);
  }
  CUDA_CHECK(e); /* e.g. a driver older than this CUDA runtime */
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(NULL)); /* creates the primary context now */
}

/* Returns if st is MOEGEN_OK. Otherwise prints what failed and the module's
 * last error, and exits 77 for the statuses that mean "cannot run on this
 * machine" (no driver, no device, a module built for another arch), else 1. */
static inline void example_check(moegen_status st, const moegen_module *m, const char *what) {
  if (st == MOEGEN_OK) return;
  int skip = st == MOEGEN_ERR_NO_DRIVER || st == MOEGEN_ERR_NO_DEVICE ||
             st == MOEGEN_ERR_ARCH_MISMATCH;
  printf("%s: %s: %s %s\n", skip ? "SKIP" : "FAIL", what, moegen_status_string(st),
         m ? moegen_module_last_error(m) : "");
  exit(skip ? EXAMPLE_SKIP : 1);
}

/* Seconds (C11's wall clock). */
static inline double example_now(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* bf16 <-> fp32 (round to nearest even; finite values only). */
static inline uint16_t example_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float example_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* xorshift64*, seeded from EXAMPLE_SEED or the clock (printed). */
static uint64_t example_rng_state;
static inline uint64_t example_rng(void) {
  if (!example_rng_state) {
    const char *s = getenv("EXAMPLE_SEED");
    example_rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    if (!example_rng_state) example_rng_state = 1;
    printf("seed: EXAMPLE_SEED=%llu\n", (unsigned long long)example_rng_state);
  }
  example_rng_state ^= example_rng_state >> 12;
  example_rng_state ^= example_rng_state << 25;
  example_rng_state ^= example_rng_state >> 27;
  return example_rng_state * 2685821657736338717ull;
}
/* Uniform in [-1, 1). */
static inline float example_uniform(void) {
  return (float)((double)(example_rng() >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* Values per block of example_random_bf16_kept. */
static inline size_t example_block_of(size_t n) {
  return n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
}

/* A device buffer of n bf16 values: the first example_block_of(n) random
 * uniform in [-scale, scale), then that block repeated (copied on the
 * device, so the weights of a large model take milliseconds). If kept is
 * not NULL, *kept receives the block (malloc'd): element i is
 * (*kept)[i % example_block_of(n)]. */
static inline void *example_random_bf16_kept(size_t n, float scale, uint16_t **kept) {
  size_t block = example_block_of(n);
  uint16_t *h = (uint16_t *)malloc(2 * block + 2); /* cast: also C++ (bench/floor.cu) */
  void *d = NULL;
  if (!h) exit(1);
  for (size_t i = 0; i < block; i++) h[i] = example_f32_to_bf16(scale * example_uniform());
  CUDA_CHECK(cudaMalloc(&d, 2 * n + 16));
  CUDA_CHECK(cudaMemcpy(d, h, 2 * block, cudaMemcpyHostToDevice));
  for (size_t done = block; done < n; done *= 2) {
    size_t c = done < n - done ? done : n - done;
    CUDA_CHECK(cudaMemcpy((char *)d + 2 * done, d, 2 * c, cudaMemcpyDeviceToDevice));
  }
  if (kept) *kept = h;
  else free(h);
  return d;
}

static inline void *example_random_bf16(size_t n, float scale) {
  return example_random_bf16_kept(n, scale, NULL);
}

/* The value text of `key` in a module's config_lua (moegen's `  key = value,`
 * lines) copied into buf, or "" if absent. */
static inline const char *example_config_value(const moegen_module *m, const char *key,
                                               char *buf, size_t size) {
  char pat[80];
  snprintf(pat, sizeof pat, "\n  %s = ", key);
  const char *s = strstr(moegen_module_image(m)->config_lua, pat);
  size_t len = s ? strcspn(s += strlen(pat), ",\n") : 0;
  if (len >= size) len = size - 1;
  memcpy(buf, s ? s : "", len);
  buf[len] = 0;
  return buf;
}

#endif
