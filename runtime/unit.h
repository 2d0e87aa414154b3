/* runtime/unit.h -- internal: the source text of one compile unit, and its JIT compile. */
#ifndef MOEGEN_RUNTIME_UNIT_H
#define MOEGEN_RUNTIME_UNIT_H

#include <stddef.h>

#include "moegen/runtime.h"

/* The text that compiles unit u of a module: "#define MOEGEN_UNIT u" and a
 * #line reset, then the module source (so compiler messages keep the line
 * numbers of NAME.cu). malloc'd, NUL-terminated; *size excludes the NUL.
 * NULL if out of memory. */
char *moegen_unit_source(const char *source, size_t source_size, moegen_unit u, size_t *size);

/* Compiles unit u of a JIT image's source for arch through the disk cache
 * (runtime/cache.h moegen_cache_compile: *cubin, *cubin_size, *log, *hit as
 * there; image_name names the unit in the progress line). OUT_OF_MEMORY if
 * the unit text cannot be built. */
moegen_status moegen_unit_compile(const char *source, size_t source_size, const char *image_name,
                                  const char *arch, moegen_unit u, unsigned char **cubin,
                                  size_t *cubin_size, char **log, int *hit);

#endif
