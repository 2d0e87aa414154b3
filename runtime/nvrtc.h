/* runtime/nvrtc.h -- internal: NVRTC, loaded at run time (libnvrtc.so.13). */
#ifndef MOEGEN_RUNTIME_NVRTC_H
#define MOEGEN_RUNTIME_NVRTC_H

#include <stddef.h>

#include "moegen/runtime.h"

/* Compiles CUDA source to a cubin for `arch` ("sm_90a": passes -arch=sm_90a
 * plus moegen's fixed options). Needs no GPU. On success *cubin is malloc'd.
 * *log (malloc'd, may be NULL) receives the compile log in every case,
 * including ptxas -v output when `verbose` is set. Returns MOEGEN_ERR_NO_NVRTC
 * if libnvrtc.so.13 cannot be loaded (reason in *log), MOEGEN_ERR_COMPILE on
 * a compile error. Thread-safe. `MOEGEN_LIBNVRTC` overrides the library path. */
moegen_status moegen_nvrtc_compile(const char *source, size_t source_size, const char *file_name,
                                   const char *arch, int verbose, unsigned char **cubin,
                                   size_t *cubin_size, char **log);

/* NVRTC version (e.g. 13, 0), or MOEGEN_ERR_NO_NVRTC. */
moegen_status moegen_nvrtc_version(int *major, int *minor);

/* The options moegen passes for `arch` (NULL-terminated, static strings). */
const char *const *moegen_nvrtc_options_for(const char *arch);

#endif
