/* tests/gpu/cublaslt.c -- the cuBLASLt reference of the grouped GEMMs (see
 * cublaslt.h). Declares the few cuBLASLt types it uses (cublasLt.h values,
 * CUDA 13) instead of including the toolkit's headers. */
#include "cublaslt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int lt_status; /* cublasStatus_t: CUBLAS_STATUS_SUCCESS = 0 */
typedef struct lt_handle_st *lt_handle;
typedef struct lt_desc_st *lt_desc;
typedef struct lt_layout_st *lt_layout;
typedef struct lt_pref_st *lt_pref;
typedef struct {
  uint64_t data[8];
} lt_algo; /* cublasLtMatmulAlgo_t */
typedef struct {
  lt_algo algo;
  size_t workspace_size;
  lt_status state;
  float waves;
  int reserved[4];
} lt_heuristic; /* cublasLtMatmulHeuristicResult_t */

enum {
  LT_COMPUTE_32F = 68,          /* CUBLAS_COMPUTE_32F */
  LT_R_32F = 0,                 /* CUDA_R_32F */
  LT_R_16BF = 14,               /* CUDA_R_16BF */
  LT_DESC_TRANSA = 3,           /* CUBLASLT_MATMUL_DESC_TRANSA */
  LT_DESC_TRANSB = 4,           /* CUBLASLT_MATMUL_DESC_TRANSB */
  LT_PREF_MAX_WORKSPACE = 1,    /* CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES */
  LT_PREF_ALIGN_A = 5,          /* CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (then B, C, D) */
  LT_OP_N = 0, LT_OP_T = 1,     /* cublasOperation_t */
  LT_WORKSPACE = 32 << 20,
  LT_BASE_ALIGN = 256           /* lt_grouped_run's a, b, d */
};

typedef struct lt_api {
  lt_status (*create)(lt_handle *);
  lt_status (*destroy)(lt_handle);
  lt_status (*desc_create)(lt_desc *, int compute, int scale_type);
  lt_status (*desc_set)(lt_desc, int attr, const void *buf, size_t n);
  lt_status (*desc_destroy)(lt_desc);
  lt_status (*layout_create)(lt_layout *, int type, uint64_t rows, uint64_t cols, int64_t ld);
  lt_status (*layout_destroy)(lt_layout);
  lt_status (*pref_create)(lt_pref *);
  lt_status (*pref_set)(lt_pref, int attr, const void *buf, size_t n);
  lt_status (*pref_destroy)(lt_pref);
  lt_status (*heuristic)(lt_handle, lt_desc, lt_layout, lt_layout, lt_layout, lt_layout, lt_pref,
                         int requested, lt_heuristic *results, int *returned);
  lt_status (*matmul)(lt_handle, lt_desc, const void *alpha, const void *a, lt_layout,
                      const void *b, lt_layout, const void *beta, const void *c, lt_layout,
                      void *d, lt_layout, const lt_algo *, void *ws, size_t ws_bytes, CUstream);
} lt_api;

static const char *const lt_names[] = {
    "cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate",
    "cublasLtMatmulDescSetAttribute", "cublasLtMatmulDescDestroy", "cublasLtMatrixLayoutCreate",
    "cublasLtMatrixLayoutDestroy", "cublasLtMatmulPreferenceCreate",
    "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulPreferenceDestroy",
    "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul"};

struct lt_ctx {
  void *lib;
  lt_api api;
  lt_handle h;
  CUdeviceptr ws;
};

/* One expert's call: D = opA(A) opB(B) in cuBLASLt's column-major terms. */
typedef struct lt_call {
  size_t a_off, b_off, d_off; /* elements into the A, B, D buffers */
  lt_layout la, lb, ld;
  lt_algo algo;
} lt_call;

struct lt_grouped {
  const lt_ctx *c;
  lt_desc desc;
  int n_calls, d_fp32;
  lt_call *calls;
};

