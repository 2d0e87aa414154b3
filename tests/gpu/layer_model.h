/* tests/gpu/layer_model.h -- one MoE layer config as the layer GPU tests
 * and moegen-bench describe it (routing and sizes, logits bf16), and its
 * moegen config. Needs no GPU. */
#ifndef MOEGEN_TESTS_LAYER_MODEL_H
#define MOEGEN_TESTS_LAYER_MODEL_H

#include <stdio.h>

#include "moegen/config.h"

typedef struct layer_model {
  const char *name;
  int E, K, H, F, groups, group_topk, bias, pre_softmax;
  moegen_score score;
  double scaling;
} layer_model;

/* md's moegen config, named `name` (the JIT cache key covers it). */
static inline moegen_config layer_config(const layer_model *md, const char *name) {
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.experts = md->E;
  c.topk = md->K;
  c.hidden = md->H;
  c.ffn = md->F;
  c.score = md->score;
  c.pre_softmax = md->pre_softmax;
  c.groups = md->groups;
  c.group_topk = md->group_topk;
  c.expert_bias = md->bias;
  c.scaling = md->scaling;
  c.logits_dtype = MOEGEN_DTYPE_BF16;
  return c;
}

#endif
