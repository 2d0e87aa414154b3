/* tests/unit/template_config_stub.c -- TEMPORARY stand-ins for gen/config.c's
 * name functions, for building test_template by hand before config.c exists.
 * Not used by CMake; delete once gen/config.c is in the tree. */
#include "moegen/config.h"

const char *moegen_config_key_name(moegen_field f) {
  static const char *const names[MOEGEN_F_COUNT] = {
      "name", "experts", "topk", "hidden", "ffn", "score", "pre_softmax", "groups",
      "group_topk", "expert_bias", "scaling", "logits_dtype", "dtype", "shared_experts",
      "aux_loss_coeff"};
  return names[f];
}
const char *moegen_score_name(moegen_score s) {
  static const char *const names[] = {"sigmoid", "softmax", "sqrtsoftplus"};
  return names[s];
}
const char *moegen_dtype_name(moegen_dtype d) {
  static const char *const names[] = {"fp32", "bf16", "fp16"};
  return names[d];
}
