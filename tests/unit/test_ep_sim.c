/* tests/unit/test_ep_sim.c -- the expert-parallel bookkeeping
 * (runtime/ep_plan.h) in a CPU simulation of R ranks over host buffers.
 *
 * Each simulated rank routes and permutes its own tokens (CPU references),
 * tells every rank its chunk sizes (the counts all-to-all), sends each rank
 * the slice of its experts (the all-to-all of rows, here a memcpy at the
 * offsets ep_plan.h gives both sides), regroups what it received by local
 * expert (the chunk sort), runs its experts' grouped GEMMs and SwiGLU (CPU
 * references), sends the results home (the reverse sort and all-to-all;
 * CAPACITY: staging and the home compaction) and combines them (unpermute).
 *
 * Checks, for R in {2, 4, 8}, both modes:
 *  - EXACT equals, bit for bit, the same pipeline run as one rank on the
 *    whole batch (every row's math is independent of where it sits), and
 *    that one-rank run matches the layer reference (layer_ref_fwd) within
 *    SPEC.md 6's bf16 tolerances;
 *  - CAPACITY (cap routes per source rank and expert) equals, bit for bit,
 *    the sum of each token's routes that an independent count keeps
 *    (earliest tokens of the rank first), i.e. dropped routes contribute
 *    zero; the dropped count and the received counts (<= cap) are right;
 *  - the transport's round trip (dispatch, then combine with no expert math
 *    in between: the data movement of the backward, whose dy rows go the
 *    dispatch way and dx rows the combine way) returns every kept row to
 *    its place bit for bit;
 *  - the sizes both ends of every send compute agree (NCCL needs that);
 *  - unused rows (capacity tails, NaN-poisoned) never reach an output.
 * Odd cases: a rank with T = 0, an expert no token picks, every token on
 * one rank, every route to one rank's experts; and E % R != 0 is refused
 * with a message naming both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_plan.h"
#include "gemm_ref.h"
#include "half.h"
#include "layer_ref.h"
#include "permute_ref.h"
#include "router_ref.h"

enum { E = 24, K = 3, H = 32, F = 16, MAXR = 8 };

static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      printf("  FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      failures++;                                 \
    }                                             \
  } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* [0, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(rng_state >> 40) / (float)(1u << 24);
}
static float bf16r(float f) { return bf16_to_f32(f32_to_bf16(f)); }
static float *bf16_random(size_t n, float scale) {
  float *p = malloc(sizeof(float) * n + 4);
  for (size_t i = 0; i < n; i++) p[i] = bf16r(scale * (2.f * uniform() - 1.f));
  return p;
}
static float *nan_buffer(size_t n) { /* n + 1 NaNs (never an empty allocation) */
  float *p = malloc(sizeof(float) * (n + 1));
  for (size_t i = 0; i <= n; i++) p[i] = NAN;
  return p;
}

/* The problem: tokens of all ranks concatenated, weights of all experts. */
typedef struct problem {
  moegen_config cfg;
  int T;               /* total tokens */
  float *x, *logits;   /* [T, H], [T, E] */
  float *w1, *w2;      /* [E, 2F, H], [E, H, F] */
} problem;

/* One simulated rank. */
typedef struct rank_state {
  int T, t0;                       /* its tokens: global [t0, t0 + T) */
  int32_t *idx, counts[E], offsets[E + 1], *row_map, dropped;
  float *w;                        /* [T, K] route weights */
  int64_t rows;                    /* permuted buffer rows (CAPACITY: >= E * cap) */
  float *prows, *pprobs;           /* [rows, H], [rows] */
  int32_t recv_counts[E];          /* [R, El] chunk sizes received */
  int32_t split[MAXR * (E + 1)], sorted[MAXR * (E + 1)], local_offsets[E + 1];
  int64_t recv_first[MAXR + 1];
  float *recv, *recv_probs;        /* [N, H], [N] */
  float *yrows;                    /* [rows, H] results back home, permuted layout */
} rank_state;

/* A rank's local experts [first, first + El) on rows grouped by local
 * expert (offs [El + 1]): out = bf16(W2 bf16(silu(g) u * prob)), (g, u) =
 * W1 x, the layer's math (GEMM1's SwiGLU epilogue scales by the route
 * weight). Rows past offs[El] are left as they are. */
