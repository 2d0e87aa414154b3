/* runtime/ops_quant.c -- the FP8 quantize ops (SPEC.md 5b): weights
 * (128 x 128 blocks or one tensor scale, with the transposed copy), 1 x 128
 * rows, and fp8_tensorwise's amax + quantize. */
#include <limits.h>
#include <string.h>

#include "kernel_args.h"
#include "module.h"
#include "ops.h"

enum { QB = MOEGEN_FP8_BLOCK, MAX_MATRIX_DIM = 2 * MOEGEN_MAX_DIM };

static int is_block(const moegen_image *img) { return img->quant.recipe == MOEGEN_RECIPE_FP8_BLOCK; }

/* NOT_SUPPORTED unless the module holds kernel id, naming the recipe that has it. */
static moegen_status require(moegen_module *m, moegen_kernel_id id, const char *op,
                             const char *needs) {
  const moegen_image *img = moegen_module_image(m);
  if (moegen_has_kernel(img, id)) return MOEGEN_OK;
  static const char *const recipes[] = {
#define RECIPE_NAME_(e, name, value) [value] = #name,
      MOEGEN_RECIPES(RECIPE_NAME_)
#undef RECIPE_NAME_
  };
  unsigned r = (unsigned)img->quant.recipe;
  return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED, "%s: module %s has recipe %s; %s", op,
                            img->name, r < sizeof recipes / sizeof recipes[0] ? recipes[r] : "?",
                            needs);
}

/* The function of kernel id at block size threads, and its launch dims for grid blocks. */
static moegen_status kernel_of(moegen_module *m, moegen_kernel_id id, int threads, int64_t grid,
                               CUfunction *fn, moegen_launch_dims *d) {
  moegen_device_info dev;
  *d = (moegen_launch_dims){(unsigned)grid, (unsigned)threads, 0};
  return moegen_module_kernel(m, id, (unsigned)threads, 0, fn, &dev);
}

/* ---------------------------------------------------------------- weights */

/* 128 x 128 tiles of an [n, k] matrix (partial edge tiles count). */
static int64_t tiles_of(int64_t n, int64_t k) { return ((n + QB - 1) / QB) * ((k + QB - 1) / QB); }

moegen_status moegen_quant_weight_shape_of(const moegen_image *image, int64_t experts, int64_t n,
                                           int64_t k, moegen_quant_weight_shape *shape) {
  if (!image || !shape || experts < 0 || n <= 0 || k <= 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_QUANT_WEIGHT)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->data[0] = shape->data_t[0] = experts;
  shape->data[1] = shape->data_t[2] = n;
  shape->data[2] = shape->data_t[1] = k;
  if (is_block(image)) {
    shape->scales[0] = shape->scales_t[0] = experts;
    shape->scales[1] = shape->scales_t[2] = n / QB;
    shape->scales[2] = shape->scales_t[1] = k / QB;
  } else {
    shape->scales[0] = shape->scales[1] = shape->scales[2] = 1;
    shape->amax[0] = 1;
  }
  return MOEGEN_OK;
}

static moegen_status check_weight(moegen_module *m, const moegen_quant_weight_args *a) {
  const char *op = "quant_weight";
  moegen_status st = require(m, MOEGEN_KERNEL_QUANT_WEIGHT, op,
                             "weight quantization needs recipe fp8_block or fp8_tensorwise");
  if (st != MOEGEN_OK) return st;
  int block = is_block(moegen_module_image(m));
  if (a->n <= 0 || a->k <= 0 || a->n > MAX_MATRIX_DIM || a->k > MAX_MATRIX_DIM)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: [n, k] = [%lld, %lld] not in 1..%d",
                              op, (long long)a->n, (long long)a->k, MAX_MATRIX_DIM);
  if (a->experts < 0 || a->experts > INT32_MAX / tiles_of(a->n, a->k))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: experts = %lld must be >= 0 and experts * %lld tiles <= INT32_MAX",
                              op, (long long)a->experts, (long long)tiles_of(a->n, a->k));
  if (block && (a->n % QB || a->k % QB))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: fp8_block needs n and k multiples of %d, got [%lld, %lld]", op, QB,
                              (long long)a->n, (long long)a->k);
  if (a->experts == 0) return MOEGEN_OK;
  const char *null = !a->w ? "w" : !a->data ? "data" : !a->scales ? "scales"
                     : block && a->data_t && !a->scales_t ? "scales_t"
                     : !block && !a->amax ? "amax" : NULL;
  if (null)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, null);
  if (moegen_misaligned(a->w) || moegen_misaligned(a->data) || moegen_misaligned(a->scales) ||
      moegen_misaligned(a->data_t) || (block && moegen_misaligned(a->scales_t)) ||
      (!block && moegen_misaligned(a->amax)))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: w, data, scales, data_t, scales_t and amax must be 16-byte aligned",
                              op);
  return MOEGEN_OK;
}

