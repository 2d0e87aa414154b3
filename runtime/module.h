/* runtime/module.h -- internal: what ops need from a module. */
#ifndef MOEGEN_RUNTIME_MODULE_H
#define MOEGEN_RUNTIME_MODULE_H

#include "driver.h"
#include "moegen/runtime.h"
#include "shared.h"

/* Kernels a module may hold (moegen/abi.def's MOEGEN_KERNELS, in its order). */
#define MOEGEN_KERNEL_ID_(ID, name, UNIT, plan, threads, smem, sig) MOEGEN_KERNEL_##ID,
typedef enum moegen_kernel_id { MOEGEN_KERNELS(MOEGEN_KERNEL_ID_) MOEGEN_KERNEL_COUNT } moegen_kernel_id;
#undef MOEGEN_KERNEL_ID_

/* Kernel parameter lists (abi.def's MOEGEN_SIGNATURES). */
#define MOEGEN_SIGNATURE_ID_(sig, params) MOEGEN_SIG_##sig,
typedef enum moegen_signature_id {
  MOEGEN_SIGNATURES(MOEGEN_SIGNATURE_ID_, , , , ) MOEGEN_SIG_COUNT
} moegen_signature_id;
#undef MOEGEN_SIGNATURE_ID_

/* Each kernel's extern "C" name, compile unit and parameter list. */
typedef struct moegen_kernel_desc {
  const char *name; /* "moegen_router_fwd" */
  moegen_unit unit;
  moegen_signature_id signature;
} moegen_kernel_desc;
extern const moegen_kernel_desc moegen_kernels[MOEGEN_KERNEL_COUNT];

/* Block size and dynamic shared memory kernel id launches with (from the
 * plan abi.def names); *threads = 0: the image lacks the kernel -- the one
 * kernel-absent rule: a block size of 0, or a unit without kernels. */
void moegen_kernel_shape(const moegen_image *img, moegen_kernel_id id, unsigned *threads,
                         unsigned *smem);

/* 1 if the image holds kernel id. Pure. */
int moegen_has_kernel(const moegen_image *img, moegen_kernel_id id);

/* The plan GEMM kernel id was rendered with (abi.def's plan column), or
 * NULL if id is no GEMM kernel. */
const moegen_gemm_kernel_plan *moegen_gemm_plan_of(const moegen_image *img, moegen_kernel_id id);

/* Device facts an op needs to size its grid. */
typedef struct moegen_device_info {
  CUdevice device;
  int sm_count;
  int blocks_per_sm; /* resident blocks of this kernel per SM (occupancy), >= 1 */
} moegen_device_info;


/* Returns the launchable function of kernel `id` on the current context's
 * device, loading (and for JIT images compiling) the module on first use.
 * Sets the kernel's max dynamic shared memory to `smem_bytes` on that device
 * and measures how many blocks of `threads` stay resident per SM
 * (again only if a later call asks for more). Thread-safe; after the first
 * call per device it takes no lock and makes one driver call, cuCtxGetDevice
 * (which device is current). Errors are recorded as the module's last error. */
moegen_status moegen_module_kernel(moegen_module *m, moegen_kernel_id id, unsigned threads,
                                   unsigned smem_bytes, CUfunction *fn, moegen_device_info *dev);

/* Grid and block of one launch. */
typedef struct moegen_launch_dims {
  unsigned grid, threads, smem_bytes;
} moegen_launch_dims;

/* Launches kernel fn (kernel id, from moegen_module_kernel) with params of
 * signature sig (runtime/kernel_args.h's moegen_launch_SIG fills them):
 * INVALID_ARGUMENT if id does not take sig, a failed cuLaunchKernel
 * recorded as "what: cuLaunchKernel(NAME): ...". */
moegen_status moegen_module_launch(moegen_module *m, moegen_kernel_id id, moegen_signature_id sig,
                                   CUfunction fn, const moegen_launch_dims *d, void **params,
                                   CUstream stream, const char *what);

/* Sets n 32-bit words at p to value on `stream` (cuMemsetD32Async); usable
 * by an op that launches no kernel (T = 0): the module's create failure if
 * it has no driver, a failed call recorded as "what: ...". */
moegen_status moegen_module_memset32(moegen_module *m, void *p, unsigned value, size_t n,
                                     CUstream stream, const char *what);

/* The driver table (valid after a successful module_create). */
const moegen_driver *moegen_module_driver(const moegen_module *m);

/* Records a failure as the module's last error (printf format) and returns s. */
moegen_status moegen_module_fail(moegen_module *m, moegen_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records a failed driver call ("what: CUDA_ERROR_X (text)") and returns MOEGEN_ERR_CUDA. */
moegen_status moegen_module_cuda_fail(moegen_module *m, CUresult r, const char *what);

#endif