static void local_experts(const problem *p, int first, int El, const int32_t *offs,
                          const float *in, const float *probs, float *out) {
  int32_t lcounts[E];
  for (int j = 0; j < El; j++) lcounts[j] = offs[j + 1] - offs[j];
  const size_t n = (size_t)offs[El];
  float *h = malloc(sizeof(float) * n * 2 * F + 4), *act = malloc(sizeof(float) * n * F + 4);
  gemm_ref_fwd(El, 2 * F, H, lcounts, in, p->w1 + (size_t)first * 2 * F * H, h);
  for (size_t r = 0; r < n; r++)
    for (int f = 0; f < F; f++) {
      double g = h[r * 2 * F + f], u = h[r * 2 * F + F + f];
      act[r * F + f] = bf16r((float)(g / (1.0 + exp(-g)) * u * probs[r]));
    }
  gemm_ref_fwd(El, H, F, lcounts, act, p->w2 + (size_t)first * H * F, out);
  for (size_t i = 0; i < n * H; i++) out[i] = bf16r(out[i]);
  free(h);
  free(act);
}

/* Routes and permutes rank r's tokens (capacity 0 = none). */
static void rank_permute(const problem *p, rank_state *rs, moegen_ep_mode mode, int cap) {
  const int T = rs->T;
  rs->idx = malloc(sizeof(int32_t) * T * K + 4);
  rs->w = malloc(sizeof(float) * T * K + 4);
  rs->row_map = malloc(sizeof(int32_t) * T * K + 4);
  router_ref_fwd(&p->cfg, T, p->logits + (size_t)rs->t0 * E, NULL, NULL, NULL, rs->idx, rs->w,
                 NULL, NULL);
  permute_ref_routing ro = {T, E, K, rs->idx, NULL};
  int R = permute_ref_layout(&ro, 1, mode == MOEGEN_EP_CAPACITY ? cap : 0, rs->counts,
                             rs->offsets, rs->row_map, &rs->dropped);
  /* CAPACITY sends pair_rows from each slice start: the buffer holds E * cap
   * rows; the rows past the permute's own R are never written (NaN here). */
  rs->rows = mode == MOEGEN_EP_CAPACITY ? (int64_t)E * cap : R;
  rs->prows = nan_buffer((size_t)rs->rows * H);
  rs->pprobs = nan_buffer((size_t)rs->rows);
  permute_ref_rows(&ro, H, R, rs->row_map, p->x + (size_t)rs->t0 * H, rs->w, rs->prows,
                   rs->pprobs);
  rs->yrows = nan_buffer((size_t)rs->rows * H);
}

static void rank_free(rank_state *rs) {
  free(rs->idx);
  free(rs->w);
  free(rs->row_map);
  free(rs->prows);
  free(rs->pprobs);
  free(rs->recv);
  free(rs->recv_probs);
  free(rs->yrows);
}

/* The whole EP forward over R ranks with T_of[r] tokens each. y [T, H] out;
 * *dropped = routes dropped over all ranks; roundtrip: skip the expert
 * math (out = in) and check that every kept row comes home unchanged. */
