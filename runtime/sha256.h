/* runtime/sha256.h -- internal: SHA-256 (FIPS 180-4), for cache keys,
 * cache checksums and manifest hashes. */
#ifndef MOEGEN_RUNTIME_SHA256_H
#define MOEGEN_RUNTIME_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "shared.h" /* moegen_sha256_hex */

typedef struct moegen_sha256 {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char buf[64];
  size_t fill;
} moegen_sha256;

void moegen_sha256_init(moegen_sha256 *s);
void moegen_sha256_update(moegen_sha256 *s, const void *data, size_t n);
void moegen_sha256_final(moegen_sha256 *s, unsigned char out[32]);

/* The digest of one buffer. */
void moegen_sha256_of(const void *data, size_t n, unsigned char out[32]);

#endif
