/* runtime/ops.h -- internal: the argument checks every op shares. Each
 * records its failure as the module's last error ("op: ...") and returns
 * the status. */
#ifndef MOEGEN_RUNTIME_OPS_H
#define MOEGEN_RUNTIME_OPS_H

#include <stdint.h>

#include "module.h"

/* 1 if p is not 16-byte aligned (the kernels' vector loads need it). */
static inline int moegen_misaligned(const void *p) { return ((uintptr_t)p & 15u) != 0; }

/* NOT_SUPPORTED unless the module holds kernel id, saying why a module
 * lacks the kernels of its unit. */
moegen_status moegen_require_kernel(moegen_module *m, moegen_kernel_id id, const char *op);

/* INVALID_ARGUMENT unless 0 <= T and T * per_token <= INT32_MAX (the
 * kernels index [T, per_token] tensors with 32-bit ints); per_token > 0. */
moegen_status moegen_check_tokens(moegen_module *m, const char *op, int64_t T, int64_t per_token,
                                  const char *per_token_name);

/* The FP8 1x128 scales [K/128, ld] of `rows` rows (SPEC.md 5b, M
 * contiguous): the ld a shape function reports (rows rounded up to 4, so
 * every scale row is 16-byte aligned for TMA and vector loads), and
 * whether a caller's ld is usable (>= rows, a multiple of 4, an int). */
static inline int64_t moegen_scale_ld_of(int64_t rows) { return (rows + 3) / 4 * 4; }
static inline int moegen_scale_ld_ok(int64_t ld, int64_t rows) {
  return ld >= rows && ld % 4 == 0 && ld <= INT32_MAX;
}

#endif