static void *open_library(char *why, size_t n) {
  const char *env = getenv("MOEGEN_LIBCUBLASLT");
  if (env && *env) {
    void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!lib) snprintf(why, n, "cannot load cuBLASLt %s: %s", env, dlerror());
    return lib;
  }
  char home_path[512] = "";
  const char *home = getenv("CUDA_HOME");
  if (home && *home) snprintf(home_path, sizeof home_path, "%s/lib64/libcublasLt.so.13", home);
  const char *candidates[] = {"libcublasLt.so.13", home_path,
                              "/usr/local/cuda/lib64/libcublasLt.so.13"};
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    void *lib = candidates[i][0] ? dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (lib) return lib;
  }
  snprintf(why, n,
           "cannot load libcublasLt.so.13 (tried the loader path, $CUDA_HOME/lib64 and "
           "/usr/local/cuda/lib64); set MOEGEN_LIBCUBLASLT to its path");
  return NULL;
}

lt_ctx *lt_open(char *why, size_t why_len) {
  lt_ctx *c = calloc(1, sizeof *c);
  c->lib = open_library(why, why_len);
  if (!c->lib) return free(c), NULL;
  void **fns = (void **)&c->api;
  for (size_t i = 0; i < sizeof lt_names / sizeof lt_names[0]; i++) {
    void *f = dlsym(c->lib, lt_names[i]);
    if (!f) {
      snprintf(why, why_len, "cuBLASLt lacks %s", lt_names[i]);
      dlclose(c->lib);
      return free(c), NULL;
    }
    memcpy(&fns[i], &f, sizeof f);
  }
  const moegen_driver *drv = NULL;
  lt_status st = c->api.create(&c->h);
  if (st || moegen_driver_get(&drv, why, why_len) != MOEGEN_OK ||
      drv->cuMemAlloc(&c->ws, LT_WORKSPACE)) {
    if (st) snprintf(why, why_len, "cublasLtCreate failed (status %d)", st);
    else if (drv) snprintf(why, why_len, "cannot allocate the cuBLASLt workspace");
    if (!st) c->api.destroy(c->h);
    dlclose(c->lib);
    return free(c), NULL;
  }
  return c;
}

void lt_close(lt_ctx *c) {
  if (!c) return;
  const moegen_driver *drv = NULL;
  if (moegen_driver_get(&drv, NULL, 0) == MOEGEN_OK) drv->cuMemFree(c->ws);
  c->api.destroy(c->h);
  dlclose(c->lib);
  free(c);
}

void lt_grouped_free(lt_grouped *g) {
  if (!g) return;
  const lt_api *api = &g->c->api;
  for (int i = 0; i < g->n_calls; i++) {
    api->layout_destroy(g->calls[i].la);
    api->layout_destroy(g->calls[i].lb);
    api->layout_destroy(g->calls[i].ld);
  }
  if (g->desc) api->desc_destroy(g->desc);
  free(g->calls);
  free(g);
}

/* The largest power of two (<= LT_BASE_ALIGN) dividing `bytes`. */
static uint32_t alignment_of(size_t bytes) {
  uint32_t a = LT_BASE_ALIGN;
  while (a > 1 && bytes % a) a /= 2;
  return a;
}

/* Row-major D [m, n] = L_A [m, k] L_B [k, n], where the A buffer holds L_A
 * row-major (ta = 0) or L_A^T (ta = 1), the B buffer L_B (tb = 0) or L_B^T
 * (tb = 1). Column-major, D is D^T = L_B^T L_A^T: cuBLASLt's A is our B
 * buffer (a [k, n] row-major buffer is n x k column-major), its B our A.
 * The heuristic is told each operand's alignment (call's offsets from
 * LT_BASE_ALIGN-aligned buffers; it assumes 256 bytes otherwise). */
static lt_status make_call(const lt_ctx *c, const lt_grouped *g, lt_pref pref, int m, int n, int k,
                           int ta, int tb, lt_call *call) {
  const lt_api *api = &c->api;
  const size_t d_size = g->d_fp32 ? 4 : 2;
  const uint32_t align[4] = {alignment_of(2 * call->b_off), alignment_of(2 * call->a_off),
                             alignment_of(d_size * call->d_off), alignment_of(d_size * call->d_off)};
  lt_status st = 0;
  for (int i = 0; i < 4 && !st; i++) st = api->pref_set(pref, LT_PREF_ALIGN_A + i, &align[i], 4);
  if (!st) st = tb ? api->layout_create(&call->la, LT_R_16BF, k, n, k)
                    : api->layout_create(&call->la, LT_R_16BF, n, k, n);
  if (!st) st = ta ? api->layout_create(&call->lb, LT_R_16BF, m, k, m)
                   : api->layout_create(&call->lb, LT_R_16BF, k, m, k);
  if (!st) st = api->layout_create(&call->ld, g->d_fp32 ? LT_R_32F : LT_R_16BF, n, m, n);
  if (st) return st;
  lt_heuristic best;
  int found = 0;
  st = api->heuristic(c->h, g->desc, call->la, call->lb, call->ld, call->ld, pref, 1, &best, &found);
  if (!st && found < 1) st = -1;
  if (!st) call->algo = best.algo;
  return st;
}

