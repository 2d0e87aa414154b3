/* tests/gpu/cublaslt.h -- the cuBLASLt reference of the grouped GEMMs (SPEC.md
 * 5): one cublasLtMatmul per expert, bf16 operands, fp32 accumulation, D in
 * fp32 (a reference for the tests) or bf16 (a peer for moegen-bench).
 *
 * libcublasLt.so.13 is dlopened (no link-time dependency): $MOEGEN_LIBCUBLASLT
 * alone if set, else the loader path, $CUDA_HOME/lib64, /usr/local/cuda/lib64.
 * The per-expert row counts are host values: this path syncs nothing itself,
 * but its calls depend on the routing, unlike moegen's kernels. */
#ifndef MOEGEN_TESTS_CUBLASLT_H
#define MOEGEN_TESTS_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

typedef struct lt_ctx lt_ctx;         /* library, handle, workspace (one device) */
typedef struct lt_grouped lt_grouped; /* the prepared calls of one grouped GEMM */

/* Which grouped GEMM (row-major buffers; rows of expert e are o_e .. o_e + m_e):
 *   LT_FWD   D [rows, N] = X_e [m_e, K] W_e^T   A = X, B = W [E, N, K]
 *   LT_DGRAD D [rows, K] = dY_e [m_e, N] W_e    A = dY, B = W [E, N, K]
 *   LT_WGRAD D [E, N, K] = dY_e^T X_e           A = dY [rows, N], B = X [rows, K]
 * (N, K as the forward's.) */
typedef enum lt_kind { LT_FWD, LT_DGRAD, LT_WGRAD } lt_kind;

/* Loads cuBLASLt for the current context's device and makes a handle and a
 * 32 MiB workspace. NULL (the reason in why) if the library is missing. */
lt_ctx *lt_open(char *why, size_t why_len);
void lt_close(lt_ctx *c);

/* Prepares kind's calls for experts [e0, e0 + ne) of counts[e0 + ne]
 * (host, >= 0; rows of expert e start at the sum of the counts before it)
 * with the forward's N and K: layouts and the heuristic's best algorithm
 * per call. D's rows are those of the whole buffer (LT_FWD, LT_DGRAD); for
 * LT_WGRAD D holds the ne experts' dW_e only. d_fp32: D in fp32, else bf16.
 * NULL (the reason in why) on a cuBLASLt error. */
lt_grouped *lt_grouped_plan(lt_ctx *c, lt_kind kind, const int32_t *counts, int e0, int ne, int N,
                            int K, int d_fp32, char *why, size_t why_len);
void lt_grouped_free(lt_grouped *g);

/* Runs the prepared calls on stream s: writes D's rows of every expert
 * (LT_WGRAD: dW_e of every expert with m_e > 0; empty experts' dW_e are left
 * untouched). a, b and d must be 256-byte aligned (cuMemAlloc's; the plan
 * told the heuristic each call's alignment from there). 0 on success, -1
 * for a misaligned buffer, else the cuBLASLt status. */
int lt_grouped_run(const lt_grouped *g, const void *a, const void *b, void *d, CUstream s);

#endif
