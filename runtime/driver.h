/* runtime/driver.h -- internal: the CUDA driver API, loaded at run time.
 *
 * libcuda.so.1 is dlopened once per process (thread-safe); every entry point
 * is resolved through cuGetProcAddress with an explicit CUDA version, so the
 * ABI of each call is the one declared here whatever the driver's version.
 * Only the types moegen needs are declared (no cuda.h).
 */
#ifndef MOEGEN_RUNTIME_DRIVER_H
#define MOEGEN_RUNTIME_DRIVER_H

#include <stddef.h>

#include "moegen/runtime.h"

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

/* A TMA descriptor (cuda.h's CUtensorMap): 128 opaque bytes, 64-byte aligned. */
typedef struct CUtensorMap {
  _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;

/* cuTensorMapEncodeTiled's enums (cuda.h values). */
enum {
  MOEGEN_CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, /* e4m3 bytes */
  MOEGEN_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
  MOEGEN_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  MOEGEN_CU_TENSOR_MAP_SWIZZLE_128B = 3,
  MOEGEN_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
  MOEGEN_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 /* out-of-bounds elements read as zero */
};

enum {
  MOEGEN_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  MOEGEN_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  MOEGEN_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  MOEGEN_CU_STREAM_NON_BLOCKING = 1,
  MOEGEN_CUDA_ERROR_NO_DEVICE = 100,
  MOEGEN_CUDA_ERROR_INVALID_CONTEXT = 201
};

/* Entry points, named as in cuda.h (the versioned symbol each resolves to is
 * chosen in driver.c). */
typedef struct moegen_driver {
  int version; /* cuDriverGetVersion, e.g. 13000 */
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int *v);
  CUresult (*cuGetErrorName)(CUresult e, const char **s);
  CUresult (*cuGetErrorString)(CUresult e, const char **s);
  CUresult (*cuDeviceGet)(CUdevice *d, int ordinal);
  CUresult (*cuDeviceGetCount)(int *n);
  CUresult (*cuDeviceGetAttribute)(int *v, int attrib, CUdevice d);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice d);
  CUresult (*cuCtxSetCurrent)(CUcontext c);
  CUresult (*cuCtxGetCurrent)(CUcontext *c);
  CUresult (*cuCtxGetDevice)(CUdevice *d);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuLibraryLoadData)(CUlibrary *lib, const void *code, void *jitOptions,
                                void **jitOptionsValues, unsigned numJitOptions,
                                void *libraryOptions, void **libraryOptionValues,
                                unsigned numLibraryOptions);
  CUresult (*cuLibraryUnload)(CUlibrary lib);
  CUresult (*cuLibraryGetKernel)(CUkernel *k, CUlibrary lib, const char *name);
  CUresult (*cuKernelSetAttribute)(int attrib, int val, CUkernel k, CUdevice d);
  CUresult (*cuKernelGetFunction)(CUfunction *f, CUkernel k);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, CUfunction f, int threads,
                                                          size_t smem);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned smem,
                             CUstream s, void **params, void **extra);
  CUresult (*cuMemAlloc)(CUdeviceptr *p, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr p);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
  CUresult (*cuMemsetD8)(CUdeviceptr p, unsigned char v, size_t n);
  CUresult (*cuMemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
  CUresult (*cuMemsetD32Async)(CUdeviceptr p, unsigned v, size_t n, CUstream s);
  CUresult (*cuStreamCreate)(CUstream *s, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream s);
  CUresult (*cuStreamSynchronize)(CUstream s);
  CUresult (*cuStreamBeginCapture)(CUstream s, int mode);
  CUresult (*cuStreamEndCapture)(CUstream s, CUgraph *g);
  CUresult (*cuGraphInstantiate)(CUgraphExec *e, CUgraph g, unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec e, CUstream s);
  CUresult (*cuGraphExecDestroy)(CUgraphExec e);
  CUresult (*cuGraphDestroy)(CUgraph g);
  CUresult (*cuEventCreate)(CUevent *e, unsigned flags);
  CUresult (*cuEventRecord)(CUevent e, CUstream s);
  CUresult (*cuEventSynchronize)(CUevent e);
  CUresult (*cuEventElapsedTime)(float *ms, CUevent a, CUevent b);
  CUresult (*cuEventDestroy)(CUevent e);
  /* Host-only: fills *map, no GPU work. Enum arguments are the MOEGEN_CU_TENSOR_MAP_* values. */
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *map, int data_type, unsigned rank, void *address,
                                     const unsigned long long *dims,
                                     const unsigned long long *strides, const unsigned *box,
                                     const unsigned *element_strides, int interleave, int swizzle,
                                     int l2_promotion, int oob_fill);
} moegen_driver;

/* Loads libcuda.so.1 and resolves every entry point (once; thread-safe) and
 * calls cuInit(0). On failure returns MOEGEN_ERR_NO_DRIVER (library missing,
 * entry point missing, driver too old) or MOEGEN_ERR_NO_DEVICE (cuInit says
 * no device) and writes the reason into why. The same result is returned to
 * every later caller. `MOEGEN_LIBCUDA` overrides the library path (tests). */
moegen_status moegen_driver_get(const moegen_driver **out, char *why, size_t why_size);

/* "CUDA_ERROR_X (message)" for a driver result code, into buf. */
void moegen_driver_describe(CUresult r, char *buf, size_t size);

#endif
