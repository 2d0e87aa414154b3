/* runtime/cache.h -- internal: on-disk cache of JIT-compiled cubins.
 *
 * Directory: $MOEGEN_CACHE_DIR, else $XDG_CACHE_HOME/moegen, else
 * ~/.cache/moegen. Key: SHA-256 of (source, NVRTC options, NVRTC version,
 * arch, moegen version). Entries are published by write-to-temp + rename and
 * carry a checksum that is verified on load; a corrupt entry is rebuilt.
 * MOEGEN_CACHE=0 disables the cache.
 */
#ifndef MOEGEN_RUNTIME_CACHE_H
#define MOEGEN_RUNTIME_CACHE_H

#include <stddef.h>

#include "moegen/runtime.h"
#include "shared.h"

/* Returns a cubin for the source: from the cache, or compiled by NVRTC (then
 * stored). Before a cold compile, sends one progress line to the log
 * callback ("moegen: compiling NAME for ARCH with NVRTC (first use; cache:
 * DIR)", or "(cache disabled)" / "(cache unavailable: DIR)"). *cubin is malloc'd. *log is malloc'd (may be NULL): the NVRTC log
 * on a compile error, or the cache problem that was worked around. A cache
 * that cannot be written is not an error. *hit tells whether it was a hit. */
moegen_status moegen_cache_compile(const char *source, size_t source_size, const char *name,
                                   const char *arch, unsigned char **cubin, size_t *cubin_size,
                                   char **log, int *hit);


/* Internal log sink used by the runtime (see moegen_set_log). */
void moegen_log_line(const char *line);

#endif
