/* tests/gpu/gpu.h -- what every GPU test (and the benchmark) needs: the
 * driver, a context, device buffers, random data, exit 77 without a device;
 * and the test modes every GPU test shares (read from the environment):
 *
 *  - small-shape mode, MOEGEN_TEST_TOKENS=0,1,3,33: the test runs only these
 *    token counts (gpu_tokens, gpu_token; the GEMM tests: these many rows),
 *    on its own configs, with its checks, tolerances, poisoned outputs and
 *    fresh random inputs unchanged, and a 0-byte buffer is NULL (gpu_alloc),
 *    so that T = 0 passes NULL data pointers as an empty tensor of most
 *    frameworks does. For compute-sanitizer runs (bench/sanitize.sh).
 *  - MOEGEN_TEST_SUBSET=1: the configs a test marks heavy (gpu_skip_heavy:
 *    the models' real GEMM shapes) are skipped, for the slow sanitizer tools.
 *  - warm mode, MOEGEN_TEST_WARM=1 or =sm_XY[a]: the test runs no case; it
 *    compiles the modules it would JIT into the JIT cache (check.h test_jit).
 */
#ifndef MOEGEN_TESTS_GPU_H
#define MOEGEN_TESTS_GPU_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "driver.h"

#define GPU_SKIP 77

/* Warm mode (check.h test_jit): MOEGEN_TEST_WARM's value ("1": the device's
 * arch; "sm_XY[a]": that arch, no device needed), or NULL when it is unset,
 * empty or "0". */
static inline const char *gpu_warm(void) {
  const char *w = getenv("MOEGEN_TEST_WARM");
  return w && *w && strcmp(w, "0") != 0 ? w : NULL;
}

/* 1 in warm mode for a named arch (MOEGEN_TEST_WARM=sm_XY[a]): no device is used. */
static inline int gpu_warm_named_arch(void) {
  const char *w = gpu_warm();
  return w && strncmp(w, "sm_", 3) == 0;
}

/* ---------------------------------------------------------------- small-shape mode */

enum { GPU_MAX_TOKENS = 16 };

/* MOEGEN_TEST_TOKENS as a list: n = 0 when it is unset or empty. */
typedef struct gpu_token_list {
  int n;
  int t[GPU_MAX_TOKENS];
} gpu_token_list;

/* The list of MOEGEN_TEST_TOKENS ("0,1,3,33": at most GPU_MAX_TOKENS decimal
 * counts in 0..1000000, comma-separated), parsed on the first call (which
 * prints it); a malformed value fails the test (exit 1). Call it first from
 * the main thread (gpu_init_or_skip does). */
static inline const gpu_token_list *gpu_token_env(void) {
  static gpu_token_list list;
  static int parsed;
  if (parsed) return &list;
  parsed = 1;
  const char *e = getenv("MOEGEN_TEST_TOKENS");
  if (!e || !*e) return &list;
  for (const char *p = e;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || *p < '0' || *p > '9' || errno || v > 1000000 || list.n == GPU_MAX_TOKENS ||
        (*end && *end != ',')) {
      printf("FAIL: MOEGEN_TEST_TOKENS=%s: want at most %d comma-separated token counts in "
             "0..1000000\n", e, GPU_MAX_TOKENS);
      exit(1);
    }
    list.t[list.n++] = (int)v;
    if (!*end) break;
    p = end + 1;
  }
  printf("small-shape mode: MOEGEN_TEST_TOKENS=%s\n", e);
  return &list;
}

/* 1 in small-shape mode (MOEGEN_TEST_TOKENS set). */
static inline int gpu_small(void) { return gpu_token_env()->n > 0; }

/* The token counts of a case list into out: own[0..n_own) (n_own <=
 * GPU_MAX_TOKENS), or in small-shape mode the MOEGEN_TEST_TOKENS list.
 * Returns how many. */
static inline int gpu_tokens(const int *own, int n_own, int out[GPU_MAX_TOKENS]) {
  const gpu_token_list *l = gpu_token_env();
  const int *src = l->n ? l->t : own;
  int n = l->n ? l->n : n_own;
  if (n > GPU_MAX_TOKENS) n = GPU_MAX_TOKENS;
  for (int i = 0; i < n; i++) out[i] = src[i];
  return n;
}

/* The token count of a case that has one of its own (a graph capture, a
 * counts-only call): own, or in small-shape mode the listed count nearest to
 * it (the smaller of two as near). */
static inline int gpu_token(int own) {
  const gpu_token_list *l = gpu_token_env();
  int best = own;
  for (int i = 0; i < l->n; i++) {
    const long d = labs((long)l->t[i] - own), db = labs((long)best - own);
    if (i == 0 || d < db || (d == db && l->t[i] < best)) best = l->t[i];
  }
  return best;
}

/* 1 (after printing why) if the heavy config `what` is to be skipped:
 * MOEGEN_TEST_SUBSET=1 is set. A test marks with it the configs that are
 * too slow (or too large) for the slower sanitizer tools. */
static inline int gpu_skip_heavy(const char *what) {
  const char *e = getenv("MOEGEN_TEST_SUBSET");
  if (!e || strcmp(e, "1") != 0) return 0;
  printf("skip %s (a heavy config; MOEGEN_TEST_SUBSET=1)\n", what);
  return 1;
}

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
  if (gpu_warm_named_arch()) {
    printf("warm mode: compiling for %s, no device used (MOEGEN_TEST_WARM)\n", gpu_warm());
    gpu_token_env();
    return;
  }
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
  gpu_token_env(); /* parsed (and printed) here, on the main thread */
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

/* ---------------------------------------------------------------- device buffers */

/* `bytes` of device memory (cuMemAlloc: 256-byte aligned). 0 bytes: a
 * 16-byte buffer, or NULL in small-shape mode (see the top). */
static inline void *gpu_alloc(size_t bytes) {
  if (!bytes && gpu_small()) return NULL;
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
