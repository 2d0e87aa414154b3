/* runtime/unit.h -- internal: the source text of one compile unit. */
#ifndef MOEGEN_RUNTIME_UNIT_H
#define MOEGEN_RUNTIME_UNIT_H

#include <stddef.h>

#include "moegen/runtime.h"

/* The text that compiles unit u of a module: "#define MOEGEN_UNIT u" and a
 * #line reset, then the module source (so compiler messages keep the line
 * numbers of NAME.cu). malloc'd, NUL-terminated; *size excludes the NUL.
 * NULL if out of memory. */
char *moegen_unit_source(const char *source, size_t source_size, moegen_unit u, size_t *size);

#endif
