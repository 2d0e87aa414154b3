/* tests/unit/test_runtime_sha256.c -- runtime/sha256.c against the FIPS 180-4
 * example vectors, fed whole and in uneven pieces. */
#include <stdlib.h>
#include <string.h>

#include "runtime_check.h"
#include "sha256.h"

typedef struct vector {
  const char *message; /* NULL: one million 'a' */
  const char *digest;
} vector;

static const vector vectors[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
     "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    {NULL, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
};

/* Hex digest of data fed in pieces of `step` bytes (0: all at once). */
static void digest_in_pieces(const unsigned char *data, size_t n, size_t step, char hex[65]) {
  if (step == 0) {
    moegen_sha256_hex(data, n, hex);
    return;
  }
  moegen_sha256 s;
  unsigned char d[32];
  moegen_sha256_init(&s);
  for (size_t off = 0; off < n; off += step)
    moegen_sha256_update(&s, data + off, n - off < step ? n - off : step);
  moegen_sha256_final(&s, d);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int main(void) {
  static const size_t steps[] = {0, 1, 3, 55, 56, 63, 64, 65, 1000};
  for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
    size_t n = vectors[v].message ? strlen(vectors[v].message) : 1000000;
    unsigned char *data = malloc(n + 1);
    if (vectors[v].message) memcpy(data, vectors[v].message, n);
    else memset(data, 'a', n);
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
      char hex[65];
      digest_in_pieces(data, n, steps[s], hex);
      CHECK(strcmp(hex, vectors[v].digest) == 0, "vector %zu (%zu bytes) in pieces of %zu: %s",
            v, n, steps[s], hex);
    }
    free(data);
  }
  return check_result("test_runtime_sha256");
}
