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
 * declares); then launches on min(resident CTAs, max_tiles) CTAs. Nothing
 * is enqueued unless the kernel is there and the workspace is good.
 * what: the message of a failed cuLaunchKernel. */
moegen_status moegen_gemm_launch(moegen_module *m, moegen_kernel_id id,
                                 const moegen_gemm_kernel_plan *p, long long max_tiles, void **params,
                                 CUstream stream, const char *what, const moegen_gemm_ticket_req *tk);

/* Rows of one TMA box of a row tile's A operand (x, dy): the tall kernels
 * load two a k step, one where the tile's second half lies past its
 * expert's end (templates/grouped_gemm_sm90.cu.lt load_a, ggemm::BM). */
#define MOEGEN_GEMM_A_BOX_ROWS 128u

#endif
