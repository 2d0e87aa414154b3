/* runtime/sha256.c -- SHA-256 as specified in FIPS 180-4. */
#include <string.h>

#include "sha256.h"

/* First 32 bits of the fractional parts of the cube roots of the first 64
 * primes (FIPS 180-4, 4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Fills the message schedule W[0..63] for one block (FIPS 180-4, 6.2.2 step 1). */
static void schedule(const unsigned char block[64], uint32_t w[64]) {
  for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
}

/* Folds one 64-byte block into the hash state (FIPS 180-4, 6.2.2). */
static void compress(uint32_t h[8], const unsigned char block[64]) {
  uint32_t w[64], v[8];
  schedule(block, w);
  memcpy(v, h, sizeof v);
  for (int t = 0; t < 64; t++) {
    uint32_t S1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
    uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
    uint32_t t1 = v[7] + S1 + ch + K[t] + w[t];
    uint32_t S0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
    uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
    memmove(v + 1, v, 7 * sizeof v[0]);
    v[4] += t1;
    v[0] = t1 + S0 + maj;
  }
  for (int i = 0; i < 8; i++) h[i] += v[i];
}

/* Starts a new digest. */
void moegen_sha256_init(moegen_sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->bytes = 0;
  s->fill = 0;
}

/* Hashes n more bytes of the message. */
void moegen_sha256_update(moegen_sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->bytes += n;
  while (n > 0) {
    size_t take = 64 - s->fill < n ? 64 - s->fill : n;
    memcpy(s->buf + s->fill, p, take);
    s->fill += take;
    p += take;
    n -= take;
    if (s->fill == 64) {
      compress(s->h, s->buf);
      s->fill = 0;
    }
  }
}

/* Pads (0x80, zeros, 64-bit big-endian bit length) and writes the digest. */
void moegen_sha256_final(moegen_sha256 *s, unsigned char out[32]) {
  uint64_t bits = s->bytes * 8;
  unsigned char pad[72] = {0x80};
  size_t pad_len = (s->fill < 56 ? 56 : 120) - s->fill;
  for (int i = 0; i < 8; i++) pad[pad_len + i] = (unsigned char)(bits >> (56 - 8 * i));
  moegen_sha256_update(s, pad, pad_len + 8);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
}

void moegen_sha256_of(const void *data, size_t n, unsigned char out[32]) {
  moegen_sha256 s;
  moegen_sha256_init(&s);
  moegen_sha256_update(&s, data, n);
  moegen_sha256_final(&s, out);
}

/* Lower-case hex digest of one buffer, NUL-terminated. */
void moegen_sha256_hex(const void *data, size_t n, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char d[32];
  moegen_sha256_of(data, n, d);
  for (int i = 0; i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[64] = 0;
}
