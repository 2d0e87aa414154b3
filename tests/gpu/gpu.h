/* tests/gpu/gpu.h -- what every GPU test (and the benchmark) needs: the
 * driver, a context, device buffers, random data, exit 77 without a device. */
#ifndef MOEGEN_TESTS_GPU_H
#define MOEGEN_TESTS_GPU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "driver.h"

#define GPU_SKIP 77

/* The driver table (the runtime's, shared by every translation unit); valid
 * after gpu_init_or_skip. */
static inline const moegen_driver *gpu_driver(void) {
  const moegen_driver *d = NULL;
  moegen_driver_get(&d, NULL, 0);
  return d;
}
#define gpu_drv (gpu_driver())

/* Driver + primary context of device 0 made current; exits 77 (skip) when the
 * machine has no driver or no device. */
static inline void gpu_init_or_skip(void) {
  char why[512];
  const moegen_driver *drv = NULL;
  moegen_status st = moegen_driver_get(&drv, why, sizeof why);
  int n = 0;
  if (st != MOEGEN_OK || gpu_drv->cuDeviceGetCount(&n) != 0 || n == 0) {
    printf("SKIP: no CUDA device (%s)\n", st != MOEGEN_OK ? why : "no device");
    exit(GPU_SKIP);
  }
  CUdevice dev;
  CUcontext ctx;
  if (gpu_drv->cuDeviceGet(&dev, 0) || gpu_drv->cuDevicePrimaryCtxRetain(&ctx, dev) ||
      gpu_drv->cuCtxSetCurrent(ctx)) {
    printf("FAIL: cannot make a context on device 0\n");
    exit(1);
  }
}

/* Aborts the test on a failed driver call. */
#define CU(call)                                                                  \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_) {                                                                     \
      char b_[256];                                                               \
      moegen_driver_describe(r_, b_, sizeof b_);                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, b_);   \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static inline void *gpu_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  CU(gpu_drv->cuMemAlloc(&p, bytes ? bytes : 16));
  return (void *)(uintptr_t)p;
}
static inline void gpu_free(void *p) {
  if (p) gpu_drv->cuMemFree((CUdeviceptr)(uintptr_t)p);
}
static inline void gpu_put(void *dst, const void *src, size_t n) {
  if (n) CU(gpu_drv->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n));
}
static inline void gpu_get(void *dst, const void *src, size_t n) {
  if (n) CU(gpu_drv->cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n));
}
/* Replays graph ge on stream s and waits for it, after everything queued on
 * the legacy stream has finished (gpu_put's copies and gpu_poison's memsets
 * run there, and a non-blocking s would not wait for them). */
static inline void gpu_replay(CUgraphExec ge, CUstream s) {
  CU(gpu_drv->cuCtxSynchronize());
  CU(gpu_drv->cuGraphLaunch(ge, s));
  CU(gpu_drv->cuStreamSynchronize(s));
}

/* Fills with 0xFF bytes: NaN floats, 255 map bytes, -1 ints. */
static inline void gpu_poison(void *p, size_t n) {
  if (n) CU(gpu_drv->cuMemsetD8((CUdeviceptr)(uintptr_t)p, 0xff, n));
}

/* xorshift64*, seeded from MOEGEN_TEST_SEED or the clock (printed). The state
 * is per translation unit: each seeds itself on first use, and
 * MOEGEN_TEST_SEED gives every unit the same seed. */
static uint64_t rng_state;
static inline void rng_seed(void) {
  const char *s = getenv("MOEGEN_TEST_SEED");
  rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
  if (!rng_state) rng_state = 1;
  printf("seed: MOEGEN_TEST_SEED=%llu\n", (unsigned long long)rng_state);
}
static inline uint64_t rng_u64(void) {
  if (!rng_state) rng_seed();
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static inline float rng_uniform(void) { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)); }
static inline float rng_normal(void) {
  float u = rng_uniform() + 1e-7f, v = rng_uniform();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

#endif