static void run_ep(const problem *p, int R, const int *T_of, moegen_ep_mode mode, int cap,
                   int roundtrip, float *y, int *dropped) {
  char why[256];
  const int El = moegen_ep_local_experts(E, R, why, sizeof why);
  CHECK(El > 0, "%s", why);
  const int64_t pair_rows = moegen_ep_pair_rows(El, cap, 1);
  rank_state rs[MAXR];
  memset(rs, 0, sizeof rs);
  for (int r = 0, t0 = 0; r < R; t0 += T_of[r], r++) {
    rs[r].T = T_of[r];
    rs[r].t0 = t0;
    rank_permute(p, &rs[r], mode, cap);
  }
  /* The counts all-to-all: rank d receives from s the chunk sizes of d's experts. */
  for (int d = 0; d < R; d++)
    for (int s = 0; s < R; s++)
      for (int j = 0; j < El; j++) {
        const int e = d * El + j;
        CHECK(moegen_ep_owner(e, El) == d, "owner of expert %d", e);
        rs[d].recv_counts[s * El + j] = moegen_ep_chunk_size(rs[s].offsets, e);
        CHECK(mode != MOEGEN_EP_CAPACITY || rs[d].recv_counts[s * El + j] <= cap,
              "R=%d rank %d gets %d rows of expert %d from %d (capacity %d)", R, d,
              rs[d].recv_counts[s * El + j], e, s, cap);
      }
  for (int d = 0; d < R; d++) {
    rank_state *q = &rs[d];
    moegen_ep_recv_layout(mode, R, El, pair_rows, q->recv_counts, q->split, q->sorted,
                          q->recv_first, q->local_offsets);
    const int64_t N = q->recv_first[R];
    CHECK(N == moegen_ep_recv_rows(mode, q->recv_counts, R, El, pair_rows), "recv rows");
    int64_t sum = 0;
    for (int c = 0; c < R * (El + 1); c++) sum += q->split[c];
    CHECK(sum == N, "R=%d rank %d: chunks hold %lld rows, the buffer %lld", R, d,
          (long long)sum, (long long)N);
    q->recv = nan_buffer((size_t)N * H);
    q->recv_probs = nan_buffer((size_t)N);
  }
  /* Dispatch: every (s, d) pair; both ends agree on the size. */
  for (int s = 0; s < R; s++)
    for (int d = 0; d < R; d++) {
      const int64_t n = moegen_ep_send_rows(mode, rs[s].offsets, El, d, pair_rows);
      const int64_t at = moegen_ep_recv_first(mode, rs[d].recv_counts, El, s, pair_rows);
      const int64_t expect = rs[d].recv_first[s + 1] - rs[d].recv_first[s];
      CHECK(n == expect, "R=%d %d -> %d: sends %lld rows, receiver expects %lld", R, s, d,
            (long long)n, (long long)expect);
      const int32_t from = moegen_ep_send_first(rs[s].offsets, El, d);
      CHECK(from + n <= rs[s].rows, "R=%d %d -> %d: send reads past the buffer", R, s, d);
      memcpy(rs[d].recv + at * H, rs[s].prows + (size_t)from * H, sizeof(float) * n * H);
      memcpy(rs[d].recv_probs + at, rs[s].pprobs + from, sizeof(float) * n);
    }
  /* Each rank: regroup, expert math, back to source order. */
  float *back[MAXR];
  for (int d = 0; d < R; d++) {
    rank_state *q = &rs[d];
    const int64_t N = q->recv_first[R];
    const int S = R * (El + 1);
    int32_t *dst = malloc(sizeof(int32_t) * N + 4);
    permute_ref_sort_chunks((int)N, S, q->split, q->sorted, dst);
    float *g = nan_buffer((size_t)N * H), *gp = nan_buffer((size_t)N), *out = nan_buffer((size_t)N * H);
    for (int64_t i = 0; i < N; i++) {
      memcpy(g + (size_t)dst[i] * H, q->recv + i * H, sizeof(float) * H);
      gp[dst[i]] = q->recv_probs[i];
    }
    if (roundtrip)
      memcpy(out, g, sizeof(float) * (size_t)q->local_offsets[El] * H);
    else
      local_experts(p, d * El, El, q->local_offsets, g, gp, out);
    back[d] = nan_buffer((size_t)N * H);
    for (int64_t i = 0; i < N; i++) /* the backward sort: back[p] = out[dst(p)] */
      memcpy(back[d] + i * H, out + (size_t)dst[i] * H, sizeof(float) * H);
    free(dst);
    free(g);
    free(gp);
    free(out);
  }
  /* Combine: each rank's slot s goes back to rank s. */
  for (int s = 0; s < R; s++) {
    rank_state *q = &rs[s];
    float *stage = mode == MOEGEN_EP_CAPACITY ? nan_buffer((size_t)R * pair_rows * H) : NULL;
    for (int d = 0; d < R; d++) {
      const int64_t at = moegen_ep_recv_first(mode, rs[d].recv_counts, El, s, pair_rows);
      const int64_t n = moegen_ep_send_rows(mode, q->offsets, El, d, pair_rows);
      float *to = stage ? stage + (size_t)d * pair_rows * H
                        : q->yrows + (size_t)moegen_ep_send_first(q->offsets, El, d) * H;
      memcpy(to, back[d] + at * H, sizeof(float) * n * H);
    }
    if (stage) { /* the home compaction */
      int32_t split[2 * MAXR], sorted[2 * MAXR];
      for (int c = 0; c < 2 * R; c++) {
        split[c] = moegen_ep_home_split(q->offsets, El, pair_rows, c);
        sorted[c] = moegen_ep_home_sorted_index(R, c);
      }
      const int N = (int)(R * pair_rows);
      int32_t *dst = malloc(sizeof(int32_t) * N + 4);
      permute_ref_sort_chunks(N, 2 * R, split, sorted, dst);
      for (int i = 0; i < N; i++)
        memcpy(q->yrows + (size_t)dst[i] * H, stage + (size_t)i * H, sizeof(float) * H);
      free(dst);
      free(stage);
    }
    if (roundtrip)
      for (int t = 0; t < q->T * K; t++) {
        const int row = q->row_map[t];
        if (row >= 0)
          CHECK(!memcmp(q->yrows + (size_t)row * H, q->prows + (size_t)row * H,
                        sizeof(float) * H),
                "R=%d rank %d: route row %d did not come home unchanged", R, s, row);
      }
    permute_ref_combine(q->T, K, H, q->yrows, q->row_map, NULL, y + (size_t)q->t0 * H);
  }
  *dropped = 0;
  for (int r = 0; r < R; r++) {
    *dropped += rs[r].dropped;
    free(back[r]);
    rank_free(&rs[r]);
  }
}

