/* runtime/gemm_tiles.h -- internal: a grouped GEMM call's tile height, workspace and launch. */
#ifndef MOEGEN_RUNTIME_GEMM_TILES_H
#define MOEGEN_RUNTIME_GEMM_TILES_H

#include <stddef.h>

#include "module.h"
#include "moegen/runtime.h"

/* 1 if a row-tiled GEMM call (forward, SwiGLU forward, dgrad, dgrad + SwiGLU)
 * with this host bound on its rows takes the tall (256-row) kernels: rows
 * that could average tall_rows_per_expert or more per expert. Host-only,
 * from max_rows alone (the counts stay on the device). */
static inline int moegen_gemm_tall(const moegen_image *img, int64_t max_rows) {
  return img->gemm.tall_rows_per_expert > 0 &&
         max_rows >= (int64_t)img->gemm.tall_rows_per_expert * img->gemm.experts;
}

/* The grouped GEMM ops (each kernel of MOEGEN_KERNELS serves one). */
typedef enum moegen_gemm_op {
  MOEGEN_GEMM_OP_FWD,   /* moegen_gemm_fwd */
  MOEGEN_GEMM_OP_GLU,   /* moegen_gemm1_fwd_glu (gemm1 only) */
  MOEGEN_GEMM_OP_DGRAD, /* moegen_gemm_dgrad */
  MOEGEN_GEMM_OP_DGLU,  /* moegen_gemm2_dgrad_glu (gemm2 only) */
  MOEGEN_GEMM_OP_WGRAD, /* moegen_gemm_wgrad (no tall kernels) */
  MOEGEN_GEMM_OP_FWD_FP8, /* moegen_gemm_fwd_fp8 (no tall kernels) */
  MOEGEN_GEMM_OP_GLU_FP8, /* moegen_gemm1_fwd_glu_fp8 (gemm1 only, no tall kernels) */
  MOEGEN_GEMM_OP_COUNT
} moegen_gemm_op;

/* The kernel of `op` for GEMM `which` and a call of max_rows rows (the
 * tall one where moegen_gemm_tall says so), or MOEGEN_KERNEL_COUNT if op
 * has none for which. The one table of which kernel serves which call. */
moegen_kernel_id moegen_gemm_kernel(const moegen_image *img, moegen_gemm_id which, moegen_gemm_op op,
                                    int64_t max_rows);

/* The checks every GEMM op starts with: `which` names a GEMM of op, the
 * module holds its kernels, 0 <= max_rows <= INT32_MAX, exactly one of
 * counts and offsets (or neither with max_rows = 0, which reads no rows).
 * Sets *id (moegen_gemm_kernel) and *p (its plan). */
moegen_status moegen_gemm_check(moegen_module *m, const char *what, moegen_gemm_id which,
                                moegen_gemm_op op, int64_t max_rows, const int32_t *counts,
                                const int32_t *offsets, moegen_kernel_id *id,
                                const moegen_gemm_kernel_plan **p);

/* The forward plan of GEMM `which` for a shape function (pure):
 * INVALID_ARGUMENT if which is not 1 or 2, NOT_SUPPORTED if the image has no
 * GEMM kernels. */
moegen_status moegen_gemm_shape_plan(const moegen_image *img, moegen_gemm_id which,
                                     const moegen_gemm_kernel_plan **p);

/* Scratch bytes of a row-tiled GEMM call (forward, dgrad, SwiGLU forward,
 * dgrad + SwiGLU): the sm_90a kernels' tile ticket; none on the portable
 * path. */
static inline size_t moegen_gemm_workspace_bytes(const moegen_image *img) {
  return img->gemm.portable ? 0 : MOEGEN_GEMM_WORKSPACE_BYTES;
}

/* A row-tiled call's tile ticket: the caller's workspace, and where its
 * address goes (the variable behind the kernel's last parameter). */
typedef struct moegen_gemm_ticket_req {
  const char *op; /* names the op in messages */
  void *workspace;
  size_t workspace_bytes;
  void **ticket;
} moegen_gemm_ticket_req;

/* Loads GEMM kernel `id`; for a row-tiled call (tk not NULL) checks the
 * caller's workspace and on sm_90a zeroes its ticket on `stream` (a memset
 * node; *tk->ticket = its address, NULL on the portable path, whose kernels
 * take no ticket: cuLaunchKernel reads only the parameters a kernel
 * declares); then launches params (of signature sig, moegen_params_SIG of
 * runtime/kernel_args.h) on min(resident CTAs, max_tiles) CTAs. Nothing is
 * enqueued unless the kernel is there and the workspace is good. */
moegen_status moegen_gemm_launch(moegen_module *m, moegen_kernel_id id, moegen_signature_id sig,
                                 const moegen_gemm_kernel_plan *p, long long max_tiles,
                                 void **params, CUstream stream, const moegen_gemm_ticket_req *tk);

/* Rows of one TMA box of a row tile's A operand (x, dy): the tall kernels
 * load two a k step, one where the tile's second half lies past its
 * expert's end (templates/grouped_gemm_sm90.cu.lt load_a, ggemm::BM). */
#define MOEGEN_GEMM_A_BOX_ROWS 128u

#endif
