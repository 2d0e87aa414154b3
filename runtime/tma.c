/* runtime/tma.c -- GEMM operands: TMA descriptors or pointers (see tma.h). */
#include "tma.h"

/* Encodes a tensor map of bf16 (elem = 2) or e4m3 (elem = 1) elements with
 * the 128-byte swizzle. */
static moegen_status encode(moegen_module *m, CUtensorMap *map, const void *base, unsigned elem,
                            unsigned rank, const unsigned long long *dims,
                            const unsigned long long *strides, const unsigned *box,
                            const char *what) {
  static const unsigned ones[3] = {1, 1, 1};
  CUresult r = moegen_module_driver(m)->cuTensorMapEncodeTiled(
      map, elem == 1 ? MOEGEN_CU_TENSOR_MAP_DATA_TYPE_UINT8 : MOEGEN_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      rank, (void *)base, dims, strides, box, ones, MOEGEN_CU_TENSOR_MAP_INTERLEAVE_NONE,
      MOEGEN_CU_TENSOR_MAP_SWIZZLE_128B, MOEGEN_CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      MOEGEN_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r ? moegen_module_cuda_fail(m, r, what) : MOEGEN_OK;
}

static int portable(moegen_module *m) { return moegen_module_image(m)->gemm.portable; }

static moegen_status operand_2d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                unsigned elem, long long rows, long long cols, unsigned box_rows,
                                unsigned box_cols, const char *what) {
  op->ptr = base;
  if (portable(m)) return MOEGEN_OK;
  const unsigned long long dims[2] = {(unsigned long long)cols, (unsigned long long)rows};
  const unsigned long long strides[1] = {elem * (unsigned long long)cols};
  const unsigned box[2] = {box_cols, box_rows};
  return encode(m, &op->map, base, elem, 2, dims, strides, box, what);
}

static moegen_status operand_3d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                unsigned elem, long long E, long long rows, long long cols,
                                unsigned box_rows, unsigned box_cols, const char *what) {
  op->ptr = base;
  if (portable(m)) return MOEGEN_OK;
  const unsigned long long dims[3] = {(unsigned long long)cols, (unsigned long long)rows,
                                      (unsigned long long)E};
  const unsigned long long strides[2] = {elem * (unsigned long long)cols,
                                         elem * (unsigned long long)(cols * rows)};
  const unsigned box[3] = {box_cols, box_rows, 1};
  return encode(m, &op->map, base, elem, 3, dims, strides, box, what);
}

moegen_status moegen_gemm_operand_2d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                     long long rows, long long cols, unsigned box_rows,
                                     unsigned box_cols, const char *what) {
  return operand_2d(m, op, base, 2, rows, cols, box_rows, box_cols, what);
}

moegen_status moegen_gemm_operand_3d(moegen_module *m, moegen_gemm_operand *op, const void *base,
                                     long long E, long long rows, long long cols,
                                     unsigned box_rows, unsigned box_cols, const char *what) {
  return operand_3d(m, op, base, 2, E, rows, cols, box_rows, box_cols, what);
}

moegen_status moegen_gemm_operand_e4m3_2d(moegen_module *m, moegen_gemm_operand *op,
                                          const void *base, long long rows, long long cols,
                                          unsigned box_rows, unsigned box_cols, const char *what) {
  return operand_2d(m, op, base, 1, rows, cols, box_rows, box_cols, what);
}

moegen_status moegen_gemm_operand_e4m3_3d(moegen_module *m, moegen_gemm_operand *op,
                                          const void *base, long long E, long long rows,
                                          long long cols, unsigned box_rows, unsigned box_cols,
                                          const char *what) {
  return operand_3d(m, op, base, 1, E, rows, cols, box_rows, box_cols, what);
}