/* A problem of T tokens; shape: 0 random, 1 expert 5 never picked, 2 every
 * route to the last `K` experts (one rank's for El >= K). */
static problem make_problem(int T, int shape) {
  problem p;
  moegen_config_defaults(&p.cfg);
  p.cfg.experts = E;
  p.cfg.topk = K;
  p.cfg.hidden = H;
  p.cfg.ffn = F;
  p.cfg.logits_dtype = MOEGEN_DTYPE_BF16;
  p.T = T;
  p.x = bf16_random((size_t)T * H, 1.f);
  p.logits = bf16_random((size_t)T * E, 2.f);
  for (int t = 0; t < T; t++) {
    if (shape == 1) p.logits[(size_t)t * E + 5] = -30.f;
    if (shape == 2)
      for (int e = E - K; e < E; e++) p.logits[(size_t)t * E + e] += 20.f;
  }
  p.w1 = bf16_random((size_t)E * 2 * F * H, 0.25f);
  p.w2 = bf16_random((size_t)E * H * F, 0.25f);
  return p;
}

static void problem_free(problem *p) {
  free(p->x);
  free(p->logits);
  free(p->w1);
  free(p->w2);
}

/* SPEC.md 6 (bf16 layer outputs): relative Frobenius < 1e-2, max|d|/max|ref| < 2e-2. */
static int close_to(const float *got, const float *ref, size_t n) {
  double d2 = 0, r2 = 0, dmax = 0, rmax = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(got[i])) return 0;
    double d = fabs((double)got[i] - ref[i]);
    d2 += d * d;
    r2 += (double)ref[i] * ref[i];
    dmax = fmax(dmax, d);
    rmax = fmax(rmax, fabs(ref[i]));
  }
  return sqrt(d2 / (r2 > 0 ? r2 : 1)) < 1e-2 && dmax / (rmax > 0 ? rmax : 1) < 2e-2;
}

/* The kept-routes reference of CAPACITY: per rank and expert the first cap
 * routes in token order are kept (counted here, independently of the
 * permute), each route's row from the one-rank EXACT run (yrows_one of its
 * row_map_one); the same fp32 fma order as the combine. */
static void capacity_expect(const problem *p, int R, const int *T_of, int cap, float *y,
                            int *dropped) {
  const size_t TK = (size_t)p->T * K;
  int32_t *idx = malloc(sizeof(int32_t) * TK + 4);
  float *w = malloc(sizeof(float) * TK + 4);
  int32_t *row_map = malloc(sizeof(int32_t) * TK + 4), counts[E], offsets[E + 1], nd;
  router_ref_fwd(&p->cfg, p->T, p->logits, NULL, NULL, NULL, idx, w, NULL, NULL);
  permute_ref_routing ro = {p->T, E, K, idx, NULL};
  const int Rall = permute_ref_layout(&ro, 1, 0, counts, offsets, row_map, &nd);
  float *rows = malloc(sizeof(float) * (size_t)Rall * H + 4), *pp = malloc(sizeof(float) * Rall + 4);
  permute_ref_rows(&ro, H, Rall, row_map, p->x, w, rows, pp);
  float *yr = nan_buffer((size_t)Rall * H);
  local_experts(p, 0, E, offsets, rows, pp, yr);
  *dropped = 0;
  for (int r = 0, t0 = 0; r < R; t0 += T_of[r], r++) {
    int seen[E] = {0};
    for (int t = t0; t < t0 + T_of[r]; t++)
      for (int k = 0; k < K; k++)
        if (seen[idx[(size_t)t * K + k]]++ >= cap) {
          row_map[(size_t)t * K + k] = -1;
          ++*dropped;
        }
  }
  permute_ref_combine(p->T, K, H, yr, row_map, NULL, y);
  free(idx);
  free(w);
  free(row_map);
  free(rows);
  free(pp);
  free(yr);
}

