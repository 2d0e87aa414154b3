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
#include "kernel_args.h"
#include "module.h"
#include "ops.h"
#include "tma.h"

#define NONE MOEGEN_KERNEL_COUNT
/* [op][which - 1][tall] */
static const moegen_kernel_id gemm_kernels[MOEGEN_GEMM_OP_COUNT][2][2] = {
    [MOEGEN_GEMM_OP_FWD] = {{MOEGEN_KERNEL_GEMM1_FWD, MOEGEN_KERNEL_GEMM1_FWD_TALL},
                            {MOEGEN_KERNEL_GEMM2_FWD, MOEGEN_KERNEL_GEMM2_FWD_TALL}},
    [MOEGEN_GEMM_OP_GLU] = {{MOEGEN_KERNEL_GEMM1_FWD_GLU, MOEGEN_KERNEL_GEMM1_FWD_GLU_TALL},
                            {NONE, NONE}},
    [MOEGEN_GEMM_OP_DGRAD] = {{MOEGEN_KERNEL_GEMM1_DGRAD, MOEGEN_KERNEL_GEMM1_DGRAD_TALL},
                              {MOEGEN_KERNEL_GEMM2_DGRAD, MOEGEN_KERNEL_GEMM2_DGRAD_TALL}},
    [MOEGEN_GEMM_OP_DGLU] = {{NONE, NONE},
                             {MOEGEN_KERNEL_GEMM2_DGRAD_GLU, MOEGEN_KERNEL_GEMM2_DGRAD_GLU_TALL}},
    [MOEGEN_GEMM_OP_WGRAD] = {{MOEGEN_KERNEL_GEMM1_WGRAD, MOEGEN_KERNEL_GEMM1_WGRAD},
                              {MOEGEN_KERNEL_GEMM2_WGRAD, MOEGEN_KERNEL_GEMM2_WGRAD}},
    [MOEGEN_GEMM_OP_FWD_FP8] = {{MOEGEN_KERNEL_GEMM1_FWD_FP8, MOEGEN_KERNEL_GEMM1_FWD_FP8},
                                {MOEGEN_KERNEL_GEMM2_FWD_FP8, MOEGEN_KERNEL_GEMM2_FWD_FP8}},
    [MOEGEN_GEMM_OP_GLU_FP8] = {{MOEGEN_KERNEL_GEMM1_FWD_GLU_FP8, MOEGEN_KERNEL_GEMM1_FWD_GLU_FP8},
                                {NONE, NONE}},
};
#undef NONE

moegen_kernel_id moegen_gemm_kernel(const moegen_image *img, moegen_gemm_id which, moegen_gemm_op op,
                                    int64_t max_rows) {
  if ((which != MOEGEN_GEMM1 && which != MOEGEN_GEMM2) || (unsigned)op >= MOEGEN_GEMM_OP_COUNT)
    return MOEGEN_KERNEL_COUNT;
  return gemm_kernels[op][which - 1][moegen_gemm_tall(img, max_rows)];
}

moegen_status moegen_gemm_check(moegen_module *m, const char *what, moegen_gemm_id which,
                                moegen_gemm_op op, int64_t max_rows, const int32_t *counts,
                                const int32_t *offsets, moegen_kernel_id *id,
                                const moegen_gemm_kernel_plan **p) {
  const moegen_image *img = moegen_module_image(m);
  *id = moegen_gemm_kernel(img, which, op, max_rows);
  if (*id == MOEGEN_KERNEL_COUNT)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: which = %d names no GEMM of it",
                              what, (int)which);
  moegen_status st = moegen_require_kernel(m, moegen_gemm_kernel(img, which, op, 0), what);
  if (st != MOEGEN_OK) return st;
  if (max_rows < 0 || max_rows > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: max_rows = %lld is outside [0, INT32_MAX]", what,
                              (long long)max_rows);
  if (counts && offsets)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: give exactly one of counts and offsets (both given)", what);
  if (!counts && !offsets && max_rows > 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: give exactly one of counts and offsets (neither given; only "
                              "max_rows = 0 reads none)", what);
  *p = moegen_gemm_plan_of(img, *id);
  return MOEGEN_OK;
}

moegen_status moegen_gemm_shape_plan(const moegen_image *img, moegen_gemm_id which,
                                     const moegen_gemm_kernel_plan **p) {
  moegen_kernel_id id = moegen_gemm_kernel(img, which, MOEGEN_GEMM_OP_FWD, 0);
  if (id == MOEGEN_KERNEL_COUNT) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(img, id)) return MOEGEN_ERR_NOT_SUPPORTED;
  *p = moegen_gemm_plan_of(img, id);
  return MOEGEN_OK;
}

moegen_status moegen_gemm_fwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_fwd_shape *shape) {
  if (!image || !shape || max_rows < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_shape_plan(image, which, &p);
  if (st != MOEGEN_OK) return st;
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

moegen_status moegen_gemm_launch(moegen_module *m, moegen_kernel_id id, moegen_signature_id sig,
                                 const moegen_gemm_kernel_plan *p, long long max_tiles,
                                 void **params, CUstream stream, const moegen_gemm_ticket_req *tk) {
  CUfunction fn;
  moegen_device_info dev;
  moegen_status st = moegen_module_kernel(m, id, (unsigned)p->threads, (unsigned)p->smem_bytes, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  if (tk && (st = zero_ticket(m, tk, stream)) != MOEGEN_OK) return st;
  long long grid = (long long)dev.sm_count * dev.blocks_per_sm; /* one CTA per SM, persistent */
  if (grid > max_tiles) grid = max_tiles;
  if (grid < 1) grid = 1;
  const moegen_launch_dims d = {(unsigned)grid, (unsigned)p->threads, (unsigned)p->smem_bytes};
  return moegen_module_launch(m, id, sig, fn, &d, params, stream, tk ? tk->op : "gemm_wgrad");
}

/* Cheap metadata checks; the counts stay on the device (no value checks). */
static moegen_status check_args(moegen_module *m, const moegen_gemm_fwd_args *a, moegen_kernel_id *id,
                                const moegen_gemm_kernel_plan **p) {
  moegen_status st = moegen_gemm_check(m, "gemm_fwd", a->which, MOEGEN_GEMM_OP_FWD, a->max_rows,
                                       a->counts, a->offsets, id, p);
  if (st != MOEGEN_OK) return st;
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
  moegen_kernel_id id;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = check_args(m, a, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const moegen_image *img = moegen_module_image(m);
  const unsigned long long E = (unsigned long long)img->gemm.experts;
  const unsigned long long N = (unsigned long long)p->n, K = (unsigned long long)p->k;
  moegen_args_gemm_fwd args = {.y = a->y, .counts = a->counts, .offsets = a->offsets,
                               .max_rows = (int)a->max_rows, .tickets = NULL};
  st = moegen_gemm_operand_2d(m, &args.mx, a->x, a->max_rows, (long long)K, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm_fwd: cuTensorMapEncodeTiled(x)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &args.mw, a->w, (long long)E, (long long)N, (long long)K,
                                (unsigned)p->bn, (unsigned)p->bk,
                                "gemm_fwd: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;

  /* The most tiles the rows could make (caps the persistent grid). */
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + (long long)E) * ((p->n + p->bn - 1) / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_fwd(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {"gemm_fwd", a->workspace, a->workspace_bytes, &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_fwd, p, max_tiles, params, stream, &tk);
}
