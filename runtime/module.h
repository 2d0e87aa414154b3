/* runtime/module.h -- internal: what ops need from a module. */
#ifndef MOEGEN_RUNTIME_MODULE_H
#define MOEGEN_RUNTIME_MODULE_H

#include "driver.h"
#include "moegen/runtime.h"

/* Kernels a module may hold, by fixed extern "C" name. */
typedef enum moegen_kernel_id {
  MOEGEN_KERNEL_ROUTER_FWD = 0,
  MOEGEN_KERNEL_GEMM1_FWD,
  MOEGEN_KERNEL_GEMM2_FWD,
  MOEGEN_KERNEL_GEMM1_FWD_TALL,
  MOEGEN_KERNEL_GEMM2_FWD_TALL,
  MOEGEN_KERNEL_ROUTER_BWD,
  MOEGEN_KERNEL_AUX_SCORES_FWD,
  MOEGEN_KERNEL_AUX_SCORES_BWD,
  MOEGEN_KERNEL_AUX_LOSS_FWD,
  MOEGEN_KERNEL_AUX_LOSS_BWD,
  MOEGEN_KERNEL_GEMM1_DGRAD,   /* templates/grouped_gemm_bwd_sm90.cu.lt */
  MOEGEN_KERNEL_GEMM2_DGRAD,
  MOEGEN_KERNEL_GEMM1_WGRAD,
  MOEGEN_KERNEL_GEMM2_WGRAD,
  MOEGEN_KERNEL_GEMM1_FWD_GLU,
  MOEGEN_KERNEL_GEMM2_DGRAD_GLU,
  MOEGEN_KERNEL_GEMM1_DGRAD_TALL,
  MOEGEN_KERNEL_GEMM2_DGRAD_TALL,
  MOEGEN_KERNEL_GEMM1_FWD_GLU_TALL,
  MOEGEN_KERNEL_GEMM2_DGRAD_GLU_TALL,
  MOEGEN_KERNEL_PERMUTE_ROUTES, /* templates/permute.cu.lt */
  MOEGEN_KERNEL_PERMUTE_RANK,
  MOEGEN_KERNEL_PERMUTE_ROWS,
  MOEGEN_KERNEL_UNPERMUTE,
  MOEGEN_KERNEL_UNPERMUTE_BWD,
  MOEGEN_KERNEL_SORT_CHUNKS,
  MOEGEN_KERNEL_ROUTER_FWD_SMALL, /* templates/router.cu.lt, where plan.router_small has it */
  MOEGEN_KERNEL_COUNT
} moegen_kernel_id;

/* Each kernel's extern "C" name and the compile unit that holds it. */
typedef struct moegen_kernel_desc {
  const char *name; /* "moegen_router_fwd" */
  moegen_unit unit;
} moegen_kernel_desc;
extern const moegen_kernel_desc moegen_kernels[MOEGEN_KERNEL_COUNT];

/* The launch plan of GEMM kernel id in g (the one table of which plan each
 * GEMM kernel was rendered with), or NULL if id is no GEMM kernel. */
const moegen_gemm_kernel_plan *moegen_gemm_plan_of(const moegen_gemm_plan *g, moegen_kernel_id id);

/* Device facts an op needs to size its grid. */
typedef struct moegen_device_info {
  CUdevice device;
  int sm_count;
  int blocks_per_sm; /* resident blocks of this kernel per SM (occupancy), >= 1 */
} moegen_device_info;

/* Creates a module that owns `image`: moegen_module_destroy calls
 * free_image(image). Ownership passes in every case, also on error (then
 * free_image may already have run). Otherwise as moegen_module_create. */
moegen_status moegen_module_create_owned(moegen_image *image, void (*free_image)(moegen_image *),
                                         moegen_module **out);

/* Returns the launchable function of kernel `id` on the current context's
 * device, loading (and for JIT images compiling) the module on first use.
 * Sets the kernel's max dynamic shared memory to `smem_bytes` on that device
 * and measures how many blocks of `threads` stay resident per SM
 * (again only if a later call asks for more). Thread-safe; after the first
 * call per device it takes no lock and makes one driver call, cuCtxGetDevice
 * (which device is current). Errors are recorded as the module's last error. */
moegen_status moegen_module_kernel(moegen_module *m, moegen_kernel_id id, unsigned threads,
                                   unsigned smem_bytes, CUfunction *fn, moegen_device_info *dev);

/* The driver table (valid after a successful module_create). */
const moegen_driver *moegen_module_driver(const moegen_module *m);

/* Records a failure as the module's last error (printf format) and returns s. */
moegen_status moegen_module_fail(moegen_module *m, moegen_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records a failed driver call ("what: CUDA_ERROR_X (text)") and returns MOEGEN_ERR_CUDA. */
moegen_status moegen_module_cuda_fail(moegen_module *m, CUresult r, const char *what);

#endif
