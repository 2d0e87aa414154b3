/* runtime/nccl.c -- see nccl.h. */
#include "nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static moegen_nccl g_nccl;
static moegen_status g_status;
static char g_why[512];

#define NCCL_ENTRY(name) {#name, offsetof(moegen_nccl, name)}
static const struct {
  const char *symbol;
  size_t offset;
} entries[] = {
    NCCL_ENTRY(ncclGetVersion), NCCL_ENTRY(ncclGetErrorString), NCCL_ENTRY(ncclGroupStart),
    NCCL_ENTRY(ncclGroupEnd),   NCCL_ENTRY(ncclSend),           NCCL_ENTRY(ncclRecv),
    NCCL_ENTRY(ncclCommCount),  NCCL_ENTRY(ncclCommUserRank),
};

static void load_nccl(void) {
  const char *env = getenv("MOEGEN_LIBNCCL");
  const char *path = env && *env ? env : "libnccl.so.2";
  g_status = MOEGEN_ERR_NOT_SUPPORTED;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    snprintf(g_why, sizeof g_why,
             "expert parallelism needs NCCL: cannot load %s (%s); put libnccl.so.2 on the "
             "library path or set MOEGEN_LIBNCCL", path, err ? err : "?");
    return;
  }
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void *fn = dlsym(lib, entries[i].symbol);
    if (!fn) {
      snprintf(g_why, sizeof g_why, "%s has no %s: moegen needs NCCL 2.7 or newer", path,
               entries[i].symbol);
      dlclose(lib);
      return;
    }
    memcpy((char *)&g_nccl + entries[i].offset, &fn, sizeof fn);
  }
  if (g_nccl.ncclGetVersion(&g_nccl.version) != 0) g_nccl.version = 0;
  g_status = MOEGEN_OK; /* keep the library: the table points into it */
}

moegen_status moegen_nccl_get(const moegen_nccl **out, char *why, size_t why_size) {
  pthread_once(&g_once, load_nccl);
  *out = g_status == MOEGEN_OK ? &g_nccl : NULL;
  if (why && why_size) snprintf(why, why_size, "%s", g_status == MOEGEN_OK ? "" : g_why);
  return g_status;
}
