/* tests/ref/router_ref.h -- CPU reference of the fused router forward,
 * written straight from SPEC.md section 1 (sort-based, no GPU tricks). */
#ifndef MOEGEN_REF_ROUTER_REF_H
#define MOEGEN_REF_ROUTER_REF_H

#include <stdint.h>

#include "moegen/config.h"

/* Routes T tokens. logits [T,E] fp32 (already rounded to the logits dtype
 * by the caller); bias [E] or NULL. Outputs (any may be NULL):
 * probs [T,E] fp32 (before rounding to the logits dtype), map [T,E] 0/1,
 * idx [T,K] (value-descending), weights [T,K], inter [T,E], counts [E]. */
void router_ref_fwd(const moegen_config *cfg, int T, const float *logits, const float *bias,
                    float *probs, uint8_t *map, int32_t *idx, float *weights, float *inter,
                    int32_t *counts);

#endif