/* The amax kernel over n > 0 elements of x into amax (zeroed first). */
static moegen_status launch_amax(moegen_module *m, const void *x, float *amax, int64_t n,
                                 CUstream stream, const char *op) {
  const moegen_quant_plan *p = &moegen_module_image(m)->quant;
  moegen_status st = moegen_module_memset32(m, amax, 0, 1, stream, op);
  if (st != MOEGEN_OK) return st;
  int64_t per_block = (int64_t)p->tensor_threads * 8, blocks = (n + per_block - 1) / per_block;
  if (blocks > p->max_blocks) blocks = p->max_blocks;
  moegen_args_quant_amax args = {.x = x, .amax = amax, .n = n};
  CUfunction fn;
  moegen_launch_dims d;
  moegen_status ks = kernel_of(m, MOEGEN_KERNEL_QUANT_AMAX, p->tensor_threads, blocks, &fn, &d);
  return ks != MOEGEN_OK ? ks : moegen_launch_quant_amax(m, MOEGEN_KERNEL_QUANT_AMAX, fn, &d, &args, stream, op);
}

moegen_status moegen_quant_weight(moegen_module *m, const moegen_quant_weight_args *a,
                                  CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_weight(m, a);
  if (st != MOEGEN_OK || a->experts == 0) return st;
  const moegen_quant_plan *p = &moegen_module_image(m)->quant;
  const char *op = "quant_weight";
  int block = is_block(moegen_module_image(m));
  if (!block) {
    st = launch_amax(m, a->w, a->amax, a->experts * a->n * a->k, stream, op);
    if (st != MOEGEN_OK) return st;
  }
  moegen_args_quant_weight args = {.w = a->w, .q = a->data, .s = a->scales, .qt = a->data_t,
                                   .st = block ? a->scales_t : NULL, .amax = block ? NULL : a->amax,
                                   .n = (int)a->n, .k = (int)a->k};
  CUfunction fn;
  moegen_launch_dims d;
  moegen_status ks = kernel_of(m, MOEGEN_KERNEL_QUANT_WEIGHT, p->weight_threads, tiles_of(a->n, a->k) * a->experts, &fn, &d);
  return ks != MOEGEN_OK ? ks : moegen_launch_quant_weight(m, MOEGEN_KERNEL_QUANT_WEIGHT, fn, &d, &args, stream, op);
}

/* ---------------------------------------------------------------- rows */

moegen_status moegen_quant_rows_shape_of(const moegen_image *image, int64_t rows, int64_t cols,
                                         moegen_quant_rows_shape *shape) {
  if (!image || !shape || rows < 0 || cols <= 0 || cols % QB) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_QUANT_ROWS)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->data[0] = rows;
  shape->data[1] = cols;
  shape->scale_ld = moegen_scale_ld_of(rows);
  shape->scales[0] = cols / QB;
  shape->scales[1] = shape->scale_ld;
  return MOEGEN_OK;
}

