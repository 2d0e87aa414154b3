/* CPU reference of the fused router forward (SPEC.md section 1). */
#include "router_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Indices of the n largest of v[0..m) (value descending, index ascending). */
static void top_n(const float *v, int m, int n, int *out) {
  char *taken = calloc((size_t)m, 1);
  for (int k = 0; k < n; k++) {
    int best = -1;
    for (int i = 0; i < m; i++) {
      if (taken[i]) continue;
      if (best < 0 || v[i] > v[best]) best = i;
    }
    taken[best] = 1;
    out[k] = best;
  }
  free(taken);
}

/* Routing values r (step 2) and the intermediate. */
static void scores(const moegen_config *c, const float *x, const float *bias, float *r, float *s,
                   float *inter) {
  int E = c->experts;
  if (c->score == MOEGEN_SCORE_SOFTMAX && c->pre_softmax) {
    float m = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) m = fmaxf(m, x[e]);
    for (int e = 0; e < E; e++) sum += s[e] = expf(x[e] - m);
    for (int e = 0; e < E; e++) r[e] = inter[e] = s[e] /= sum;
  } else if (c->score == MOEGEN_SCORE_SOFTMAX) {
    for (int e = 0; e < E; e++) {
      r[e] = s[e] = x[e];
      inter[e] = -INFINITY;
    }
  } else {
    for (int e = 0; e < E; e++) {
      if (c->score == MOEGEN_SCORE_SIGMOID) inter[e] = s[e] = sigmoidf(x[e]);
      else {
        inter[e] = x[e];
        s[e] = sqrtf(softplusf(x[e]));
      }
      r[e] = bias ? s[e] + bias[e] : s[e];
    }
  }
}

/* Group-limited routing (step 3): r outside the best groups becomes -inf. */
static void mask_groups(const moegen_config *c, float *r) {
  int E = c->experts, NG = c->groups, G = E / NG, kg = c->topk / c->group_topk;
  float *gs = malloc(sizeof(float) * (size_t)NG);
  int *pick = malloc(sizeof(int) * (size_t)(G > NG ? G : NG));
  for (int g = 0; g < NG; g++) {
    top_n(r + g * G, G, kg, pick);
    gs[g] = 0;
    for (int k = 0; k < kg; k++) gs[g] += r[g * G + pick[k]];
  }
  top_n(gs, NG, c->group_topk, pick);
  for (int g = 0; g < NG; g++) {
    int keep = 0;
    for (int k = 0; k < c->group_topk; k++) keep |= pick[k] == g;
    if (!keep)
      for (int e = g * G; e < (g + 1) * G; e++) r[e] = -INFINITY;
  }
  free(gs);
  free(pick);
}

void router_ref_fwd(const moegen_config *c, int T, const float *logits, const float *bias,
                    float *probs, uint8_t *map, int32_t *idx, float *weights, float *inter,
                    int32_t *counts) {
  int E = c->experts, K = c->topk;
  float *r = malloc(sizeof(float) * (size_t)E), *s = malloc(sizeof(float) * (size_t)E);
  float *in = malloc(sizeof(float) * (size_t)E), p[MOEGEN_MAX_TOPK];
  int sel[MOEGEN_MAX_TOPK];
  int grouped = c->groups > 1 || c->group_topk > 1;
  if (counts) memset(counts, 0, sizeof(int32_t) * (size_t)E);
  for (int t = 0; t < T; t++) {
    const float *x = logits + (size_t)t * E;
    scores(c, x, bias, r, s, in);
    if (grouped) mask_groups(c, r);
    top_n(r, E, K, sel);
    if (c->score == MOEGEN_SCORE_SOFTMAX && !c->pre_softmax) {
      float m = s[sel[0]], sum = 0;
      for (int k = 0; k < K; k++) sum += p[k] = expf(s[sel[k]] - m);
      for (int k = 0; k < K; k++) in[sel[k]] = p[k] /= sum;
    } else if (c->score == MOEGEN_SCORE_SOFTMAX) {
      for (int k = 0; k < K; k++) p[k] = s[sel[k]];
    } else {
      float sum = 0;
      for (int k = 0; k < K; k++) sum += s[sel[k]];
      for (int k = 0; k < K; k++) p[k] = K > 1 ? s[sel[k]] / (sum + 1e-20f) : s[sel[k]];
    }
    if (probs) memset(probs + (size_t)t * E, 0, sizeof(float) * (size_t)E);
    if (map) memset(map + (size_t)t * E, 0, (size_t)E);
    for (int k = 0; k < K; k++) {
      float v = (float)c->scaling * p[k];
      if (probs) probs[(size_t)t * E + sel[k]] = v;
      if (map) map[(size_t)t * E + sel[k]] = 1;
      if (idx) idx[(size_t)t * K + k] = sel[k];
      if (weights) weights[(size_t)t * K + k] = v;
      if (counts) counts[sel[k]]++;
    }
    if (inter) memcpy(inter + (size_t)t * E, in, sizeof(float) * (size_t)E);
  }
  free(r);
  free(s);
  free(in);
}

void router_ref_qb_cutoff(const moegen_config *c, int T, const float *logits, const float *bias,
                          float *cutoff) {
  int E = c->experts, K = c->topk;
  float *r = malloc(sizeof(float) * (size_t)E), *s = malloc(sizeof(float) * (size_t)E);
  float *in = malloc(sizeof(float) * (size_t)E);
  int sel[MOEGEN_MAX_TOPK + 1];
  for (int t = 0; t < T; t++) {
    scores(c, logits + (size_t)t * E, bias, r, s, in);
    top_n(r, E, K + 1, sel);
    cutoff[t] = r[sel[K]];
  }
  free(r);
  free(s);
  free(in);
}

void router_ref_qb_hist(int E, int T, int bins, float lower, float upper, const float *s,
                        const float *cutoff, int32_t *hist) {
  volatile float scale = (float)bins / (upper - lower); /* volatile: fp32 steps, no contraction */
  for (int t = 0; t < T; t++) {
    for (int e = 0; e < E; e++) {
      volatile float d = cutoff[t] - s[(size_t)t * E + e];
      volatile float u = d - lower;
      volatile float v = u * scale;
      float f = floorf(v);
      int bin = f < 0.f ? 0 : f >= (float)(bins - 1) ? bins - 1 : (int)f;
      hist[(size_t)e * bins + bin]++;
    }
  }
}
