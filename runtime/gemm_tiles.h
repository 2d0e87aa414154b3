/* runtime/gemm_tiles.h -- internal: which tile height a grouped GEMM call uses. */
#ifndef MOEGEN_RUNTIME_GEMM_TILES_H
#define MOEGEN_RUNTIME_GEMM_TILES_H

#include "moegen/runtime.h"

/* 1 if a row-tiled GEMM call (forward, SwiGLU forward, dgrad, dgrad + SwiGLU)
 * with this host bound on its rows takes the tall (256-row) kernels: rows
 * that could average tall_rows_per_expert or more per expert. Host-only,
 * from max_rows alone (the counts stay on the device). */
static inline int moegen_gemm_tall(const moegen_image *img, int64_t max_rows) {
  return img->gemm.tall_rows_per_expert > 0 &&
         max_rows >= (int64_t)img->gemm.tall_rows_per_expert * img->gemm.experts;
}

/* Rows of one TMA box of a row tile's A operand (x, dy): the tall kernels
 * load two a k step, one where the tile's second half lies past its
 * expert's end (templates/grouped_gemm_sm90.cu.lt load_a, ggemm::BM). */
#define MOEGEN_GEMM_A_BOX_ROWS 128u

#endif
