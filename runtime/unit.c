/* runtime/unit.c -- compile units (see moegen_unit in moegen/runtime.h). */
#include "shared.h"

#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *moegen_unit_name(moegen_unit u) {
  static const char *const names[MOEGEN_UNIT_COUNT] = {"router", "router_train", "permute", "gemm",
                                                         "gemm_train"};
  return (unsigned)u < MOEGEN_UNIT_COUNT ? names[u] : "?";
}

char *moegen_unit_source(const char *source, size_t source_size, moegen_unit u, size_t *size) {
  char head[64];
  int n = snprintf(head, sizeof head, "#define MOEGEN_UNIT %d\n#line 1\n", (int)u);
  char *text = malloc((size_t)n + source_size + 1);
  if (!text) return NULL;
  memcpy(text, head, (size_t)n);
  memcpy(text + n, source, source_size);
  text[(size_t)n + source_size] = 0;
  *size = (size_t)n + source_size;
  return text;
}

moegen_status moegen_unit_compile(const char *source, size_t source_size, const char *image_name,
                                  const char *arch, moegen_unit u, unsigned char **cubin,
                                  size_t *cubin_size, char **log, moegen_cache_outcome *outcome) {
  *cubin = NULL;
  *cubin_size = 0;
  *log = NULL;
  *outcome = MOEGEN_CACHE_UNSTORED;
  size_t size;
  char *text = moegen_unit_source(source, source_size, u, &size);
  if (!text) return MOEGEN_ERR_OUT_OF_MEMORY;
  char name[160];
  snprintf(name, sizeof name, "%s (%s unit)", image_name, moegen_unit_name(u));
  moegen_status st = moegen_cache_compile(text, size, name, arch, cubin, cubin_size, log, outcome);
  free(text);
  return st;
}
