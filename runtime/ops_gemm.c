/* runtime/ops_gemm.c -- the grouped GEMM forward op: shape function and launch.
 *
 * The sm_90a kernel (templates/grouped_gemm_sm90.cu.lt) loads X and W
 * tiles with TMA; their descriptors are encoded here on the host for every
 * call (a pure host computation, no GPU work) and passed by value as kernel
 * parameters, so a captured graph keeps the pointers it was captured with.
 * The portable kernel (templates/grouped_gemm_mma.cu.lt, every other arch)
 * takes the pointers in their place (runtime/tma.h). */
#include <limits.h>
#include <string.h>

#include "gemm_tiles.h"
#include "module.h"
#include "tma.h"

/* The plan of GEMM `which`, or NULL if which is not 1 or 2. */
static const moegen_gemm_kernel_plan *kernel_plan(const moegen_image *img, moegen_gemm_id which) {
  if (which == MOEGEN_GEMM1) return &img->gemm.gemm1;
  if (which == MOEGEN_GEMM2) return &img->gemm.gemm2;
  return NULL;
}

moegen_status moegen_gemm_fwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_fwd_shape *shape) {
  if (!image || !shape || max_rows < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_gemm_kernel_plan *p = kernel_plan(image, which);
  if (!p) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!image->gemm.supported) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->x[0] = shape->y[0] = max_rows;
  shape->x[1] = shape->w[2] = p->k;
  shape->y[1] = shape->w[1] = p->n;
  shape->w[0] = image->gemm.experts;
  shape->counts[0] = image->gemm.experts;
  shape->workspace_bytes = moegen_gemm_workspace_bytes(image);
  return MOEGEN_OK;
}

/* The ticket of a row-tiled call (moegen_gemm_launch). */
static moegen_status zero_ticket(moegen_module *m, const moegen_gemm_ticket_req *tk, CUstream stream) {
  *tk->ticket = NULL;
  const size_t need = moegen_gemm_workspace_bytes(moegen_module_image(m));
  if (need == 0) return MOEGEN_OK;
  if (!tk->workspace || tk->workspace_bytes < need || (uintptr_t)tk->workspace % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: workspace (%p, %zu bytes) must be 16-byte aligned and hold "
                              "the shape's workspace_bytes (%zu)", tk->op, tk->workspace,
                              tk->workspace_bytes, need);
  CUresult r = moegen_module_driver(m)->cuMemsetD32Async((CUdeviceptr)(uintptr_t)tk->workspace, 0, 1,
                                                         stream);
  if (r) return moegen_module_cuda_fail(m, r, "gemm: cuMemsetD32Async(workspace ticket)");
  *tk->ticket = tk->workspace;
  return MOEGEN_OK;
}

moegen_status moegen_gemm_launch(moegen_module *m, moegen_kernel_id id,
                                 const moegen_gemm_kernel_plan *p, long long max_tiles, void **params,
                                 CUstream stream, const char *what, const moegen_gemm_ticket_req *tk) {
  CUfunction fn;
  moegen_device_info dev;
  moegen_status st = moegen_module_kernel(m, id, (unsigned)p->threads, (unsigned)p->smem_bytes, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  if (tk && (st = zero_ticket(m, tk, stream)) != MOEGEN_OK) return st;
  long long grid = (long long)dev.sm_count * dev.blocks_per_sm; /* one CTA per SM, persistent */
  if (grid > max_tiles) grid = max_tiles;
  if (grid < 1) grid = 1;
  CUresult r = moegen_module_driver(m)->cuLaunchKernel(fn, (unsigned)grid, 1, 1, (unsigned)p->threads,
                                                       1, 1, (unsigned)p->smem_bytes, stream, params,
                                                       NULL);
  return r ? moegen_module_cuda_fail(m, r, what) : MOEGEN_OK;
}

/* Cheap metadata checks; the counts stay on the device (no value checks). */
static moegen_status check_args(moegen_module *m, const moegen_gemm_fwd_args *a) {
  const moegen_image *img = moegen_module_image(m);
  if (!kernel_plan(img, a->which))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_fwd: which = %d is not MOEGEN_GEMM1 or MOEGEN_GEMM2",
                              (int)a->which);
  if (!img->gemm.supported)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                              "gemm_fwd: module %s (%s) has no grouped GEMM kernels (they need "
                              "sm_80 or later and hidden, ffn multiples of 8)", img->name, img->arch);
  if (a->max_rows < 0 || a->max_rows > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_fwd: max_rows = %lld is outside [0, INT32_MAX]",
                              (long long)a->max_rows);
  if ((a->counts == NULL) == (a->offsets == NULL))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_fwd: give exactly one of counts and offsets");
  if (a->max_rows > 0 && (!a->x || !a->w || !a->y))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "gemm_fwd: x, w or y is NULL");
  if (((uintptr_t)a->x | (uintptr_t)a->w | (uintptr_t)a->y) % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_fwd: x, w and y must be 16-byte aligned (%p, %p, %p)", a->x,
                              a->w, a->y);
  return MOEGEN_OK;
}

moegen_status moegen_gemm_fwd(moegen_module *m, const moegen_gemm_fwd_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_args(m, a);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const moegen_image *img = moegen_module_image(m);
  const int g1 = a->which == MOEGEN_GEMM1, tall = moegen_gemm_tall(img, a->max_rows);
  const moegen_kernel_id id = tall ? (g1 ? MOEGEN_KERNEL_GEMM1_FWD_TALL : MOEGEN_KERNEL_GEMM2_FWD_TALL)
                                   : (g1 ? MOEGEN_KERNEL_GEMM1_FWD : MOEGEN_KERNEL_GEMM2_FWD);
  const moegen_gemm_kernel_plan *p = moegen_gemm_plan_of(&img->gemm, id);
  const unsigned long long E = (unsigned long long)img->gemm.experts;
  const unsigned long long N = (unsigned long long)p->n, K = (unsigned long long)p->k;
  moegen_gemm_operand mx, mw;
  st = moegen_gemm_operand_2d(m, &mx, a->x, a->max_rows, (long long)K, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm_fwd: cuTensorMapEncodeTiled(x)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &mw, a->w, (long long)E, (long long)N, (long long)K,
                                (unsigned)p->bn, (unsigned)p->bk,
                                "gemm_fwd: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;

  /* The most tiles the rows could make (caps the persistent grid). */
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + (long long)E) * ((p->n + p->bn - 1) / p->bn);
  int max_rows = (int)a->max_rows;
  void *y = a->y, *ticket = NULL;
  const int32_t *counts = a->counts, *offsets = a->offsets;
  void *params[] = {moegen_gemm_operand_param(m, &mx), moegen_gemm_operand_param(m, &mw),
                    &y, &counts, &offsets, &max_rows, &ticket};
  const moegen_gemm_ticket_req tk = {"gemm_fwd", a->workspace, a->workspace_bytes, &ticket};
  return moegen_gemm_launch(m, id, p, max_tiles, params, stream, "gemm_fwd: cuLaunchKernel", &tk);
}
