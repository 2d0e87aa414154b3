/* runtime/cache.h -- internal: on-disk cache of JIT-compiled cubins.
 *
 * Directory: $MOEGEN_CACHE_DIR, else $XDG_CACHE_HOME/moegen, else
 * ~/.cache/moegen. Key: SHA-256 of (head, SHA-256 of the source, NVRTC
 * options, NVRTC version, arch, moegen version). Entries DIR/<key>.cubin are published by
 * write-to-temp + rename and carry a checksum that is verified on load; a
 * corrupt entry is rebuilt. A cold compile holds an flock on DIR/<key>.lock
 * (removed when it is done), so concurrent cold compiles of one key, in
 * processes or threads, compile once: the others wait for the entry, at most
 * $MOEGEN_CACHE_WAIT seconds (default 600), then compile without the lock.
 * MOEGEN_CACHE=0 disables the cache.
 */
#ifndef MOEGEN_RUNTIME_CACHE_H
#define MOEGEN_RUNTIME_CACHE_H

#include <stdatomic.h>
#include <stddef.h>

#include "moegen/runtime.h"
#include "shared.h"

/* What one compile reads: head (may be NULL), then body; body_sha256 is the
 * body's SHA-256 when the caller has it (NULL: hashed here). */
typedef struct moegen_cache_source {
  const char *head;
  const char *body;
  size_t body_size;
  const unsigned char *body_sha256;
} moegen_cache_source;

/* One progress line shared by several compiles (a unit's kernels): the
 * first of them to compile cold logs "moegen: compiling NAME for ARCH with
 * NVRTC (...)" with the banner's name, the others nothing. Zero it
 * (ATOMIC_FLAG_INIT) before use. */
typedef struct moegen_cache_banner {
  atomic_flag told;
  const char *name;
} moegen_cache_banner;

/* Returns a cubin for head + body: from the cache, or compiled by NVRTC
 * (then stored). Sends lines to the log callback (moegen_log_line): before
 * a cold compile, "moegen: compiling NAME for ARCH with NVRTC (first use;
 * cache: DIR)" (or "(cache disabled)" / "(cache unavailable: DIR)"), once
 * per banner when one is given (NAME its name), else for `name`; before
 * that, "moegen: discarding corrupt cache entry PATH (...)" when the entry
 * was corrupt; "moegen: waiting for another compile of NAME for ARCH (lock:
 * PATH)" once when another compile of the key holds its lock. NVRTC sees the
 * file name "NAME.cu". *cubin is malloc'd. *log is malloc'd (may be NULL):
 * the NVRTC log on a compile error, or the cache problems that were worked
 * around. A cache that cannot be written is not an error. *outcome says
 * where the cubin came from (on MOEGEN_OK). Thread-safe. */
moegen_status moegen_cache_compile(const moegen_cache_source *src, const char *name,
                                   const char *arch, moegen_cache_banner *banner,
                                   unsigned char **cubin, size_t *cubin_size, char **log,
                                   moegen_cache_outcome *outcome);

/* Internal log sink used by the runtime (see moegen_set_log). */
void moegen_log_line(const char *line);

#endif
