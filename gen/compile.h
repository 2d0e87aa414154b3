/* gen/compile.h -- internal: kernel source -> cubin, with nvcc or NVRTC. */
#ifndef MOEGEN_GEN_COMPILE_H
#define MOEGEN_GEN_COMPILE_H

#include <stddef.h>

#include "moegen/moegen.h"

/* Compiles unit u of `source` (the module's .cu text) for opt->arch with
 * opt->compile (NVCC or NVRTC; JIT is not a compile). `work_dir` holds nvcc's
 * temporary files (named by unit: units may compile on several threads at
 * once). *cubin is malloc'd. *spilled: 1 if ptxas reported register spills.
 * Errors carry the compiler's log. */
int moegen_compile(const char *source, moegen_unit u, const moegen_gen_options *opt,
                   const char *work_dir, int *spilled, unsigned char **cubin, size_t *cubin_size,
                   moegen_error *err);

#endif
