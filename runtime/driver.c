/* runtime/driver.c -- libcuda.so.1 loaded at run time through cuGetProcAddress.
 *
 * Each entry point is requested with the CUDA version whose prototype is the
 * one declared in driver.h, so the ABI cannot drift with the driver's
 * version (cuda.h #defines and cudaTypedefs.h PFN_ suffixes, CUDA 13.0):
 *   3020  _v2 memory calls (64-bit CUdeviceptr): cuMemAlloc, cuMemFree,
 *         cuMemcpyHtoD/DtoH, cuMemcpyHtoDAsync, cuMemsetD8, cuMemsetD8Async, cuMemsetD32Async
 *   2000  cuCtxGetDevice, cuCtxSynchronize: CUDA 13 added _v2 forms taking a
 *         CUcontext; the one-argument originals are what driver.h declares
 *   4000  cuStreamDestroy_v2, cuEventDestroy_v2 (same prototypes)
 *   11000 cuDevicePrimaryCtxRelease_v2 (same prototype)
 *   10010 cuStreamBeginCapture_v2 (with the capture mode argument)
 *   11040 cuGraphInstantiate is resolved as "cuGraphInstantiateWithFlags":
 *         (CUgraphExec *, CUgraph, unsigned long long flags). cuda.h 12+ only
 *         #defines the name; the driver's "cuGraphInstantiate" entry still
 *         returns the CUDA 11 five-argument cuGraphInstantiate_v2 for every
 *         version up to 13000 (seen on driver 580.159, CUDA 13.0), which
 *         crashes when called with three
 *   12080 cuEventElapsedTime_v2: same prototype as the 2000 original and the
 *         one CUDA 13 programs get; older drivers hand back the original
 *   12000 cuTensorMapEncodeTiled (introduced in 12.0, prototype unchanged since)
 * Streams use legacy default-stream semantics (CU_GET_PROC_ADDRESS_LEGACY_STREAM),
 * the same as the CUDA runtime's default.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        unsigned long long flags, int *query_status);

enum {
  LEGACY_STREAM = 1,         /* CU_GET_PROC_ADDRESS_LEGACY_STREAM */
  QUERY_SYMBOL_NOT_FOUND = 1, /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
  MIN_DRIVER_VERSION = 12000 /* cuLibrary* and cuKernel* */
};

typedef struct entry {
  const char *symbol; /* base name, as cuGetProcAddress wants it */
  int version;        /* CUDA version whose prototype driver.h declares */
  size_t offset;      /* slot in moegen_driver */
} entry;

#define ENTRY(name, version) {#name, version, offsetof(moegen_driver, name)}
#define ENTRY_AS(name, symbol, version) {symbol, version, offsetof(moegen_driver, name)}

/* cuDriverGetVersion first, so a later failure can name the driver's version. */
static const entry entries[] = {
    ENTRY(cuDriverGetVersion, 2020),   ENTRY(cuInit, 2000),
    ENTRY(cuGetErrorName, 6000),       ENTRY(cuGetErrorString, 6000),
    ENTRY(cuDeviceGet, 2000),          ENTRY(cuDeviceGetCount, 2000),
    ENTRY(cuDeviceGetAttribute, 2000), ENTRY(cuDevicePrimaryCtxRetain, 7000),
    ENTRY(cuDevicePrimaryCtxRelease, 11000), ENTRY(cuCtxSetCurrent, 4000),
    ENTRY(cuCtxGetCurrent, 4000),      ENTRY(cuCtxGetDevice, 2000),
    ENTRY(cuCtxSynchronize, 2000),     ENTRY(cuLibraryLoadData, 12000),
    ENTRY(cuLibraryUnload, 12000),     ENTRY(cuLibraryGetKernel, 12000),
    ENTRY(cuKernelSetAttribute, 12000), ENTRY(cuKernelGetFunction, 12000),
    ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050), ENTRY(cuLaunchKernel, 4000),
    ENTRY(cuMemAlloc, 3020),           ENTRY(cuMemFree, 3020),
    ENTRY(cuMemcpyHtoD, 3020),         ENTRY(cuMemcpyDtoH, 3020),
    ENTRY(cuMemcpyHtoDAsync, 3020),
    ENTRY(cuMemsetD8, 3020),           ENTRY(cuMemsetD8Async, 3020),
    ENTRY(cuMemsetD32Async, 3020),     ENTRY(cuStreamCreate, 2000),
    ENTRY(cuStreamDestroy, 4000),      ENTRY(cuStreamSynchronize, 2000),
    ENTRY(cuStreamBeginCapture, 10010), ENTRY(cuStreamEndCapture, 10000),
    ENTRY_AS(cuGraphInstantiate, "cuGraphInstantiateWithFlags", 11040), ENTRY(cuGraphLaunch, 10000),
    ENTRY(cuGraphExecDestroy, 10000),  ENTRY(cuGraphDestroy, 10000),
    ENTRY(cuEventCreate, 2000),        ENTRY(cuEventRecord, 2000),
    ENTRY(cuEventSynchronize, 2000),   ENTRY(cuEventElapsedTime, 12080),
    ENTRY(cuEventDestroy, 4000),       ENTRY(cuTensorMapEncodeTiled, 12000),
};

