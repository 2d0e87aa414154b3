/* tests/gpu/router_check.h -- one router forward call's outputs, copied to
 * the host, against the CPU reference (tests/ref/router_ref.c) with the
 * SPEC.md section 6 rules. Shared by the GPU test (test_router.c) and the
 * CPU warp emulation (tests/emu). */
#ifndef MOEGEN_TESTS_ROUTER_CHECK_H
#define MOEGEN_TESTS_ROUTER_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtypes.h"
#include "moegen/runtime.h"
#include "router_ref.h"
#include "router_spec.h"

static inline size_t idx_size(moegen_index_dtype d) {
  return d == MOEGEN_INDEX_INT16 ? 2 : d == MOEGEN_INDEX_INT64 ? 8 : 4;
}

static inline int64_t read_idx(moegen_index_dtype d, const void *p, size_t i) {
  return d == MOEGEN_INDEX_INT16 ? ((const int16_t *)p)[i]
       : d == MOEGEN_INDEX_INT64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

/* The value top-k ranks expert e of a token by (SPEC 1), in double: the
 * biased score, or the logit / softmax numerator (same order). */
static inline double route_value(const spec *s, float x, float bias) {
  double v = s->score == MOEGEN_SCORE_SIGMOID        ? 1.0 / (1.0 + exp(-(double)x))
             : s->score == MOEGEN_SCORE_SQRTSOFTPLUS ? sqrt(log1p(exp((double)x)))
                                                     : (double)x;
  return s->bias ? v + bias : v;
}

/* Routing values a and b agree to fp32 rounding: within 8 ulp (the GPU's
 * expf and the CPU's differ by a few), so either order of the two is right. */
static inline int near_tie(double a, double b) {
  return fabs(a - b) <= 8 * 1.2e-7 * fmax(fabs(a), fabs(b));
}

/* Compact entry k of token t: the GPU may order two experts whose routing
 * values are a near tie either way; which experts are selected is checked by
 * the map. The weight is compared with the reference weight of the same
 * expert; an expert the reference did not select (a near tie at the K-th
 * value, see router_compare) is not compared. Returns 0 if entry (t, k) is
 * wrong. */
static inline int compact_ok(const spec *s, const float *x, const float *bias, const int32_t *rx,
                             const float *rw, const uint8_t *swapped, size_t t, int k, int64_t g,
                             float w) {
  int K = s->K, E = s->E, pos = -1;
  for (int j = 0; j < K; j++)
    if (rx[t * K + j] == g) pos = j;
  if (pos < 0) return swapped[t * E + g];
  if (pos != k) {
    double a = route_value(s, x[t * E + g], bias[g]);
    double b = route_value(s, x[t * E + rx[t * K + k]], bias[rx[t * K + k]]);
    if (!near_tie(a, b)) return 0;
  }
  return close_f32(w, rw[t * K + pos], E);
}

/* The reference's K-th routing value of token t: where the selection ends. */
static inline double kth_value(const spec *s, const float *x, const float *bias, const int32_t *rx,
                               size_t t) {
  double v = INFINITY;
  for (int k = 0; k < s->K; k++) {
    int e = rx[t * s->K + k];
    if (e >= 0 && e < s->E) v = fmin(v, route_value(s, x[t * s->E + e], bias[e]));
  }
  return v;
}

/* Host copies of one forward call's outputs. */
typedef struct router_host_outputs {
  const int32_t *counts;        /* [E] */
  const uint8_t *map;           /* [T, E]; NULL: the call wrote the counts only */
  const uint8_t *bitmap;        /* [T, ceil(E / 8)] */
  const void *idx;              /* [T, K] of idx_dtype */
  moegen_index_dtype idx_dtype;
  const float *weights;         /* [T, K] */
  const float *inter;           /* [T, E] */
  const void *probs;            /* [T, E] in the logits dtype */
  const float *cutoff;          /* [T] (quantile balancing) */
} router_host_outputs;

#define ROUTER_EXPECT(cond, ...)        \
  do {                                  \
    if (!(cond)) {                      \
      printf("  FAIL: " __VA_ARGS__);   \
      printf("\n");                     \
      bad = 1;                          \
      goto done;                        \
    }                                   \
  } while (0)

/* Compares g with the reference of x [T, E] and bias [E]: the map, bitmap
 * and selected sets exactly, but for near ties at the K-th routing value
 * (either way is right; the reference's probs, intermediate and weights are
 * not compared at the experts that went the other way); the counts exactly
 * against those selections (counts only: within the reference's counts
 * plus or minus the near ties); probs, weights, intermediate and cutoff
 * within tolerance. Prints the first wrong entry and each token where a
 * near tie went the other way; returns 1 if anything is wrong. */
static inline int router_compare(const spec *s, int T, const float *x, const float *bias,
                                 const router_host_outputs *g) {
  moegen_config c = config_of(s);
  int E = s->E, K = s->K, bad = 0;
  size_t TE = (size_t)T * E, TK = (size_t)T * K, NB = (size_t)(E + 7) / 8;
  float *rp = (float *)malloc(4 * TE + 4), *rw = (float *)malloc(4 * TK + 4);
  float *ri = (float *)malloc(4 * TE + 4), *rcut = (float *)malloc(4 * (size_t)T + 4);
  uint8_t *rm = (uint8_t *)malloc(TE + 1), *swapped = (uint8_t *)calloc(TE + 1, 1);
  int32_t *rx = (int32_t *)malloc(4 * TK + 4), rc[MOEGEN_MAX_EXPERTS], lo[MOEGEN_MAX_EXPERTS],
          hi[MOEGEN_MAX_EXPERTS];
  router_ref_fwd(&c, T, x, s->bias ? bias : NULL, rp, rm, rx, rw, ri, rc);
  for (int e = 0; e < E; e++) lo[e] = hi[e] = rc[e];
  /* Near ties at the K-th routing value may go either way (another expf
   * moves the boundary by an ulp): a token's selection may differ from the
   * reference's only at experts whose values are near ties with the K-th,
   * and one of them must differ from it (exact ties break by id on both). */
  for (int t = 0; t < T; t++) {
    size_t r0 = (size_t)t * E;
    double kth = kth_value(s, x, bias, rx, t);
    int n = 0, near = 0;
    for (int e = 0; e < E; e++) {
      if (g->map && g->map[r0 + e] == rm[r0 + e]) continue;
      double v = route_value(s, x[r0 + e], bias[e]);
      if (!g->map) { /* counts only: bounds */
        lo[e] -= near_tie(v, kth) && rm[r0 + e];
        hi[e] += near_tie(v, kth) && !rm[r0 + e];
        continue;
      }
      ROUTER_EXPECT(near_tie(v, kth), "map[%d,%d] = %d, want %d (routing value %.9g, the K-th %.9g)",
                    t, e, g->map[r0 + e], rm[r0 + e], v, kth);
      n++;
      near += v != kth;
    }
    if (n == 0) continue;
    ROUTER_EXPECT(near > 0, "token %d: the selection differs only among exact ties of the K-th "
                  "routing value (they break by id)", t);
    printf("  note: token %d: %d experts at a near tie with the K-th routing value went the other way\n",
           t, n);
    for (int e = 0; e < E; e++)
      if (g->map[r0 + e] != rm[r0 + e]) {
        swapped[r0 + e] = 1;
        rc[e] += rm[r0 + e] ? -1 : 1;
      }
  }
  for (int e = 0; e < E; e++)
    if (g->map) ROUTER_EXPECT(g->counts[e] == rc[e], "counts[%d] = %d, want %d", e, g->counts[e], rc[e]);
    else ROUTER_EXPECT(g->counts[e] >= lo[e] && g->counts[e] <= hi[e], "counts[%d] = %d, want %d..%d",
                       e, g->counts[e], lo[e], hi[e]);
  if (g->map) {
    for (size_t i = 0; i < TE; i++) {
      int want = swapped[i] ? !rm[i] : rm[i];
      ROUTER_EXPECT(g->map[i] == want, "map[%zu,%zu] = %d, want %d", i / E, i % E, g->map[i], want);
      int bit = (g->bitmap[i / E * NB + i % E / 8] >> (i % E % 8)) & 1;
      ROUTER_EXPECT(bit == want, "bitmap bit [%zu,%zu] = %d, want %d", i / E, i % E, bit, want);
      if (swapped[i]) continue;
      float p = read_dt(s->dt, g->probs, i);
      ROUTER_EXPECT(close_dt(s->dt, p, rp[i], E), "probs[%zu,%zu] = %.9g, want %.9g", i / E,
                    i % E, p, rp[i]);
      ROUTER_EXPECT(close_f32(g->inter[i], ri[i], E), "intermediate[%zu,%zu] = %.9g, want %.9g",
                    i / E, i % E, g->inter[i], ri[i]);
    }
    for (size_t i = 0; i < TK; i++) {
      int64_t e = read_idx(g->idx_dtype, g->idx, i);
      ROUTER_EXPECT(e >= 0 && e < E && g->map[i / K * E + e] &&
                        compact_ok(s, x, bias, rx, rw, swapped, i / K, (int)(i % K), e, g->weights[i]),
                    "topk_indices[%zu,%zu] (%zu-byte) = %lld, weight %.9g; want %d, weight %.9g",
                    i / K, i % K, idx_size(g->idx_dtype), (long long)e, g->weights[i], rx[i], rw[i]);
    }
    if (s->qb) {
      router_ref_qb_cutoff(&c, T, x, bias, rcut);
      for (int t = 0; t < T; t++)
        ROUTER_EXPECT(close_f32(g->cutoff[t], rcut[t], E), "qb_cutoff[%d] = %.9g, want %.9g", t,
                      g->cutoff[t], rcut[t]);
    }
  }
done:
  free(rp); free(rw); free(ri); free(rcut); free(rm); free(swapped); free(rx);
  return bad;
}

#endif
