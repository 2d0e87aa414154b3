/* runtime/ops_gemm_fp8.c -- the fp8_block grouped GEMM forward (plain and
 * SwiGLU): shape function and launches.
 *
 * The sm_90a kernels (templates/grouped_gemm_fp8_sm90.cu.lt) load x and w
 * (e4m3) with TMA, boxes of 128 bytes of K (one scale block) and 128-byte
 * swizzle, and read the fp32 dequant scales directly. The maps are encoded
 * on the host for every call (no GPU work) and passed by value. There is
 * no portable fp8 kernel yet: a module without the kernels answers
 * NOT_SUPPORTED saying what they need. */
#include <limits.h>
#include <string.h>

#include "gemm_tiles.h"
#include "kernel_args.h"
#include "module.h"
#include "ops.h"
#include "tma.h"

#define QB MOEGEN_FP8_BLOCK /* the fp8_block quantization block (SPEC.md 5b) */

/* NOT_SUPPORTED naming why, unless the module has kernel id. */
static moegen_status require_fp8(moegen_module *m, moegen_kernel_id id, const char *what) {
  const moegen_image *img = moegen_module_image(m);
  if (moegen_has_kernel(img, id)) return MOEGEN_OK;
  return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                            "%s: module %s (%s) has no fp8_block GEMM kernels (they need arch "
                            "sm_90a, recipe fp8_block and hidden, ffn multiples of %d; the "
                            "portable path has none yet)", what, img->name, img->arch, QB);
}

moegen_status moegen_gemm_fwd_fp8_shape_of(const moegen_image *image, moegen_gemm_id which,
                                           int64_t max_rows, moegen_gemm_fwd_fp8_shape *shape) {
  if (!image || !shape || max_rows < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_kernel_id id = moegen_gemm_kernel(image, which, MOEGEN_GEMM_OP_FWD_FP8, 0);
  if (id == MOEGEN_KERNEL_COUNT) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(image, id)) return MOEGEN_ERR_NOT_SUPPORTED;
  const moegen_gemm_kernel_plan *p = moegen_gemm_plan_of(image, id);
  memset(shape, 0, sizeof *shape);
  const int64_t E = image->gemm.experts, N = p->n, K = p->k;
  shape->x[0] = shape->y[0] = max_rows;
  shape->x[1] = shape->w[2] = K;
  shape->x_scale[0] = K / QB;
  shape->x_scale[1] = moegen_scale_ld_of(max_rows);
  shape->w[0] = shape->w_scale[0] = shape->counts[0] = E;
  shape->w[1] = shape->y[1] = N;
  shape->w_scale[1] = N / QB;
  shape->w_scale[2] = K / QB;
  shape->workspace_bytes = moegen_gemm_workspace_bytes(image);
  return MOEGEN_OK;
}

/* The checks both ops share, for max_rows > 0: the pointers (x, w, the
 * scales, out[0..n_out) 16-byte aligned) and scale_ld. */
static moegen_status check_fp8(moegen_module *m, const char *what, int64_t max_rows,
                               const void *x, const float *xs, int64_t scale_ld, const void *w,
                               const float *ws, void *const *out, int n_out) {
  uintptr_t bits = (uintptr_t)x | (uintptr_t)xs | (uintptr_t)w | (uintptr_t)ws;
  int null = !x || !xs || !w || !ws;
  for (int i = 0; i < n_out; i++) bits |= (uintptr_t)out[i], null |= !out[i];
  if (null)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: x, x_scale, w, w_scale or an output is NULL", what);
  if (bits % 16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: x, x_scale, w, w_scale and the outputs must be 16-byte aligned",
                              what);
  if (!moegen_scale_ld_ok(scale_ld, max_rows))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: scale_ld = %lld must be >= max_rows (%lld), a multiple of 4 "
                              "and <= INT32_MAX", what, (long long)scale_ld, (long long)max_rows);
  return MOEGEN_OK;
}

/* x's and w's maps for kernel plan p (w boxes of wbox rows). */
static moegen_status maps(moegen_module *m, const char *what, const moegen_gemm_kernel_plan *p,
                          int64_t max_rows, const void *x, const void *w, unsigned wbox,
                          moegen_gemm_operand *mx, moegen_gemm_operand *mw) {
  const long long E = moegen_module_image(m)->gemm.experts;
  moegen_status st = moegen_gemm_operand_e4m3_2d(m, mx, x, max_rows, p->k, MOEGEN_GEMM_A_BOX_ROWS,
                                                 (unsigned)p->bk, what);
  if (st == MOEGEN_OK)
    st = moegen_gemm_operand_e4m3_3d(m, mw, w, E, p->n, p->k, wbox, (unsigned)p->bk, what);
  return st;
}