lt_grouped *lt_grouped_plan(lt_ctx *c, lt_kind kind, const int32_t *counts, int e0, int ne, int N,
                            int K, int d_fp32, char *why, size_t why_len) {
  const lt_api *api = &c->api;
  lt_grouped *g = calloc(1, sizeof *g);
  g->c = c;
  g->d_fp32 = d_fp32;
  g->calls = calloc((size_t)ne + 1, sizeof *g->calls);
  const int ta = kind == LT_WGRAD, tb = kind == LT_FWD;
  const int op_a = tb ? LT_OP_T : LT_OP_N, op_b = ta ? LT_OP_T : LT_OP_N; /* cuBLASLt's A, B */
  lt_pref pref = NULL;
  const uint64_t ws = LT_WORKSPACE;
  lt_status st = api->desc_create(&g->desc, LT_COMPUTE_32F, LT_R_32F);
  if (!st) st = api->desc_set(g->desc, LT_DESC_TRANSA, &op_a, sizeof op_a);
  if (!st) st = api->desc_set(g->desc, LT_DESC_TRANSB, &op_b, sizeof op_b);
  if (!st) st = api->pref_create(&pref);
  if (!st) st = api->pref_set(pref, LT_PREF_MAX_WORKSPACE, &ws, sizeof ws);
  size_t row0 = 0;
  for (int e = 0; e < e0; e++) row0 += (size_t)counts[e];
  for (int e = e0; e < e0 + ne && !st; row0 += (size_t)counts[e++]) {
    const int me = counts[e];
    if (me <= 0) continue;
    lt_call *call = &g->calls[g->n_calls];
    if (kind == LT_FWD) { /* [me, K] x [N, K]^T */
      *call = (lt_call){.a_off = row0 * K, .b_off = (size_t)e * N * K, .d_off = row0 * N};
      st = make_call(c, g, pref, me, N, K, ta, tb, call);
    } else if (kind == LT_DGRAD) { /* [me, N] x [N, K] */
      *call = (lt_call){.a_off = row0 * N, .b_off = (size_t)e * N * K, .d_off = row0 * K};
      st = make_call(c, g, pref, me, K, N, ta, tb, call);
    } else { /* [me, N]^T x [me, K] */
      *call = (lt_call){.a_off = row0 * N, .b_off = row0 * K, .d_off = (size_t)(e - e0) * N * K};
      st = make_call(c, g, pref, N, K, me, ta, tb, call);
    }
    g->n_calls++; /* freed with the plan even when make_call failed part way */
  }
  if (pref) api->pref_destroy(pref);
  if (st) {
    snprintf(why, why_len, "cuBLASLt plan failed (status %d)", st);
    lt_grouped_free(g);
    return NULL;
  }
  return g;
}

int lt_grouped_run(const lt_grouped *g, const void *a, const void *b, void *d, CUstream s) {
  const lt_api *api = &g->c->api;
  if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)d) % LT_BASE_ALIGN) return -1;
  const float one = 1.f, zero = 0.f;
  const size_t d_size = g->d_fp32 ? 4 : 2;
  for (int i = 0; i < g->n_calls; i++) {
    const lt_call *call = &g->calls[i];
    void *dd = (char *)d + call->d_off * d_size;
    lt_status st = api->matmul(g->c->h, g->desc, &one, (const uint16_t *)b + call->b_off, call->la,
                               (const uint16_t *)a + call->a_off, call->lb, &zero, dd, call->ld, dd,
                               call->ld, &call->algo, (void *)(uintptr_t)g->c->ws, LT_WORKSPACE, s);
    if (st) return st;
  }
  return 0;
}
