/* tests/ref/layer_ref.c -- see layer_ref.h. */
#include "layer_ref.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "router_bwd_ref.h"
#include "router_ref.h"

/* fp32 -> bf16 -> fp32, round to nearest even (finite inputs). */
static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* One route's forward: h = W1_e x (2F), a = silu(g) * u (F, unscaled). */
static void route_fwd(const moegen_config *c, const layer_ref_io *io, int t, int e, double *h,
                      double *a) {
  const int H = c->hidden, F = c->ffn;
  for (int j = 0; j < 2 * F; j++) {
    double s = 0;
    for (int i = 0; i < H; i++) s += (double)io->w1[((size_t)e * 2 * F + j) * H + i] * io->x[(size_t)t * H + i];
    h[j] = s;
  }
  for (int f = 0; f < F; f++) a[f] = silu(h[f]) * h[F + f];
}

/* The routing of every token: idx, weights [T, K], inter [T, E], map [T, E]. */
typedef struct routing {
  int32_t *idx;
  float *w, *inter;
  uint8_t *map;
} routing;

static routing route_all(const moegen_config *c, const layer_ref_io *io) {
  size_t TK = (size_t)io->T * c->topk, TE = (size_t)io->T * c->experts;
  routing r = {malloc(4 * TK + 4), malloc(4 * TK + 4), malloc(4 * TE + 4), malloc(TE + 1)};
  router_ref_fwd(c, io->T, io->logits, io->bias, NULL, r.map, r.idx, r.w, r.inter, NULL);
  return r;
}

static void routing_free(routing *r) {
  free(r->idx);
  free(r->w);
  free(r->inter);
  free(r->map);
}

void layer_ref_fwd(const moegen_config *c, const layer_ref_io *io, float *y) {
  const int H = c->hidden, F = c->ffn, K = c->topk;
  routing r = route_all(c, io);
  double *h = malloc(sizeof(double) * 2 * F), *a = malloc(sizeof(double) * F);
  float *act = malloc(sizeof(float) * F);
  double *out = malloc(sizeof(double) * H);
  for (int t = 0; t < io->T; t++) {
    for (int i = 0; i < H; i++) out[i] = 0;
    for (int k = 0; k < K; k++) {
      const int e = r.idx[(size_t)t * K + k];
      const float w = r.w[(size_t)t * K + k];
      route_fwd(c, io, t, e, h, a);
      for (int f = 0; f < F; f++) act[f] = bf16_round((float)(a[f] * w));
      for (int i = 0; i < H; i++) {
        double s = 0;
        for (int f = 0; f < F; f++) s += (double)io->w2[((size_t)e * H + i) * F + f] * act[f];
        out[i] += bf16_round((float)s);
      }
    }
    for (int i = 0; i < H; i++) y[(size_t)t * H + i] = (float)out[i];
  }
  free(h);
  free(a);
  free(act);
  free(out);
  routing_free(&r);
}

void layer_ref_bwd(const moegen_config *c, const layer_ref_io *io, float *dx, float *dlogits,
                   float *dw1, float *dw2) {
  const int H = c->hidden, F = c->ffn, K = c->topk, E = c->experts, T = io->T;
  routing r = route_all(c, io);
  double *h = malloc(sizeof(double) * 2 * F), *a = malloc(sizeof(double) * F);
  double *dh = malloc(sizeof(double) * 2 * F);
  double *dxt = malloc(sizeof(double) * H);
  double *gdw1 = calloc((size_t)E * 2 * F * H, sizeof(double));
  double *gdw2 = calloc((size_t)E * H * F, sizeof(double));
  float *grad = calloc((size_t)T * E + 1, sizeof(float));
  for (int t = 0; t < T; t++) {
    const float *dy = io->dy + (size_t)t * H;
    for (int i = 0; i < H; i++) dxt[i] = 0;
    for (int k = 0; k < K; k++) {
      const int e = r.idx[(size_t)t * K + k];
      const double w = r.w[(size_t)t * K + k];
      route_fwd(c, io, t, e, h, a);
      double dp = 0;
      for (int f = 0; f < F; f++) {
        double s = 0;
        for (int i = 0; i < H; i++) s += (double)dy[i] * io->w2[((size_t)e * H + i) * F + f];
        const double act = bf16_round((float)(a[f] * w)); /* what GEMM2 read */
        for (int i = 0; i < H; i++) gdw2[((size_t)e * H + i) * F + f] += dy[i] * act;
        /* the backward reads the pre-activation as saved: bf16 */
        const double g = bf16_round((float)h[f]), u = bf16_round((float)h[F + f]);
        const double sg = 1.0 / (1.0 + exp(-g));
        dp += s * silu(g) * u;
        dh[f] = bf16_round((float)(s * w * u * sg * (1.0 + g * (1.0 - sg))));
        dh[F + f] = bf16_round((float)(s * w * silu(g)));
      }
      grad[(size_t)t * E + e] = (float)dp;
      for (int j = 0; j < 2 * F; j++)
        for (int i = 0; i < H; i++) {
          gdw1[((size_t)e * 2 * F + j) * H + i] += dh[j] * io->x[(size_t)t * H + i];
          dxt[i] += dh[j] * io->w1[((size_t)e * 2 * F + j) * H + i];
        }
    }
    for (int i = 0; i < H; i++) dx[(size_t)t * H + i] = (float)dxt[i];
  }
  for (size_t i = 0; i < (size_t)E * 2 * F * H; i++) dw1[i] = (float)gdw1[i];
  for (size_t i = 0; i < (size_t)E * H * F; i++) dw2[i] = (float)gdw2[i];
  router_ref_bwd(c, T, grad, r.inter, r.map, dlogits);
  free(h);
  free(a);
  free(dh);
  free(dxt);
  free(gdw1);
  free(gdw2);
  free(grad);
  routing_free(&r);
}
