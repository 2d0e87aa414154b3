/* tests/ref/router_bwd_ref.h -- CPU reference of the router backward,
 * written straight from SPEC.md section 1 (Backward). */
#ifndef MOEGEN_REF_ROUTER_BWD_REF_H
#define MOEGEN_REF_ROUTER_BWD_REF_H

#include <stdint.h>

#include "moegen/config.h"

/* grad_logits of T tokens. grad [T,E] fp32: the grad of probs (already
 * rounded to the probs dtype by the caller; entries of unselected experts
 * are ignored); inter [T,E]: the forward's intermediate; map [T,E] 0/1: the
 * selection. Writes dx [T,E] fp32 (before rounding to the logits dtype).
 * Sums run in double. */
void router_ref_bwd(const moegen_config *cfg, int T, const float *grad, const float *inter,
                    const uint8_t *map, float *dx);

/* The state router_bwd = recompute rebuilds from the logits: inter [T,E] as
 * the forward would have saved it (SPEC.md 1: sigmoid s(x), sqrtsoftplus x,
 * pre-softmax the softmax over all E, post-softmax the softmax over the
 * experts map selects and -inf elsewhere), from logits [T,E] fp32 (already
 * rounded to the logits dtype) and the selection map [T,E] 0/1. Sums in
 * double. */
void router_ref_state(const moegen_config *cfg, int T, const float *logits, const uint8_t *map,
                      float *inter);

#endif
