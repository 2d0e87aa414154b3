/* tests/ref/layer_ref.h -- CPU reference of the MoE layer (moegen_layer_fwd
 * / _bwd), composed from the router references and the SPEC.md formulas:
 * y[t] = sum_k w[t,k] * W2_e (silu(g) * u), (g, u) = halves of W1_e x[t]. */
#ifndef MOEGEN_REF_LAYER_REF_H
#define MOEGEN_REF_LAYER_REF_H

#include "moegen/config.h"

/* The layer's tensors (fp32 holding bf16 values where the GPU has bf16). */
typedef struct layer_ref_io {
  int T;
  const float *x;      /* [T, H] */
  const float *logits; /* [T, E] (rounded to the logits dtype) */
  const float *bias;   /* [E] or NULL */
  const float *w1;     /* [E, 2F, H] */
  const float *w2;     /* [E, H, F] */
  const float *dy;     /* [T, H] (backward only) */
} layer_ref_io;

/* Forward: y [T, H]. The route-scaled activation and each route's GEMM2
 * output are rounded to bf16 where the GPU rounds them; sums in double. */
void layer_ref_fwd(const moegen_config *cfg, const layer_ref_io *io, float *y);

/* Backward: dx [T, H], dlogits [T, E], dw1 [E, 2F, H], dw2 [E, H, F]. */
void layer_ref_bwd(const moegen_config *cfg, const layer_ref_io *io, float *dx, float *dlogits,
                   float *dw1, float *dw2);

#endif
