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
#include "kernel_args.h"
#include "module.h"
#include "tma.h"

moegen_status moegen_gemm_bwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_bwd_shape *shape) {
  if (!image || !shape || max_rows < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_shape_plan(image, which, &p);
  if (st != MOEGEN_OK) return st;
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
  moegen_kernel_id id;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_check(m, "gemm_dgrad", a->which, MOEGEN_GEMM_OP_DGRAD, a->max_rows,
                                       a->counts, a->offsets, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const void *ptrs[] = {a->dy, a->w, a->dx};
  if ((st = check_ptrs(m, "gemm_dgrad", ptrs, 3)) != MOEGEN_OK) return st;
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_args_gemm_dgrad args = {.dx = a->dx, .counts = a->counts, .offsets = a->offsets,
                                 .max_rows = (int)a->max_rows, .tickets = NULL};
  st = moegen_gemm_operand_2d(m, &args.mdy, a->dy, a->max_rows, N, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm_dgrad: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &args.mw, a->w, E, N, K, (unsigned)p->bk, 64,
                                "gemm_dgrad: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((K + p->bn - 1) / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_dgrad(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {"gemm_dgrad", a->workspace, a->workspace_bytes, &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_dgrad, p, max_tiles, params, stream, &tk);
}

/* wgrad of no rows (max_rows = 0): every expert is empty, so dw and db
 * are zeros (two memsets, no kernel; dy, x, counts and offsets are not
 * read), or with accumulate = 1 keep their contents. */
static moegen_status wgrad_empty(moegen_module *m, const moegen_gemm_wgrad_args *a,
                                 const moegen_gemm_kernel_plan *p, CUstream stream) {
  if (a->accumulate) return MOEGEN_OK; /* += 0 */
  if (!a->dw)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_wgrad: dw is NULL (with max_rows = 0 and accumulate = 0 it "
                              "is still written: zeros)");
  if (((uintptr_t)a->dw | (uintptr_t)a->db) % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm_wgrad: dw and db must be 16-byte aligned");
  const size_t E = (size_t)moegen_module_image(m)->gemm.experts, N = (size_t)p->n, K = (size_t)p->k;
  moegen_status st = moegen_module_memset32(m, a->dw, 0, E * N * K / 2, stream,
                                            "gemm_wgrad: cuMemsetD32Async(dw)"); /* bf16: K even */
  if (st == MOEGEN_OK && a->db)
    st = moegen_module_memset32(m, a->db, 0, E * N, stream, "gemm_wgrad: cuMemsetD32Async(db)");
  return st;
}

moegen_status moegen_gemm_wgrad(moegen_module *m, const moegen_gemm_wgrad_args *a,
                                CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  moegen_kernel_id id;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_check(m, "gemm_wgrad", a->which, MOEGEN_GEMM_OP_WGRAD, a->max_rows,
                                       a->counts, a->offsets, &id, &p);
  if (st != MOEGEN_OK) return st;
  if (a->accumulate != 0 && a->accumulate != 1)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "gemm_wgrad: accumulate = %d is not 0 or 1",
                              a->accumulate);
  if (a->max_rows == 0) return wgrad_empty(m, a, p, stream);
  const void *ptrs[] = {a->dy, a->x, a->dw};
  if ((st = check_ptrs(m, "gemm_wgrad", ptrs, 3)) != MOEGEN_OK) return st;
  if ((uintptr_t)a->db % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "gemm_wgrad: db must be 16-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_args_gemm_wgrad args = {.dw = a->dw, .db = a->db, .counts = a->counts,
                                 .offsets = a->offsets, .max_rows = (int)a->max_rows,
                                 .accumulate = a->accumulate};
  st = moegen_gemm_operand_2d(m, &args.mdy, a->dy, a->max_rows, N, (unsigned)p->bk, 64,
                              "gemm_wgrad: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_2d(m, &args.mx, a->x, a->max_rows, K, (unsigned)p->bk, 64,
                                "gemm_wgrad: cuTensorMapEncodeTiled(x)");
  /* dW as bf16 [E, N, K] in [1, 64, 64] boxes: the sm_90a kernel's TMA
   * stores when accumulate = 0 (with accumulate = 1 it adds fp32 from
   * registers and never reads the map, which is then left zero). */
  if (st == MOEGEN_OK && !a->accumulate)
    st = moegen_gemm_operand_3d(m, &args.mdw, a->dw, E, N, K, 64, 64, "gemm_wgrad: cuTensorMapEncodeTiled(dw)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = E * ((N + p->bm - 1) / p->bm) * ((K + p->bn - 1) / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_wgrad(&args, img->gemm.portable, params);
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_wgrad, p, max_tiles, params, stream, NULL);
}

moegen_status moegen_gemm1_fwd_glu(moegen_module *m, const moegen_gemm_glu_args *a,
                                   CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  moegen_kernel_id id;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_check(m, "gemm1_fwd_glu", MOEGEN_GEMM1, MOEGEN_GEMM_OP_GLU,
                                       a->max_rows, a->counts, a->offsets, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const void *ptrs[] = {a->x, a->w, a->act};
  if ((st = check_ptrs(m, "gemm1_fwd_glu", ptrs, 3)) != MOEGEN_OK) return st;
  if ((uintptr_t)a->h % 16 || ((uintptr_t)a->bias | (uintptr_t)a->prob) % 4)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm1_fwd_glu: h must be 16-byte, bias and prob 4-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_args_gemm_glu args = {.act = a->act, .h = a->h, .bias = a->bias, .prob = a->prob,
                               .counts = a->counts, .offsets = a->offsets,
                               .max_rows = (int)a->max_rows, .tickets = NULL};
  st = moegen_gemm_operand_2d(m, &args.mx, a->x, a->max_rows, K, MOEGEN_GEMM_A_BOX_ROWS, (unsigned)p->bk,
                              "gemm1_fwd_glu: cuTensorMapEncodeTiled(x)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &args.mw, a->w, E, N, K, (unsigned)p->bn / 2, (unsigned)p->bk,
                                "gemm1_fwd_glu: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  const long long half = p->bn / 2;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((N / 2 + half - 1) / half);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_glu(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {"gemm1_fwd_glu", a->workspace, a->workspace_bytes, &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_glu, p, max_tiles, params, stream, &tk);
}

moegen_status moegen_gemm2_dgrad_glu(moegen_module *m, const moegen_gemm_dglu_args *a,
                                     CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_image *img = moegen_module_image(m);
  moegen_kernel_id id;
  const moegen_gemm_kernel_plan *p;
  moegen_status st = moegen_gemm_check(m, "gemm2_dgrad_glu", MOEGEN_GEMM2, MOEGEN_GEMM_OP_DGLU,
                                       a->max_rows, a->counts, a->offsets, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  const void *ptrs[] = {a->dy, a->w, a->h, a->dh};
  if ((st = check_ptrs(m, "gemm2_dgrad_glu", ptrs, 4)) != MOEGEN_OK) return st;
  if (((uintptr_t)a->prob | (uintptr_t)a->dprob) % 4)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "gemm2_dgrad_glu: prob and dprob must be 4-byte aligned");
  const long long E = img->gemm.experts, N = p->n, K = p->k;
  moegen_args_gemm_dglu args = {.dh = a->dh, .h = a->h, .prob = a->prob, .dprob = a->dprob,
                                .counts = a->counts, .offsets = a->offsets,
                                .max_rows = (int)a->max_rows, .tickets = NULL};
  st = moegen_gemm_operand_2d(m, &args.mdy, a->dy, a->max_rows, N, MOEGEN_GEMM_A_BOX_ROWS,
                              (unsigned)p->bk, "gemm2_dgrad_glu: cuTensorMapEncodeTiled(dy)");
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_3d(m, &args.mw, a->w, E, N, K, (unsigned)p->bk, 64,
                                "gemm2_dgrad_glu: cuTensorMapEncodeTiled(w)");
  if (st != MOEGEN_OK) return st;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * ((K + p->bn - 1) / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_dglu(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {"gemm2_dgrad_glu", a->workspace, a->workspace_bytes,
                                     &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_dglu, p, max_tiles, params, stream, &tk);
}
