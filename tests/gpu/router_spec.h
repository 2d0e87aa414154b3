/* tests/gpu/router_spec.h -- one router configuration of the router forward
 * and backward GPU tests, and its moegen config. */
#ifndef MOEGEN_TESTS_ROUTER_SPEC_H
#define MOEGEN_TESTS_ROUTER_SPEC_H

#include <stdio.h>

#include "moegen/config.h"

typedef struct spec {
  const char *what;
  int E, K, groups, group_topk, bias, pre;
  moegen_score score;
  double scaling;
  moegen_dtype dt;
  int qb; /* quantile balancing (forward test: a histogram of QB_BINS bins) */
} spec;

static inline moegen_config config_of(const spec *s) {
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "test");
  c.experts = s->E;
  c.topk = s->K;
  c.hidden = 256;
  c.ffn = 256;
  c.score = s->score;
  c.pre_softmax = s->pre;
  c.groups = s->groups;
  c.group_topk = s->group_topk;
  c.expert_bias = s->bias;
  c.scaling = s->scaling;
  c.logits_dtype = s->dt;
  c.quantile_balancing = s->qb;
  return c;
}

#endif
