/* tests/ref/permute_ref.h -- CPU reference of the token permutation family,
 * written straight from SPEC.md section 4 and the row layout of
 * moegen/runtime.h (moegen_permute_fwd). Rows are float arrays [rows, H]
 * holding values already rounded to the element type; the GPU's combine
 * runs the same fp32 fma order, so its results match bit for bit. */
#ifndef MOEGEN_REF_PERMUTE_REF_H
#define MOEGEN_REF_PERMUTE_REF_H

#include <stdint.h>

/* The routes of a permutation problem: exactly one of idx [T,K] int32 and
 * map [T,E] bytemap (slot k = k-th selected expert, ascending id). */
typedef struct permute_ref_routing {
  int T, E, K;
  const int32_t *idx;
  const uint8_t *map;
} permute_ref_routing;

/* The layout: counts[E] (kept routes), offsets[E+1] (padded), row_map[T,K]
 * (-1 = no row), *dropped; returns the host row bound R = min(T*K +
 * E*(align-1), E*roundup(capacity, align) if capacity > 0). */
int permute_ref_layout(const permute_ref_routing *r, int align, int capacity, int32_t *counts,
                       int32_t *offsets, int32_t *row_map, int32_t *dropped);

/* The expert of slot k of token t (-1 if none). */
int permute_ref_slot_expert(const permute_ref_routing *r, int t, int k);

/* rows [R, H] = x[t] at row_map rows, 0 elsewhere; pprobs [R] (or NULL) =
 * probs ([T,K] for idx, [T,E] for map) at the rows, 0 elsewhere. */
void permute_ref_rows(const permute_ref_routing *r, int H, int R, const int32_t *row_map,
                      const float *x, const float *probs, float *rows, float *pprobs);

/* out [T, H] = sum_k w rows[row_map] (k ascending, fmaf in fp32, w = probs
 * [T,K] or 1). */
void permute_ref_combine(int T, int K, int H, const float *rows, const int32_t *row_map,
                         const float *probs, float *out);

/* Unpermute backward: grows [R, H] (0 off the routes) = w gout[t] (fp32
 * product); gprobs [T,K] (or NULL) = dot(gout[t], rows[row]) in double, 0
 * without a row; gscale [T,K] (or NULL) = sum |gout * row| (error scale). */
void permute_ref_unpermute_bwd(int T, int K, int H, int R, const float *gout,
                               const int32_t *row_map, const float *probs, const float *rows,
                               float *grows, float *gprobs, float *gscale);

/* Chunk sort: dst [N] of every input row (SPEC 4f). */
void permute_ref_sort_chunks(int N, int S, const int32_t *split, const int32_t *order,
                             int32_t *dst);

#endif
