/* gen/compile.h -- internal: kernel source -> cubin, with nvcc or NVRTC. */
#ifndef MOEGEN_GEN_COMPILE_H
#define MOEGEN_GEN_COMPILE_H

#include <stddef.h>

#include "moegen/moegen.h"

/* Compiles unit u of `source` (the module's .cu text) for opt->arch with
 * opt->compile (NVCC or NVRTC; JIT is not a compile). `work_dir` holds nvcc's
 * temporary files. *cubin is malloc'd. Register spills reported by ptxas are
 * sent to `progress` as a warning line. Errors carry the compiler's log. */
int moegen_compile(const char *source, moegen_unit u, const moegen_gen_options *opt,
                   const char *work_dir, void (*progress)(const char *line), unsigned char **cubin,
                   size_t *cubin_size, moegen_error *err);

#endif
