/* runtime/tma.h -- internal: TMA descriptors of bf16 tensors for the GEMM ops. */
#ifndef MOEGEN_RUNTIME_TMA_H
#define MOEGEN_RUNTIME_TMA_H

#include "module.h"

/* [rows, cols] row-major bf16 matrix at base, box [box_rows, box_cols], with
 * the 128-byte swizzle (box_cols * 2 = 128) and zero fill out of bounds.
 * Host-only (no GPU work); a driver failure is recorded as "what: ...". */
moegen_status moegen_tma_2d(moegen_module *m, CUtensorMap *map, const void *base, long long rows,
                            long long cols, unsigned box_rows, unsigned box_cols, const char *what);

/* [E, rows, cols] bf16 (per-expert weights), box [1, box_rows, box_cols]; as moegen_tma_2d. */
moegen_status moegen_tma_3d(moegen_module *m, CUtensorMap *map, const void *base, long long E,
                            long long rows, long long cols, unsigned box_rows, unsigned box_cols,
                            const char *what);

#endif