moegen_status moegen_quant_rows(moegen_module *m, const moegen_quant_rows_args *a,
                                CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const char *op = "quant_rows";
  moegen_status st = require(m, MOEGEN_KERNEL_QUANT_ROWS, op,
                             "1x128 row quantization is fp8_block's (fp8_tensorwise: "
                             "moegen_quant_tensor)");
  if (st != MOEGEN_OK) return st;
  if (a->rows < 0 || a->rows > INT32_MAX || a->cols <= 0 || a->cols > INT32_MAX || a->cols % QB)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: [rows, cols] = [%lld, %lld] needs 0 <= rows <= INT32_MAX and cols "
                              "a positive multiple of %d <= INT32_MAX",
                              op, (long long)a->rows, (long long)a->cols, QB);
  if (!moegen_scale_ld_ok(a->scale_ld, a->rows))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: scale_ld = %lld must be >= rows (%lld), a multiple of 4 and <= "
                              "INT32_MAX",
                              op, (long long)a->scale_ld, (long long)a->rows);
  if (a->rows > (INT64_MAX >> 2) / a->cols)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: rows * cols overflows", op);
  if (a->rows == 0) return MOEGEN_OK;
  if (!a->x || !a->data || !a->scales)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                              !a->x ? "x" : !a->data ? "data" : "scales");
  if (moegen_misaligned(a->x) || moegen_misaligned(a->data) || moegen_misaligned(a->scales))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: x, data and scales must be 16-byte aligned", op);
  const moegen_quant_plan *p = &moegen_module_image(m)->quant;
  int64_t per_block = p->rows_threads / 32;
  moegen_args_quant_rows args = {.x = a->x, .q = a->data, .s = a->scales, .rows = (int)a->rows,
                                 .cols = (int)a->cols, .scale_ld = (int)a->scale_ld};
  CUfunction fn;
  moegen_launch_dims d;
  moegen_status ks = kernel_of(m, MOEGEN_KERNEL_QUANT_ROWS, p->rows_threads, (a->rows + per_block - 1) / per_block, &fn, &d);
  return ks != MOEGEN_OK ? ks : moegen_launch_quant_rows(m, MOEGEN_KERNEL_QUANT_ROWS, fn, &d, &args, stream, op);
}

/* ---------------------------------------------------------------- tensorwise */

moegen_status moegen_quant_tensor(moegen_module *m, const moegen_quant_tensor_args *a,
                                  CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const char *op = "quant_tensor";
  moegen_status st = require(m, MOEGEN_KERNEL_QUANT_TENSOR, op,
                             "tensorwise quantization is fp8_tensorwise's (fp8_block: "
                             "moegen_quant_rows)");
  if (st != MOEGEN_OK) return st;
  if (a->n < 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: n = %lld < 0", op,
                              (long long)a->n);
  if (a->format != MOEGEN_FP8_E4M3 && a->format != MOEGEN_FP8_E5M2)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: format = %d is not a moegen_fp8_format", op, (int)a->format);
  if (a->n == 0) return MOEGEN_OK;
  const char *null = !a->x ? "x" : !a->data ? "data" : !a->amax ? "amax"
                     : !a->scale_inv ? "scale_inv" : NULL;
  if (null) return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, null);
  if (moegen_misaligned(a->x) || moegen_misaligned(a->data) || moegen_misaligned(a->amax) ||
      moegen_misaligned(a->scale_inv))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: x, data, amax and scale_inv must be 16-byte aligned", op);
  st = launch_amax(m, a->x, a->amax, a->n, stream, op);
  if (st != MOEGEN_OK) return st;
  const moegen_quant_plan *p = &moegen_module_image(m)->quant;
  int64_t per_block = (int64_t)p->tensor_threads * 8, blocks = (a->n + per_block - 1) / per_block;
  if (blocks > p->max_blocks) blocks = p->max_blocks;
  moegen_args_quant_tensor args = {.x = a->x, .q = a->data, .amax = a->amax,
                                   .scale_inv = a->scale_inv, .n = a->n, .format = (int)a->format};
  CUfunction fn;
  moegen_launch_dims d;
  moegen_status ks = kernel_of(m, MOEGEN_KERNEL_QUANT_TENSOR, p->tensor_threads, blocks, &fn, &d);
  return ks != MOEGEN_OK ? ks : moegen_launch_quant_tensor(m, MOEGEN_KERNEL_QUANT_TENSOR, fn, &d, &args, stream, op);
}
