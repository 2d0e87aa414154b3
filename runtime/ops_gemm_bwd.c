/* runtime/ops_gemm_bwd.c -- grouped GEMM dgrad, wgrad (+ bias grad), the
 * gemm1 forward with the SwiGLU epilogue and gemm2's dgrad with the SwiGLU
 * backward epilogue: shape function and launches.
 *
 * The sm_90a kernels (templates/grouped_gemm_bwd_sm90.cu.lt) load every
 * operand with TMA, 128-byte swizzle. K-major operands (the reduction
 * contiguous: dy and x as the A operand of dgrad / glu, w in glu) use a box
 * of [rows, 64] (A: MOEGEN_GEMM_A_BOX_ROWS rows); MN-major operands (the
 * output dimension contiguous: w in dgrad, dy and x in wgrad) use boxes of
 * [64 reduction lines, 64 columns]. The maps are encoded on the host for
 * every call (no GPU work) and passed by value. The portable kernels
 * (templates/grouped_gemm_mma.cu.lt) take the pointers instead
 * (runtime/tma.h). */
#include <limits.h>
#include <string.h>

#include "gemm_tiles.h"
#include "module.h"
#include "tma.h"

/* Plans of GEMM `which`: forward, dgrad, wgrad; NULL if which is not 1 or 2. */
static const moegen_gemm_kernel_plan *plan_of(const moegen_image *img, moegen_gemm_id which,
                                              int kind) {
  const moegen_gemm_plan *g = &img->gemm;
  if (which == MOEGEN_GEMM1) return kind == 0 ? &g->gemm1 : kind == 1 ? &g->gemm1_dgrad : &g->gemm1_wgrad;
  if (which == MOEGEN_GEMM2) return kind == 0 ? &g->gemm2 : kind == 1 ? &g->gemm2_dgrad : &g->gemm2_wgrad;
  return NULL;
}

moegen_status moegen_gemm_bwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_bwd_shape *shape) {
  if (!image || !shape || max_rows < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_gemm_kernel_plan *p = plan_of(image, which, 0);
  if (!p) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!image->gemm.supported) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  const int64_t E = image->gemm.experts, N = p->n, K = p->k;
  shape->dy[0] = shape->x[0] = shape->dx[0] = max_rows;
  shape->dy[1] = N;
  shape->x[1] = shape->dx[1] = K;
  shape->w[0] = shape->dw[0] = shape->db[0] = E;
  shape->w[1] = shape->dw[1] = shape->db[1] = N;
  shape->w[2] = shape->dw[2] = K;
  shape->counts[0] = E;
  shape->workspace_bytes = moegen_gemm_workspace_bytes(image);
  return MOEGEN_OK;
}

/* Checks shared by the three ops (`what` names the op in messages). */
static moegen_status check_common(moegen_module *m, const char *what, int64_t max_rows,
                                  const int32_t *counts, const int32_t *offsets) {
  const moegen_image *img = moegen_module_image(m);
  if (!img->gemm.supported)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                              "%s: module %s (%s) has no grouped GEMM kernels (they need "
                              "sm_80 or later and hidden, ffn multiples of 8)", what, img->name, img->arch);
  if (max_rows < 0 || max_rows > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: max_rows = %lld is outside [0, INT32_MAX]", what,
                              (long long)max_rows);
  if ((counts == NULL) == (offsets == NULL))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: give exactly one of counts and offsets", what);
  return MOEGEN_OK;
}

