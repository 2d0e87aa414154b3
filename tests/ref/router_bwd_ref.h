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

#endif
