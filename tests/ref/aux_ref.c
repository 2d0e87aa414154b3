/* CPU references of the aux-loss helpers (SPEC.md section 2). */
#include "aux_ref.h"

#include <math.h>
#include <string.h>

#define EPSILON 1e-20

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

/* Marks the K largest of v[0..E) in map (value descending, index ascending). */
static void top_k_map(const float *v, int E, int K, uint8_t *map) {
  memset(map, 0, (size_t)E);
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!map[e] && (best < 0 || v[e] > v[best])) best = e;
    map[best] = 1;
  }
}

void aux_ref_scores_fwd(const moegen_config *c, int T, const float *logits, float *scores,
                        uint8_t *map, float *inter) {
  int E = c->experts;
  for (int t = 0; t < T; t++) {
    const float *x = logits + (size_t)t * E;
    float *sc = scores + (size_t)t * E;
    double sum = 0;
    if (c->score == MOEGEN_SCORE_SOFTMAX) {
      double mx = -INFINITY;
      for (int e = 0; e < E; e++) mx = fmax(mx, x[e]);
      for (int e = 0; e < E; e++) sum += exp(x[e] - mx);
      for (int e = 0; e < E; e++) sc[e] = (float)(exp(x[e] - mx) / sum);
      if (inter) memcpy(inter + (size_t)t * E, sc, sizeof(float) * (size_t)E);
    } else {
      for (int e = 0; e < E; e++) {
        double s = c->score == MOEGEN_SCORE_SIGMOID ? sigmoid(x[e]) : sqrt(softplus(x[e]));
        sum += s;
        if (inter) inter[(size_t)t * E + e] = c->score == MOEGEN_SCORE_SIGMOID ? (float)s : x[e];
      }
      for (int e = 0; e < E; e++) {
        double s = c->score == MOEGEN_SCORE_SIGMOID ? sigmoid(x[e]) : sqrt(softplus(x[e]));
        sc[e] = (float)(s / (sum + EPSILON));
      }
    }
    if (map) top_k_map(sc, E, c->topk, map + (size_t)t * E);
  }
}

void aux_ref_scores_bwd(const moegen_config *c, int T, const float *grad, const float *inter,
                        float *dx) {
  int E = c->experts;
  for (int t = 0; t < T; t++) {
    const float *g = grad + (size_t)t * E, *y = inter + (size_t)t * E;
    float *d = dx + (size_t)t * E;
    if (c->score == MOEGEN_SCORE_SOFTMAX) {
      double D = 0;
      for (int e = 0; e < E; e++) D += (double)g[e] * y[e];
      for (int e = 0; e < E; e++) d[e] = (float)(y[e] * (g[e] - D));
      continue;
    }
    double S = 0, P = 0;
    for (int e = 0; e < E; e++) {
      double s = c->score == MOEGEN_SCORE_SIGMOID ? y[e] : sqrt(softplus(y[e]));
      S += s;
      P += g[e] * s;
    }
    for (int e = 0; e < E; e++) {
      double s = c->score == MOEGEN_SCORE_SIGMOID ? y[e] : sqrt(softplus(y[e]));
      double gn = g[e] / (S + EPSILON) - P / ((S + EPSILON) * (S + EPSILON));
      if (c->score == MOEGEN_SCORE_SIGMOID) d[e] = (float)(gn * s * (1 - s));
      else d[e] = (float)(gn * (y[e] > 20.0f ? 1.0 : sigmoid(y[e])) / (2 * s + EPSILON));
    }
  }
}

float aux_ref_loss_const(int num_experts, int topk, float coeff, int64_t N) {
  float cc = ((float)num_experts * coeff) / (float)topk;
  cc = cc / (float)N;
  return cc / (float)N;
}

double aux_ref_loss_fwd(int64_t R, int64_t C, const float *probs, const float *tpe, float cc) {
  double total = 0;
  for (int64_t c = 0; c < C; c++) {
    double col = 0;
    for (int64_t r = 0; r < R; r++) col += probs[r * C + c];
    total += tpe[c] * col;
  }
  return cc * total;
}

void aux_ref_loss_bwd(int64_t R, int64_t C, float cc, const float *tpe, float grad_aux,
                      float *grad_probs) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++) grad_probs[r * C + c] = cc * tpe[c] * grad_aux;
}
