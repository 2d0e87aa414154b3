/* gen/read_file.c -- whole files into memory (config and HF inputs, nvcc output). */
#include "read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads a whole file into a new NUL-terminated buffer, or NULL (errno set). */
char *moegen_read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0, got = 1;
  errno = 0;
  while (got > 0) {
    if (n + 1 >= cap) {
      char *more = realloc(buf, cap = cap * 2 + 4096);
      if (!more) {
        errno = ENOMEM;
        break;
      }
      buf = more;
    }
    n += got = fread(buf + n, 1, cap - n - 1, f);
  }
  int failed = got > 0 || ferror(f);
  if (ferror(f) && errno == 0) errno = EIO;
  fclose(f);
  if (failed) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *size = n;
  return buf;
}