/* One token split over R ranks: every mode and check. */
static void run_case(const char *name, int R, const int *T_of, int shape, int cap) {
  int T = 0;
  for (int r = 0; r < R; r++) T += T_of[r];
  problem p = make_problem(T, shape);
  const size_t n = (size_t)T * H;
  float *y = nan_buffer(n), *one = nan_buffer(n), *ref = nan_buffer(n), *cy = nan_buffer(n);
  int dropped, dropped_one, expect_dropped;
  const int before = failures;
  if (shape == 1) { /* the odd case holds: no route to expert 5 */
    int32_t counts[E];
    int32_t *idx = malloc(sizeof(int32_t) * T * K + 4);
    router_ref_fwd(&p.cfg, T, p.logits, NULL, NULL, NULL, idx, NULL, NULL, counts);
    CHECK(counts[5] == 0, "%s: expert 5 has %d routes", name, counts[5]);
    free(idx);
  }
  /* EXACT against one rank on the whole batch, and that against the layer reference. */
  run_ep(&p, R, T_of, MOEGEN_EP_EXACT, 0, 0, y, &dropped);
  run_ep(&p, 1, &T, MOEGEN_EP_EXACT, 0, 0, one, &dropped_one);
  CHECK(!memcmp(y, one, sizeof(float) * n), "%s R=%d EXACT differs from one rank", name, R);
  CHECK(dropped == 0 && dropped_one == 0, "%s: EXACT dropped %d", name, dropped);
  layer_ref_io io = {T, p.x, p.logits, NULL, p.w1, p.w2, NULL};
  layer_ref_fwd(&p.cfg, &io, ref);
  CHECK(close_to(one, ref, n), "%s: one rank vs layer_ref_fwd beyond SPEC 6 tolerance", name);
  /* The transport's round trip, both modes. */
  run_ep(&p, R, T_of, MOEGEN_EP_EXACT, 0, 1, y, &dropped);
  run_ep(&p, R, T_of, MOEGEN_EP_CAPACITY, cap, 1, y, &dropped);
  /* CAPACITY against the kept-routes reference. */
  run_ep(&p, R, T_of, MOEGEN_EP_CAPACITY, cap, 0, y, &dropped);
  capacity_expect(&p, R, T_of, cap, cy, &expect_dropped);
  CHECK(!memcmp(y, cy, sizeof(float) * n), "%s R=%d CAPACITY %d differs from the kept routes",
        name, R, cap);
  CHECK(dropped == expect_dropped, "%s R=%d CAPACITY %d: dropped %d, expected %d", name, R, cap,
        dropped, expect_dropped);
  printf("%s %s: R=%d T=%d capacity %d dropped %d of %d routes\n",
         failures == before ? "ok  " : "FAIL", name, R, T, cap, dropped, T * K);
  free(y);
  free(one);
  free(ref);
  free(cy);
  problem_free(&p);
}

/* The sort index regroups local-expert-major and is a permutation. */
static void check_index_form(void) {
  for (int R = 1; R <= MAXR; R++)
    for (int El = 1; El <= 4; El++) {
      const int S = R * (El + 1);
      int seen[MAXR * 5] = {0};
      for (int i = 0; i < S; i++) seen[moegen_ep_sorted_index(R, El, i)]++;
      for (int c = 0; c < S; c++) CHECK(seen[c] == 1, "sorted_index R=%d El=%d chunk %d", R, El, c);
      for (int j = 0; j < El; j++)
        for (int s = 0; s < R; s++)
          CHECK(moegen_ep_sorted_index(R, El, j * R + s) == s * (El + 1) + j, "order");
    }
  char why[256] = "";
  CHECK(moegen_ep_local_experts(E, 5, why, sizeof why) == -1 && strstr(why, "experts = 24") &&
            strstr(why, "ranks = 5"),
        "E %% R != 0 not refused right: '%s'", why);
  CHECK(moegen_ep_local_experts(E, 0, why, sizeof why) == -1, "R = 0 accepted");
  CHECK(moegen_ep_local_experts(E, 8, why, sizeof why) == 3, "24 / 8");
}

int main(void) {
  check_index_form();
  const int ranks[] = {2, 4, 8};
  for (int i = 0; i < 3; i++) {
    const int R = ranks[i];
    int T_of[MAXR], all_one[MAXR] = {0};
    for (int r = 0; r < R; r++) T_of[r] = 5 + (int)(uniform() * 20);
    T_of[R / 2] = 0; /* a rank with no tokens */
    run_case("random", R, T_of, 0, 2);
    run_case("expert 5 empty", R, T_of, 1, 1);
    run_case("all routes to the last rank", R, T_of, 2, 3);
    all_one[R - 1] = 40;
    run_case("all tokens on one rank", R, all_one, 0, 2);
  }
  if (failures) printf("%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
