/* runtime/gemm_tiles.h -- internal: which tile height a grouped GEMM call uses. */
#ifndef MOEGEN_RUNTIME_GEMM_TILES_H
#define MOEGEN_RUNTIME_GEMM_TILES_H

#include <stddef.h>

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

/* Right before a row-tiled call's launch: on sm_90a checks the caller's
 * workspace (`what` names the op in the message) and zeroes its tile
 * ticket on `stream` (a memset node); *ticket gets the ticket's address
 * (NULL on the portable path, whose kernels take no ticket). */
moegen_status moegen_gemm_ticket(moegen_module *m, const char *what, void *workspace,
                                 size_t workspace_bytes, CUstream stream, void **ticket);

/* Rows of one TMA box of a row tile's A operand (x, dy): the tall kernels
 * load two a k step, one where the tile's second half lies past its
 * expert's end (templates/grouped_gemm_sm90.cu.lt load_a, ggemm::BM). */
#define MOEGEN_GEMM_A_BOX_ROWS 128u

#endif