static moegen_status check_ptrs(moegen_module *m, const char *what, const void *const *p, int n) {
  uintptr_t bits = 0;
  for (int i = 0; i < n; i++) {
    if (!p[i]) return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: a buffer is NULL", what);
    bits |= (uintptr_t)p[i];
  }
  if (bits % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: buffers must be 16-byte aligned", what);
  return MOEGEN_OK;
}

moegen_status moegen_gemm_dgrad(moegen_module *m, const moegen_gemm_dgrad_args *a,
                                CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  const moegen_gemm_kernel_plan *p = plan_of(img, a->which, 1);
  if (!p)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_dgrad: which = %d is not MOEGEN_GEMM1 or MOEGEN_GEMM2",
                              (int)a->which);
  moegen_status st = check_common(m, "gemm_dgrad", a->max_rows, a->counts, a->offsets);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const int g1 = a->which == MOEGEN_GEMM1, tall = moegen_gemm_tall(img, a->max_rows);
  const moegen_kernel_id id = tall ? (g1 ? MOEGEN_KERNEL_GEMM1_DGRAD_TALL : MOEGEN_KERNEL_GEMM2_DGRAD_TALL)
                                   : (g1 ? MOEGEN_KERNEL_GEMM1_DGRAD : MOEGEN_KERNEL_GEMM2_DGRAD);
  p = moegen_gemm_plan_of(&img->gemm, id);
  const void *ptrs[] = {a->dy, a->w, a->dx};
  if ((st = check_ptrs(m, "gemm_dgrad", ptrs, 3)) != MOEGEN_OK) return st;
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_gemm_operand mdy, mw;
  st = moegen_gemm_operand_2d(m, &mdy, a->dy, a->max_rows, N, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm_dgrad: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &mw, a->w, E, N, K, (unsigned)p->bk, 64,
                                "gemm_dgrad: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((K + p->bn - 1) / p->bn);
  int max_rows = (int)a->max_rows;
  void *dx = a->dx, *ticket = NULL;
  const int32_t *counts = a->counts, *offsets = a->offsets;
  void *params[] = {moegen_gemm_operand_param(m, &mdy), moegen_gemm_operand_param(m, &mw),
                    &dx, &counts, &offsets, &max_rows, &ticket}; /* portable: no ticket (ignored) */
  const moegen_gemm_ticket_req tk = {"gemm_dgrad", a->workspace, a->workspace_bytes, &ticket};
  return moegen_gemm_launch(m, id, p, max_tiles, params, stream, "gemm_dgrad: cuLaunchKernel", &tk);
}

moegen_status moegen_gemm_wgrad(moegen_module *m, const moegen_gemm_wgrad_args *a,
                                CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  const moegen_gemm_kernel_plan *p = plan_of(img, a->which, 2);
  if (!p)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_wgrad: which = %d is not MOEGEN_GEMM1 or MOEGEN_GEMM2",
                              (int)a->which);
  moegen_status st = check_common(m, "gemm_wgrad", a->max_rows, a->counts, a->offsets);
  if (st != MOEGEN_OK) return st;
  if (a->accumulate != 0 && a->accumulate != 1)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "gemm_wgrad: accumulate = %d is not 0 or 1",
                              a->accumulate);
  if (a->max_rows == 0 && a->accumulate) return MOEGEN_OK; /* += 0 */
  const void *ptrs[] = {a->dy, a->x, a->dw};
  if ((st = check_ptrs(m, "gemm_wgrad", ptrs, 3)) != MOEGEN_OK) return st;
  if ((uintptr_t)a->db % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "gemm_wgrad: db must be 16-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  /* With max_rows = 0 every expert is empty: the kernel loads nothing and
   * writes zeros, the maps only need a valid (1-row) shape. */
  const long long rows = a->max_rows > 0 ? a->max_rows : 1;
  moegen_gemm_operand mdy, mx, mdw;
  st = moegen_gemm_operand_2d(m, &mdy, a->dy, rows, N, (unsigned)p->bk, 64,
                              "gemm_wgrad: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_2d(m, &mx, a->x, rows, K, (unsigned)p->bk, 64,
                                "gemm_wgrad: cuTensorMapEncodeTiled(x)");
  /* dW as bf16 [E, N, K] in [1, 64, 64] boxes: the sm_90a kernel's TMA
   * stores when accumulate = 0 (with accumulate = 1 it adds fp32 from
   * registers and never reads the map, which is then left zero). */
  memset(&mdw, 0, sizeof mdw);
  if (st == MOEGEN_OK && !a->accumulate)
    st = moegen_gemm_operand_3d(m, &mdw, a->dw, E, N, K, 64, 64, "gemm_wgrad: cuTensorMapEncodeTiled(dw)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = E * ((N + p->bm - 1) / p->bm) * ((K + p->bn - 1) / p->bn);
  int max_rows = (int)a->max_rows, accumulate = a->accumulate;
  void *dw = a->dw;
  float *db = a->db;
  const int32_t *counts = a->counts, *offsets = a->offsets;
  /* The last parameter only the sm_90a kernel declares (cuLaunchKernel
   * reads the parameters a kernel declares). */
  void *params[] = {moegen_gemm_operand_param(m, &mdy), moegen_gemm_operand_param(m, &mx),
                    &dw, &db, &counts, &offsets, &max_rows, &accumulate,
                    moegen_gemm_operand_param(m, &mdw)};
  return moegen_gemm_launch(m, a->which == MOEGEN_GEMM1 ? MOEGEN_KERNEL_GEMM1_WGRAD : MOEGEN_KERNEL_GEMM2_WGRAD,
                p, max_tiles, params, stream, "gemm_wgrad: cuLaunchKernel", NULL);
}

moegen_status moegen_gemm1_fwd_glu(moegen_module *m, const moegen_gemm_glu_args *a,
                                   CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  const moegen_kernel_id id = moegen_gemm_tall(img, a->max_rows) ? MOEGEN_KERNEL_GEMM1_FWD_GLU_TALL
                                                                 : MOEGEN_KERNEL_GEMM1_FWD_GLU;
  const moegen_gemm_kernel_plan *p = moegen_gemm_plan_of(&img->gemm, id);
  moegen_status st = check_common(m, "gemm1_fwd_glu", a->max_rows, a->counts, a->offsets);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const void *ptrs[] = {a->x, a->w, a->act};
  if ((st = check_ptrs(m, "gemm1_fwd_glu", ptrs, 3)) != MOEGEN_OK) return st;
  if ((uintptr_t)a->h % 16 || ((uintptr_t)a->bias | (uintptr_t)a->prob) % 4)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm1_fwd_glu: h must be 16-byte, bias and prob 4-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_gemm_operand mx, mw;
  st = moegen_gemm_operand_2d(m, &mx, a->x, a->max_rows, K, MOEGEN_GEMM_A_BOX_ROWS, (unsigned)p->bk,
                              "gemm1_fwd_glu: cuTensorMapEncodeTiled(x)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &mw, a->w, E, N, K, (unsigned)p->bn / 2, (unsigned)p->bk,
                                "gemm1_fwd_glu: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  const long long half = p->bn / 2;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((N / 2 + half - 1) / half);
  int max_rows = (int)a->max_rows;
  void *act = a->act, *h = a->h, *ticket = NULL;
  const void *bias = a->bias;
  const float *prob = a->prob;
  const int32_t *counts = a->counts, *offsets = a->offsets;
  void *params[] = {moegen_gemm_operand_param(m, &mx), moegen_gemm_operand_param(m, &mw),
                    &act, &h, &bias, &prob, &counts, &offsets, &max_rows, &ticket}; /* portable: no ticket */
  const moegen_gemm_ticket_req tk = {"gemm1_fwd_glu", a->workspace, a->workspace_bytes, &ticket};
  return moegen_gemm_launch(m, id, p, max_tiles, params, stream, "gemm1_fwd_glu: cuLaunchKernel", &tk);
}

moegen_status moegen_gemm2_dgrad_glu(moegen_module *m, const moegen_gemm_dglu_args *a,
                                     CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  const moegen_kernel_id id = moegen_gemm_tall(img, a->max_rows) ? MOEGEN_KERNEL_GEMM2_DGRAD_GLU_TALL
                                                                 : MOEGEN_KERNEL_GEMM2_DGRAD_GLU;
  const moegen_gemm_kernel_plan *p = moegen_gemm_plan_of(&img->gemm, id);
  moegen_status st = check_common(m, "gemm2_dgrad_glu", a->max_rows, a->counts, a->offsets);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const void *ptrs[] = {a->dy, a->w, a->h, a->dh};
  if ((st = check_ptrs(m, "gemm2_dgrad_glu", ptrs, 4)) != MOEGEN_OK) return st;
  if (((uintptr_t)a->prob | (uintptr_t)a->dprob) % 4)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm2_dgrad_glu: prob and dprob must be 4-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_gemm_operand mdy, mw;
  st = moegen_gemm_operand_2d(m, &mdy, a->dy, a->max_rows, N, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm2_dgrad_glu: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &mw, a->w, E, N, K, (unsigned)p->bk, 64,
                                "gemm2_dgrad_glu: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((K + p->bn - 1) / p->bn);
  int max_rows = (int)a->max_rows;
  void *dh = a->dh;
  const void *h = a->h;
  const float *prob = a->prob;
  float *dprob = a->dprob;
  const int32_t *counts = a->counts, *offsets = a->offsets;
  void *ticket = NULL;
  void *params[] = {moegen_gemm_operand_param(m, &mdy), moegen_gemm_operand_param(m, &mw),
                    &dh, &h, &prob, &dprob, &counts, &offsets, &max_rows, &ticket}; /* portable: no ticket */
  const moegen_gemm_ticket_req tk = {"gemm2_dgrad_glu", a->workspace, a->workspace_bytes, &ticket};
  return moegen_gemm_launch(m, id, p, max_tiles, params, stream, "gemm2_dgrad_glu: cuLaunchKernel", &tk);
}
