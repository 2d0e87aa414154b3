/* tests/unit/test_router_check.c -- the router output check itself
 * (tests/gpu/router_check.h), on hand-made outputs: it must pass the
 * reference's own outputs and a near tie at the K-th routing value taken
 * the other way, and fail a selection away from the boundary, a swap among
 * exact ties (they break by id), and counts off by one, with every output
 * and with counts only. */
#include <string.h>

#include "router_check.h"

enum { T = 3, E = 64, K = 4, NB = E / 8 };

static const spec sig = {"sigmoid E=64 K=4", E, K, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0,
                         MOEGEN_DTYPE_FP32, 0};

/* One call's outputs, as the reference makes them; edits make them wrong. */
typedef struct outs {
  float x[T * E], bias[E], probs[T * E], w[T * K], inter[T * E];
  uint8_t map[T * E], bitmap[T * NB];
  int32_t idx[T * K], counts[E];
} outs;

static void reference(outs *o) {
  moegen_config c = config_of(&sig);
  router_ref_fwd(&c, T, o->x, NULL, o->probs, o->map, o->idx, o->w, o->inter, o->counts);
  memset(o->bitmap, 0, sizeof o->bitmap);
  for (int i = 0; i < T * E; i++)
    if (o->map[i]) o->bitmap[i / E * NB + i % E / 8] |= (uint8_t)(1u << (i % 8));
}

/* Token t selects expert `in` instead of `out`, in every output. */
static void swap_pick(outs *o, int t, int out, int in) {
  o->map[t * E + out] = 0;
  o->map[t * E + in] = 1;
  o->bitmap[t * NB + out / 8] &= (uint8_t)~(1u << (out % 8));
  o->bitmap[t * NB + in / 8] |= (uint8_t)(1u << (in % 8));
  for (int k = 0; k < K; k++)
    if (o->idx[t * K + k] == out) o->idx[t * K + k] = in;
  o->counts[out]--;
  o->counts[in]++;
}

static int check(const outs *o, int counts_only) {
  router_host_outputs g = {.counts = o->counts};
  if (!counts_only)
    g = (router_host_outputs){.counts = o->counts, .map = o->map, .bitmap = o->bitmap,
                              .idx = o->idx, .idx_dtype = MOEGEN_INDEX_INT32, .weights = o->w,
                              .inter = o->inter, .probs = o->probs};
  return router_compare(&sig, T, o->x, o->bias, &g);
}

static int failures;

static void expect(const char *what, int bad, int want_bad) {
  printf("%s %s (%s)\n", bad == want_bad ? "ok  " : "FAIL", what, want_bad ? "rejected" : "accepted");
  failures += bad != want_bad;
}

int main(void) {
  static outs base;
  memset(&base, 0, sizeof base);
  for (int i = 0; i < T * E; i++) base.x[i] = -1.0f - 0.01f * (float)(i % E);
  base.x[3] = -1.03f; /* token 0: expert 3 is the K-th (experts 0..3 are selected) */
  base.x[10] = nextafterf(-1.03f, -2.0f); /* one ulp below it: a near tie */
  base.x[2 * E + 7] = base.x[2 * E + 3]; /* token 2: expert 7 ties expert 3 exactly */
  reference(&base);
  for (int counts_only = 0; counts_only < 2; counts_only++) {
    const char *mode = counts_only ? "counts only:" : "every output:";
    outs o = base;
    printf("%s\n", mode);
    expect("  the reference's outputs", check(&o, counts_only), 0);
    o = base;
    swap_pick(&o, 0, 3, 10);
    expect("  a near tie at the K-th value the other way", check(&o, counts_only), 0);
    o = base;
    swap_pick(&o, 1, 3, 20);
    expect("  a pick far below the K-th value", check(&o, counts_only), 1);
    o = base;
    o.counts[5]++;
    expect("  a count off by one", check(&o, counts_only), 1);
    if (!counts_only) { /* the counts alone cannot tell which of two equal experts */
      o = base;
      swap_pick(&o, 2, 3, 7);
      expect("  an exact tie broken against the id order", check(&o, counts_only), 1);
    }
  }
  printf("%s\n", failures ? "router check test FAILED" : "router check test passed");
  return failures != 0;
}
