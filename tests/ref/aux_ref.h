/* tests/ref/aux_ref.h -- CPU references of the aux-loss helpers, written
 * straight from SPEC.md section 2. */
#ifndef MOEGEN_REF_AUX_REF_H
#define MOEGEN_REF_AUX_REF_H

#include <stdint.h>

#include "moegen/config.h"

/* Scores (2a) of T tokens for cfg's score function and K. logits [T,E]
 * (already rounded to the logits dtype). Outputs: scores [T,E], map [T,E]
 * 0/1 (top-K of the scores, value descending then id ascending), inter
 * [T,E]. Any may be NULL except scores. */
void aux_ref_scores_fwd(const moegen_config *cfg, int T, const float *logits, float *scores,
                        uint8_t *map, float *inter);

/* Backward of the scores: grad [T,E] fp32, inter [T,E] -> dx [T,E]. */
void aux_ref_scores_bwd(const moegen_config *cfg, int T, const float *grad, const float *inter,
                        float *dx);

/* Cc = ((E*coeff)/topk)/N/N in fp32, as the host path computes it. */
float aux_ref_loss_const(int num_experts, int topk, float coeff, int64_t N);

/* aux = Cc * sum_c tpe[c] * sum_r probs[r,c] (sums in double); probs [R,C], tpe [C]. */
double aux_ref_loss_fwd(int64_t R, int64_t C, const float *probs, const float *tpe, float cc);

/* grad_probs[r,c] = Cc * tpe[c] * grad_aux (fp32, in that order), [R,C]. */
void aux_ref_loss_bwd(int64_t R, int64_t C, float cc, const float *tpe, float grad_aux,
                      float *grad_probs);

#endif
