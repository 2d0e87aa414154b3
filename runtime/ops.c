/* runtime/ops.c -- the argument checks every op shares (ops.h). */
#include <limits.h>

#include "ops.h"

/* Why a module may lack the kernels of unit u. */
static const char *why_absent(moegen_unit u) {
  switch (u) {
  case MOEGEN_UNIT_PERMUTE: return "they need hidden % 8 == 0";
  case MOEGEN_UNIT_GEMM:
  case MOEGEN_UNIT_GEMM_TRAIN: return "they need sm_80 or later and hidden, ffn multiples of 8";
  case MOEGEN_UNIT_QUANT: return "they need recipe = fp8_tensorwise or fp8_block";
  default: return "its config does not call for them";
  }
}

moegen_status moegen_require_kernel(moegen_module *m, moegen_kernel_id id, const char *op) {
  const moegen_image *img = moegen_module_image(m);
  if (moegen_has_kernel(img, id)) return MOEGEN_OK;
  moegen_unit u = moegen_kernels[id].unit;
  return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED, "%s: module %s (%s) has no %s kernels (%s)",
                            op, img->name, img->arch, moegen_unit_name(u), why_absent(u));
}

moegen_status moegen_check_tokens(moegen_module *m, const char *op, int64_t T, int64_t per_token,
                                  const char *per_token_name) {
  if (T < 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: num_tokens = %lld < 0", op,
                              (long long)T);
  if (T > INT32_MAX / per_token)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: num_tokens * %s = %lld * %lld exceeds INT32_MAX", op,
                              per_token_name, (long long)T, (long long)per_token);
  return MOEGEN_OK;
}