moegen_status moegen_gemm_fwd_fp8(moegen_module *m, const moegen_gemm_fwd_fp8_args *a,
                                  CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const char *what = "gemm_fwd_fp8";
  const moegen_image *img = moegen_module_image(m);
  moegen_kernel_id id = moegen_gemm_kernel(img, a->which, MOEGEN_GEMM_OP_FWD_FP8, 0);
  if (id == MOEGEN_KERNEL_COUNT)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: which = %d names no GEMM of it",
                              what, (int)a->which);
  moegen_status st = require_fp8(m, id, what);
  const moegen_gemm_kernel_plan *p;
  if (st == MOEGEN_OK)
    st = moegen_gemm_check(m, what, a->which, MOEGEN_GEMM_OP_FWD_FP8, a->max_rows, a->counts,
                           a->offsets, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  void *out[1] = {a->y};
  if ((st = check_fp8(m, what, a->max_rows, a->x, a->x_scale, a->scale_ld, a->w, a->w_scale, out,
                      1)) != MOEGEN_OK)
    return st;
  moegen_args_gemm_fwd_fp8 args = {.x_scale = a->x_scale, .w_scale = a->w_scale,
                                   .scale_ld = (int)a->scale_ld, .y = a->y, .counts = a->counts,
                                   .offsets = a->offsets, .max_rows = (int)a->max_rows};
  if ((st = maps(m, "gemm_fwd_fp8: cuTensorMapEncodeTiled", p, a->max_rows, a->x, a->w,
                 (unsigned)p->bn, &args.mx, &args.mw)) != MOEGEN_OK)
    return st;
  const long long E = img->gemm.experts;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * (p->n / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_fwd_fp8(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {what, a->workspace, a->workspace_bytes, &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_fwd_fp8, p, max_tiles, params, stream, &tk);
}

moegen_status moegen_gemm1_fwd_glu_fp8(moegen_module *m, const moegen_gemm_glu_fp8_args *a,
                                       CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const char *what = "gemm1_fwd_glu_fp8";
  const moegen_image *img = moegen_module_image(m);
  moegen_kernel_id id = moegen_gemm_kernel(img, MOEGEN_GEMM1, MOEGEN_GEMM_OP_GLU_FP8, 0);
  moegen_status st = require_fp8(m, id, what);
  const moegen_gemm_kernel_plan *p;
  if (st == MOEGEN_OK)
    st = moegen_gemm_check(m, what, MOEGEN_GEMM1, MOEGEN_GEMM_OP_GLU_FP8, a->max_rows, a->counts,
                           a->offsets, &id, &p);
  if (st != MOEGEN_OK || a->max_rows == 0) return st;
  void *out[2] = {a->act, a->h ? a->h : a->act};
  if ((st = check_fp8(m, what, a->max_rows, a->x, a->x_scale, a->scale_ld, a->w, a->w_scale, out,
                      2)) != MOEGEN_OK)
    return st;
  if (((uintptr_t)a->bias | (uintptr_t)a->prob) % 4)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: bias and prob must be 4-byte aligned", what);
  moegen_args_gemm_glu_fp8 args = {.x_scale = a->x_scale, .w_scale = a->w_scale,
                                   .scale_ld = (int)a->scale_ld, .act = a->act, .h = a->h,
                                   .bias = a->bias, .prob = a->prob, .counts = a->counts,
                                   .offsets = a->offsets, .max_rows = (int)a->max_rows};
  if ((st = maps(m, "gemm1_fwd_glu_fp8: cuTensorMapEncodeTiled", p, a->max_rows, a->x, a->w,
                 (unsigned)p->bn / 2, &args.mx, &args.mw)) != MOEGEN_OK)
    return st;
  const long long E = img->gemm.experts;
  long long max_tiles = ((a->max_rows + p->bm - 1) / p->bm + E) * (p->n / p->bn);
  void *params[MOEGEN_MAX_PARAMS];
  moegen_params_gemm_glu_fp8(&args, img->gemm.portable, params);
  const moegen_gemm_ticket_req tk = {what, a->workspace, a->workspace_bytes, &args.tickets};
  return moegen_gemm_launch(m, id, MOEGEN_SIG_gemm_glu_fp8, p, max_tiles, params, stream, &tk);
}
