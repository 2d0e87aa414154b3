/* tests/ref/permute_ref.c -- CPU reference of the permutation family. */
#include "permute_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int permute_ref_slot_expert(const permute_ref_routing *r, int t, int k) {
  if (r->idx) {
    int e = r->idx[(size_t)t * r->K + k];
    return e >= 0 && e < r->E ? e : -1;
  }
  int n = 0;
  for (int e = 0; e < r->E; e++)
    if (r->map[(size_t)t * r->E + e] && n++ == k) return e;
  return -1;
}

int permute_ref_layout(const permute_ref_routing *r, int align, int capacity, int32_t *counts,
                       int32_t *offsets, int32_t *row_map, int32_t *dropped) {
  int E = r->E, K = r->K;
  int *total = calloc((size_t)E, sizeof *total), *rank = calloc((size_t)E, sizeof *rank);
  for (int t = 0; t < r->T; t++)
    for (int k = 0; k < K; k++) {
      int e = permute_ref_slot_expert(r, t, k);
      if (e >= 0) total[e]++;
    }
  int drop = 0;
  offsets[0] = 0;
  for (int e = 0; e < E; e++) {
    counts[e] = capacity > 0 && total[e] > capacity ? capacity : total[e];
    drop += total[e] - counts[e];
    offsets[e + 1] = offsets[e] + (counts[e] + align - 1) / align * align;
  }
  *dropped = drop;
  /* dst(t,e) = off[e] + #{t' < t routed to e}: walk tokens in order */
  for (int t = 0; t < r->T; t++)
    for (int k = 0; k < K; k++) {
      int e = permute_ref_slot_expert(r, t, k), row = -1;
      if (e >= 0) {
        if (rank[e] < counts[e]) row = offsets[e] + rank[e];
        rank[e]++;
      }
      row_map[(size_t)t * K + k] = row;
    }
  free(total);
  free(rank);
  long long R = (long long)r->T * K + (long long)E * (align - 1);
  if (capacity > 0) {
    long long cap = ((long long)capacity + align - 1) / align * align * E;
    if (cap < R) R = cap;
  }
  return (int)R;
}

void permute_ref_rows(const permute_ref_routing *r, int H, int R, const int32_t *row_map,
                      const float *x, const float *probs, float *rows, float *pprobs) {
  memset(rows, 0, sizeof(float) * (size_t)R * H);
  if (pprobs) memset(pprobs, 0, sizeof(float) * (size_t)R);
  for (int t = 0; t < r->T; t++)
    for (int k = 0; k < r->K; k++) {
      int row = row_map[(size_t)t * r->K + k];
      if (row < 0) continue;
      memcpy(rows + (size_t)row * H, x + (size_t)t * H, sizeof(float) * (size_t)H);
      if (pprobs) {
        int e = permute_ref_slot_expert(r, t, k);
        pprobs[row] = r->idx ? probs[(size_t)t * r->K + k] : probs[(size_t)t * r->E + e];
      }
    }
}

void permute_ref_combine(int T, int K, int H, const float *rows, const int32_t *row_map,
                         const float *probs, float *out) {
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      float acc = 0.f;
      for (int k = 0; k < K; k++) {
        int row = row_map[(size_t)t * K + k];
        if (row < 0) continue;
        float w = probs ? probs[(size_t)t * K + k] : 1.f;
        acc = fmaf(w, rows[(size_t)row * H + h], acc);
      }
      out[(size_t)t * H + h] = acc;
    }
}

void permute_ref_unpermute_bwd(int T, int K, int H, int R, const float *gout,
                               const int32_t *row_map, const float *probs, const float *rows,
                               float *grows, float *gprobs, float *gscale) {
  memset(grows, 0, sizeof(float) * (size_t)R * H);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int row = row_map[(size_t)t * K + k];
      double dot = 0, scale = 0;
      if (row >= 0) {
        float w = probs ? probs[(size_t)t * K + k] : 1.f;
        for (int h = 0; h < H; h++) {
          float g = gout[(size_t)t * H + h];
          grows[(size_t)row * H + h] = probs ? w * g : g;
          if (rows) {
            double p = (double)g * rows[(size_t)row * H + h];
            dot += p;
            scale += fabs(p);
          }
        }
      }
      if (gprobs) gprobs[(size_t)t * K + k] = (float)dot;
      if (gscale) gscale[(size_t)t * K + k] = (float)scale;
    }
}

void permute_ref_sort_chunks(int N, int S, const int32_t *split, const int32_t *order,
                             int32_t *dst) {
  int *src0 = calloc((size_t)S + 1, sizeof *src0), *dst0 = calloc((size_t)S + 1, sizeof *dst0);
  for (int c = 0; c < S; c++) src0[c + 1] = src0[c] + split[c];
  int at = 0;
  for (int i = 0; i < S; i++) {
    dst0[order[i]] = at;
    at += split[order[i]];
  }
  for (int p = 0; p < N; p++) dst[p] = p;
  for (int c = 0; c < S; c++)
    for (int o = 0; o < split[c]; o++) dst[src0[c] + o] = dst0[c] + o;
  free(src0);
  free(dst0);
}