/* The process-wide result, written once under g_once. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static moegen_driver g_driver;
static moegen_status g_status;
static char g_why[512];
static int g_resolved; /* every entry point is set (cuGetErrorName usable) */

/* Resolves every entry of `entries` into g_driver; 0 on success, else writes g_why. */
static int resolve_all(get_proc_address_fn get, const char *path) {
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    const entry *e = &entries[i];
    void *fn = NULL;
    int query = 0;
    CUresult r = get(e->symbol, &fn, e->version, LEGACY_STREAM, &query);
    if (r == 0 && fn) {
      memcpy((char *)&g_driver + e->offset, &fn, sizeof fn);
      if (i == 0) g_driver.cuDriverGetVersion(&g_driver.version);
      continue;
    }
    snprintf(g_why, sizeof g_why,
             "%s: driver entry point %s (CUDA %d.%d ABI) %s (CUresult %d; driver reports CUDA "
             "%d.%d): the driver is too old, moegen needs CUDA 12.0 or newer",
             path, e->symbol, e->version / 1000, e->version % 1000 / 10,
             query == QUERY_SYMBOL_NOT_FOUND ? "not found" : "unavailable", r,
             g_driver.version / 1000, g_driver.version % 1000 / 10);
    return -1;
  }
  return 0;
}

/* "CUDA_ERROR_X (text)" through the loaded table; usable inside load_driver. */
static void describe(CUresult r, char *buf, size_t size) {
  const char *name = NULL, *text = NULL;
  if (g_resolved && g_driver.cuGetErrorName(r, &name) == 0 && name) {
    if (g_driver.cuGetErrorString(r, &text) != 0 || !text) text = "no description";
    snprintf(buf, size, "%s (%s)", name, text);
  } else {
    snprintf(buf, size, "CUDA error %d (%s)", r,
             g_resolved ? "unknown to this driver" : "driver not loaded");
  }
}

/* Checks the driver version, then cuInit(0). */
static moegen_status init_driver(const char *path) {
  if (g_driver.version < MIN_DRIVER_VERSION) {
    snprintf(g_why, sizeof g_why, "%s reports CUDA %d.%d; moegen needs a CUDA 12.0+ driver", path,
             g_driver.version / 1000, g_driver.version % 1000 / 10);
    return MOEGEN_ERR_NO_DRIVER;
  }
  CUresult r = g_driver.cuInit(0);
  if (r == 0) return MOEGEN_OK;
  char what[256];
  describe(r, what, sizeof what);
  snprintf(g_why, sizeof g_why, "cuInit(0) via %s failed: %s", path, what);
  return r == MOEGEN_CUDA_ERROR_NO_DEVICE ? MOEGEN_ERR_NO_DEVICE : MOEGEN_ERR_NO_DRIVER;
}

/* Opens the library, resolves the table and initializes it (runs once). */
static void load_driver(void) {
  const char *env = getenv("MOEGEN_LIBCUDA");
  const char *path = env && *env ? env : "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    snprintf(g_why, sizeof g_why,
             "cannot load the CUDA driver %s (%s): install the NVIDIA driver or set "
             "MOEGEN_LIBCUDA", path, err ? err : "?");
    g_status = MOEGEN_ERR_NO_DRIVER;
    return;
  }
  get_proc_address_fn get;
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  memcpy(&get, &sym, sizeof get);
  if (!sym) {
    snprintf(g_why, sizeof g_why,
             "%s has no cuGetProcAddress_v2: the driver is older than CUDA 12.0", path);
  } else if (resolve_all(get, path) == 0) {
    g_resolved = 1;
    g_status = init_driver(path);
    return; /* keep the library: the table (and cuGetErrorName) point into it */
  }
  g_status = MOEGEN_ERR_NO_DRIVER;
  dlclose(lib);
}

moegen_status moegen_driver_get(const moegen_driver **out, char *why, size_t why_size) {
  pthread_once(&g_once, load_driver);
  *out = g_status == MOEGEN_OK ? &g_driver : NULL;
  if (why && why_size) snprintf(why, why_size, "%s", g_status == MOEGEN_OK ? "" : g_why);
  return g_status;
}

void moegen_driver_describe(CUresult r, char *buf, size_t size) {
  pthread_once(&g_once, load_driver);
  describe(r, buf, size);
}
