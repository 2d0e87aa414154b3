/* runtime/tma.h -- internal: the bf16 (and e4m3) operands of the grouped GEMM kernels
 * as kernel parameters. The sm_90a kernels take TMA descriptors (encoded
 * here on the host for every call, no GPU work, passed by value); the
 * portable mma.sync kernels take the base pointer. */
#ifndef MOEGEN_RUNTIME_TMA_H
#define MOEGEN_RUNTIME_TMA_H

#include "module.h"

/* One operand: map for the sm_90a kernels, ptr for the portable ones. */
typedef struct moegen_gemm_operand {
  CUtensorMap map;
  const void *ptr;
} moegen_gemm_operand;

/* [rows, cols] row-major bf16 matrix at base; on sm_90a a map with box
 * [box_rows, box_cols], the 128-byte swizzle (box_cols * 2 = 128) and zero
 * fill out of bounds. Host-only (no GPU work); a driver failure is recorded
 * as "what: ...". */
moegen_status moegen_gemm_operand_2d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                     long long rows, long long cols, unsigned box_rows,
                                     unsigned box_cols, const char *what);

/* [E, rows, cols] bf16 (per-expert weights); on sm_90a box [1, box_rows,
 * box_cols]; as moegen_gemm_operand_2d. */
moegen_status moegen_gemm_operand_3d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                     long long E, long long rows, long long cols,
                                     unsigned box_rows, unsigned box_cols, const char *what);

/* The same for e4m3 (byte) elements: box_cols * 1 = 128 bytes (the fp8_block
 * kernels, templates/grouped_gemm_fp8_sm90.cu.lt). */
moegen_status moegen_gemm_operand_e4m3_2d(moegen_module *m, moegen_gemm_operand *op,
                                          const void *base, long long rows, long long cols,
                                          unsigned box_rows, unsigned box_cols, const char *what);
moegen_status moegen_gemm_operand_e4m3_3d(moegen_module *m, moegen_gemm_operand *op,
                                          const void *base, long long E, long long rows,
                                          long long cols, unsigned box_rows, unsigned box_cols,
                                          const char *what);

#endif
