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

/* Quantile balancing (SPEC 3; cfg->quantile_balancing): cutoff [T] = the
 * (K+1)-th largest sigmoid(x) + bias of each token (the K routes are the ones
 * router_ref_fwd returns: ties at the cutoff drop the largest id). */
void router_ref_qb_cutoff(const moegen_config *cfg, int T, const float *logits, const float *bias,
                          float *cutoff);

/* hist [E, bins] += one count per (t, e) at bin floor((cutoff[t] - s[t,e] -
 * lower) * (bins / (upper - lower))) in fp32, clamped to [0, bins-1]; s [T,E]
 * the unbiased sigmoid scores. */
void router_ref_qb_hist(int E, int T, int bins, float lower, float upper, const float *s,
                        const float *cutoff, int32_t *hist);

#endif
