/* CPU reference of the router backward (SPEC.md section 1, Backward). */
#include "router_bwd_ref.h"

#include <math.h>

#define EPSILON 1e-20

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

/* One token of sigmoid / sqrtsoftplus: g' (normalized if K > 1), then the
 * score's derivative. */
static void score_row(const moegen_config *c, const double *g, const float *y, const uint8_t *m,
                      float *dx) {
  int E = c->experts;
  double S = 0, P = 0;
  for (int e = 0; e < E; e++) {
    double s = c->score == MOEGEN_SCORE_SIGMOID ? y[e] : sqrt(softplus(y[e]));
    if (m[e]) {
      S += s;
      P += g[e] * s;
    }
  }
  for (int e = 0; e < E; e++) {
    double s = c->score == MOEGEN_SCORE_SIGMOID ? y[e] : sqrt(softplus(y[e]));
    double gn = !m[e] ? 0 : c->topk > 1 ? g[e] / (S + EPSILON) - P / ((S + EPSILON) * (S + EPSILON)) : g[e];
    if (c->score == MOEGEN_SCORE_SIGMOID) dx[e] = (float)(gn * s * (1 - s));
    else dx[e] = (float)(gn * (y[e] > 20.0f ? 1.0 : sigmoid(y[e])) / (2 * s + EPSILON));
  }
}

/* One token of softmax (pre: y is the softmax over all E; post: y is the
 * softmax over the selected, -inf elsewhere). */
static void softmax_row(const moegen_config *c, const double *g, const float *y, const uint8_t *m,
                        float *dx) {
  int E = c->experts;
  double D = 0;
  for (int e = 0; e < E; e++)
    if (m[e]) D += g[e] * y[e];
  for (int e = 0; e < E; e++) {
    if (c->pre_softmax) dx[e] = (float)(y[e] * ((m[e] ? g[e] : 0) - D));
    else dx[e] = m[e] ? (float)(y[e] * (g[e] - D)) : 0.0f;
  }
}

void router_ref_bwd(const moegen_config *c, int T, const float *grad, const float *inter,
                    const uint8_t *map, float *dx) {
  int E = c->experts;
  double g[MOEGEN_MAX_EXPERTS];
  for (int t = 0; t < T; t++) {
    size_t o = (size_t)t * E;
    for (int e = 0; e < E; e++) g[e] = (double)grad[o + e] * c->scaling;
    if (c->score == MOEGEN_SCORE_SOFTMAX) softmax_row(c, g, inter + o, map + o, dx + o);
    else score_row(c, g, inter + o, map + o, dx + o);
  }
}

void router_ref_state(const moegen_config *c, int T, const float *logits, const uint8_t *map,
                      float *inter) {
  int E = c->experts;
  for (int t = 0; t < T; t++) {
    const float *x = logits + (size_t)t * E;
    const uint8_t *m = map + (size_t)t * E;
    float *y = inter + (size_t)t * E;
    if (c->score != MOEGEN_SCORE_SOFTMAX) {
      for (int e = 0; e < E; e++) y[e] = c->score == MOEGEN_SCORE_SIGMOID ? (float)sigmoid(x[e]) : x[e];
      continue;
    }
    double top = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
      if (c->pre_softmax || m[e]) top = fmax(top, x[e]);
    for (int e = 0; e < E; e++)
      if (c->pre_softmax || m[e]) sum += exp(x[e] - top);
    for (int e = 0; e < E; e++)
      y[e] = c->pre_softmax || m[e] ? (float)(exp(x[e] - top) / sum) : -INFINITY;
  }
}
