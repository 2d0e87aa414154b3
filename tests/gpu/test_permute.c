/* GPU test: the permutation family (moegen_permute_fwd / _bwd,
 * moegen_unpermute_fwd / _bwd, moegen_sort_chunks) against the CPU
 * reference (tests/ref/permute_ref.c): E in {7, 16, 128, 256}, K in {1, 2,
 * 5, 8}, H in {8, 1280, 4096, 7168} (a sample of the cross product), index
 * and bytemap routing (with tokens of fewer routes and out-of-range ids),
 * padding to 16 / 128, capacity drops, the router's counts as input, T = 0
 * and 1, fp32 / bf16 / fp16 rows; two permutes at once on two streams; a
 * captured graph replayed with changed routing; argument checks. Outputs
 * are poisoned first. The permute is a copy: rows must be bit-exact; the
 * combines run the reference's fp32 fma order (checked to SPEC tolerances).
 * Exit 77 (skipped) without a device. */
#include "check.h"
#include "dtypes.h"
#include "gpu.h"
#include "moegen/moegen.h"
#include "permute_ref.h"

/* One permutation problem on the host, with its reference layout. */
typedef struct problem {
  int T, E, K, H, R, align, capacity, use_map, use_counts;
  moegen_dtype dt;
  int32_t *idx;   /* [T,K] */
  uint8_t *map;   /* [T,E] */
  float *probs;   /* [T,K] (idx) or [T,E] (map) */
  float *mprobs;  /* [T,K] merging probs */
  void *x;        /* [T,H] raw dt elements */
  int32_t *counts, *offsets, *row_map, dropped, *hist; /* reference; hist: routes per expert */
} problem;

/* Device buffers of one problem. */
typedef struct dev {
  void *x, *rows, *out, *gout, *grows, *gx;
  int32_t *idx, *hist, *row_map, *offsets, *counts, *dropped;
  uint8_t *map;
  float *probs, *mprobs, *pprobs, *gpp, *gprobs, *gmprobs;
  void *ws;
  size_t ws_bytes;
} dev;

static size_t esz(const problem *p) { return dt_size(p->dt); }
static size_t row_bytes(const problem *p) { return (size_t)p->H * esz(p); }

/* Random routes: K distinct experts per token; with holes some tokens get
 * fewer (index slots -1 or >= E), bytemap bytes any nonzero value. */
static void make_routes(problem *p, int holes) {
  int *perm = malloc(sizeof(int) * (size_t)p->E);
  for (int e = 0; e < p->E; e++) perm[e] = e;
  memset(p->map, 0, (size_t)p->T * p->E + 1);
  for (int t = 0; t < p->T; t++) {
    int n = holes && rng_u64() % 4 == 0 ? (int)(rng_u64() % (uint64_t)(p->K + 1)) : p->K;
    for (int k = 0; k < p->K; k++) {
      int j = k + (int)(rng_u64() % (uint64_t)(p->E - k)), tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
      int e = k < n ? perm[k] : (rng_u64() & 1 ? -1 : p->E + 3);
      p->idx[(size_t)t * p->K + k] = e;
      if (k < n) p->map[(size_t)t * p->E + e] = (uint8_t)(1 + rng_u64() % 255);
    }
  }
  free(perm);
}

static void reference(problem *p) {
  permute_ref_routing r = {p->T, p->E, p->K, p->use_map ? NULL : p->idx, p->use_map ? p->map : NULL};
  p->R = permute_ref_layout(&r, p->align, p->capacity, p->counts, p->offsets, p->row_map, &p->dropped);
  memset(p->hist, 0, 4 * (size_t)p->E);
  for (int t = 0; t < p->T; t++)
    for (int k = 0; k < p->K; k++) {
      int e = permute_ref_slot_expert(&r, t, k);
      if (e >= 0) p->hist[e]++;
    }
}

static problem make_problem(int E, int K, int H, moegen_dtype dt, int T, int use_map, int align,
                            int capacity, int holes) {
  problem p = {.T = T, .E = E, .K = K, .H = H, .align = align, .capacity = capacity,
               .use_map = use_map, .dt = dt};
  size_t TK = (size_t)T * K, TE = (size_t)T * E;
  p.idx = malloc(4 * TK + 4);
  p.map = malloc(TE + 1);
  p.probs = malloc(4 * (use_map ? TE : TK) + 4);
  p.mprobs = malloc(4 * TK + 4);
  p.x = malloc((size_t)T * row_bytes(&p) + 4);
  p.counts = malloc(4 * (size_t)E);
  p.offsets = malloc(4 * (size_t)E + 4);
  p.row_map = malloc(4 * TK + 4);
  p.hist = malloc(4 * (size_t)E);
  make_routes(&p, holes);
  for (size_t i = 0; i < (use_map ? TE : TK); i++) p.probs[i] = rng_uniform();
  for (size_t i = 0; i < TK; i++) p.mprobs[i] = rng_normal();
  for (size_t i = 0; i < (size_t)T * H; i++) write_dt(dt, p.x, i, rng_normal());
  reference(&p);
  return p;
}

static void free_problem(problem *p) {
  free(p->idx); free(p->map); free(p->probs); free(p->mprobs); free(p->x);
  free(p->counts); free(p->offsets); free(p->row_map); free(p->hist);
}

static dev alloc_dev(moegen_module *m, const problem *p) {
  moegen_permute_shape sh;
  if (moegen_permute_shape_of(moegen_module_image(m), p->T, p->align, p->capacity, &sh) ||
      sh.rows[0] != p->R) {
    printf("  FAIL: shape_of R = %lld, reference %d\n", (long long)sh.rows[0], p->R);
    failures++;
  }
  size_t TK = (size_t)p->T * p->K, TE = (size_t)p->T * p->E, R = (size_t)p->R, rb = row_bytes(p);
  dev d = {.x = gpu_alloc(p->T * rb), .rows = gpu_alloc(R * rb), .out = gpu_alloc(p->T * rb),
           .gout = gpu_alloc(p->T * rb), .grows = gpu_alloc(R * rb), .gx = gpu_alloc(p->T * rb),
           .idx = gpu_alloc(4 * TK), .hist = gpu_alloc(4 * (size_t)p->E),
           .row_map = gpu_alloc(4 * TK), .offsets = gpu_alloc(4 * (size_t)p->E + 4),
           .counts = gpu_alloc(4 * (size_t)p->E), .dropped = gpu_alloc(4), .map = gpu_alloc(TE),
           .probs = gpu_alloc(4 * (p->use_map ? TE : TK)), .mprobs = gpu_alloc(4 * TK),
           .pprobs = gpu_alloc(4 * R), .gpp = gpu_alloc(4 * R),
           .gprobs = gpu_alloc(4 * (p->use_map ? TE : TK)), .gmprobs = gpu_alloc(4 * TK),
           .ws = gpu_alloc(sh.workspace_bytes), .ws_bytes = sh.workspace_bytes};
  return d;
}

static void free_dev(dev *d) {
  void *all[] = {d->x, d->rows, d->out, d->gout, d->grows, d->gx, d->idx, d->hist, d->row_map,
                 d->offsets, d->counts, d->dropped, d->map, d->probs, d->mprobs, d->pprobs,
                 d->gpp, d->gprobs, d->gmprobs, d->ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu_free(all[i]);
}

/* Uploads the routing, tokens and probs; poisons the permute's outputs. */
static void upload(const problem *p, const dev *d) {
  size_t TK = (size_t)p->T * p->K, TE = (size_t)p->T * p->E;
  gpu_put(d->x, p->x, p->T * row_bytes(p));
  gpu_put(d->idx, p->idx, 4 * TK);
  gpu_put(d->map, p->map, TE);
  gpu_put(d->hist, p->hist, 4 * (size_t)p->E);
  gpu_put(d->probs, p->probs, 4 * (p->use_map ? TE : TK));
  gpu_put(d->mprobs, p->mprobs, 4 * TK);
  gpu_poison(d->rows, (size_t)p->R * row_bytes(p));
  gpu_poison(d->pprobs, 4 * (size_t)p->R);
  gpu_poison(d->row_map, 4 * TK);
  gpu_poison(d->offsets, 4 * (size_t)p->E + 4);
  gpu_poison(d->counts, 4 * (size_t)p->E);
  gpu_poison(d->dropped, 4);
  gpu_poison(d->ws, d->ws_bytes);
}

static moegen_permute_args permute_args(const problem *p, const dev *d) {
  return (moegen_permute_args){.num_tokens = p->T, .dtype = p->dt, .x = d->x,
                               .topk_indices = p->use_map ? NULL : d->idx,
                               .routing_map = p->use_map ? d->map : NULL, .probs = d->probs,
                               .expert_counts = p->use_counts ? d->hist : NULL,
                               .align = p->align, .capacity = p->capacity, .rows = d->rows,
                               .permuted_probs = d->pprobs, .row_map = d->row_map,
                               .offsets = d->offsets, .counts = d->counts,
                               .num_dropped = d->dropped, .workspace = d->ws,
                               .workspace_bytes = d->ws_bytes};
}

/* Reports a failed op; 0 if st is OK. */
static int op_failed(moegen_module *m, moegen_status st, const char *what) {
  if (st == MOEGEN_OK) return 0;
  printf("  FAIL: %s: %s: %s\n", what, moegen_status_string(st), moegen_module_last_error(m));
  failures++;
  return 1;
}

/* The source token of each row (-1: a zero row), from the reference row map. */
static int32_t *row_sources(const problem *p) {
  int32_t *src = malloc(4 * (size_t)p->R + 4);
  for (int r = 0; r < p->R; r++) src[r] = -1;
  for (size_t i = 0; i < (size_t)p->T * p->K; i++)
    if (p->row_map[i] >= 0) src[p->row_map[i]] = (int32_t)(i / p->K);
  return src;
}

/* The permute's outputs equal the reference: layout exactly, rows bit for bit. */
static void check_permute(const problem *p, const dev *d, const char *what) {
  size_t TK = (size_t)p->T * p->K, rb = row_bytes(p);
  int32_t *i32 = malloc(4 * (TK > (size_t)p->E + 1 ? TK : (size_t)p->E + 1) + 4), dropped;
  gpu_get(i32, d->offsets, 4 * ((size_t)p->E + 1));
  CHECK(!memcmp(i32, p->offsets, 4 * ((size_t)p->E + 1)), "%s: offsets differ (last %d, want %d)",
        what, i32[p->E], p->offsets[p->E]);
  gpu_get(i32, d->counts, 4 * (size_t)p->E);
  CHECK(!memcmp(i32, p->counts, 4 * (size_t)p->E), "%s: counts differ", what);
  gpu_get(&dropped, d->dropped, 4);
  CHECK(dropped == p->dropped, "%s: dropped = %d, want %d", what, dropped, p->dropped);
  gpu_get(i32, d->row_map, 4 * TK);
  for (size_t i = 0; i < TK; i++)
    CHECK(i32[i] == p->row_map[i], "%s: row_map[%zu, %zu] = %d, want %d", what, i / p->K,
          i % p->K, i32[i], p->row_map[i]);
  free(i32);
  int32_t *src = row_sources(p);
  unsigned char *rows = malloc((size_t)p->R * rb + 1), *zero = calloc(1, rb + 1);
  float *pp = malloc(4 * (size_t)p->R + 4);
  gpu_get(rows, d->rows, (size_t)p->R * rb);
  gpu_get(pp, d->pprobs, 4 * (size_t)p->R);
  int bad = 0;
  for (int r = 0; r < p->R && !bad; r++) {
    int t = src[r];
    const void *want = t >= 0 ? (const unsigned char *)p->x + (size_t)t * rb : zero;
    if (memcmp(rows + (size_t)r * rb, want, rb)) {
      printf("  FAIL: %s: row %d (token %d) is not bit-exact\n", what, r, t);
      bad = 1;
    }
    float wp = 0.f;
    if (t >= 0) {
      int k = 0;
      while (p->row_map[(size_t)t * p->K + k] != r) k++;
      permute_ref_routing rr = {p->T, p->E, p->K, p->use_map ? NULL : p->idx, p->use_map ? p->map : NULL};
      wp = p->use_map ? p->probs[(size_t)t * p->E + permute_ref_slot_expert(&rr, t, k)]
                      : p->probs[(size_t)t * p->K + k];
    }
    if (!bad && pp[r] != wp) {
      printf("  FAIL: %s: permuted_probs[%d] = %g, want %g\n", what, r, pp[r], wp);
      bad = 1;
    }
  }
  failures += bad;
  free(src); free(rows); free(zero); free(pp);
}

/* Host floats of n dt elements of a device buffer. */
static float *get_floats(moegen_dtype dt, const void *dptr, size_t n) {
  void *raw = malloc(n * dt_size(dt) + 4);
  float *f = malloc(4 * n + 4);
  gpu_get(raw, dptr, n * dt_size(dt));
  for (size_t i = 0; i < n; i++) f[i] = read_dt(dt, raw, i);
  free(raw);
  return f;
}

/* SPEC tolerances: bf16/fp16 rtol 2e-2 atol 1e-5; fp32 1e-6 (both). */
static int close_to(moegen_dtype dt, float got, float want) {
  if (isnan(got) || isnan(want)) return 0;
  double rtol = dt == MOEGEN_DTYPE_FP32 ? 1e-6 : 2e-2, atol = dt == MOEGEN_DTYPE_FP32 ? 1e-6 : 1e-5;
  return fabs((double)got - want) <= atol + rtol * fabs(want);
}

static void compare(moegen_dtype dt, const float *got, const float *want, size_t n, int round,
                    const char *what) {
  for (size_t i = 0; i < n; i++) {
    float w = round ? round_dt(dt, want[i]) : want[i];
    CHECK(close_to(dt, got[i], w), "%s[%zu] = %.9g, want %.9g", what, i, got[i], w);
  }
}

/* Unpermute forward (with and without probs), permute backward, unpermute
 * backward on the permute's outputs (already checked). */
static void check_combines(moegen_module *m, const problem *p, const dev *d) {
  size_t TH = (size_t)p->T * p->H, RH = (size_t)p->R * p->H, TK = (size_t)p->T * p->K;
  float *rows = get_floats(p->dt, d->rows, RH), *want = malloc(4 * (RH > TH ? RH : TH) + 4);
  for (int with = 0; with < 2; with++) {
    gpu_poison(d->out, TH * esz(p));
    moegen_unpermute_args u = {.num_tokens = p->T, .dtype = p->dt, .rows = d->rows,
                               .row_map = d->row_map, .merging_probs = with ? d->mprobs : NULL,
                               .out = d->out};
    if (op_failed(m, moegen_unpermute_fwd(m, &u, NULL), "unpermute_fwd")) break;
    CU(gpu_drv->cuCtxSynchronize());
    permute_ref_combine(p->T, p->K, p->H, rows, p->row_map, with ? p->mprobs : NULL, want);
    float *got = get_floats(p->dt, d->out, TH);
    compare(p->dt, got, want, TH, 1, with ? "unpermute(probs)" : "unpermute");
    free(got);
  }
  /* permute backward: grad_x = sum of the route rows' grads; probs grad gathered */
  void *graw = malloc(RH * esz(p) + 4);
  float *gpp = malloc(4 * (size_t)p->R + 4);
  for (size_t i = 0; i < RH; i++) write_dt(p->dt, graw, i, rng_normal());
  for (int r = 0; r < p->R; r++) gpp[r] = rng_normal();
  gpu_put(d->grows, graw, RH * esz(p));
  gpu_put(d->gpp, gpp, 4 * (size_t)p->R);
  gpu_poison(d->gx, TH * esz(p));
  size_t gn = p->use_map ? (size_t)p->T * p->E : TK;
  gpu_poison(d->gprobs, 4 * gn);
  moegen_permute_bwd_args pb = {.num_tokens = p->T, .dtype = p->dt, .grad_rows = d->grows,
                                .row_map = d->row_map, .grad_x = d->gx,
                                .grad_permuted_probs = d->gpp,
                                .routing_map = p->use_map ? d->map : NULL, .grad_probs = d->gprobs};
  if (!op_failed(m, moegen_permute_bwd(m, &pb, NULL), "permute_bwd")) {
    CU(gpu_drv->cuCtxSynchronize());
    float *g = malloc(4 * RH + 4);
    for (size_t i = 0; i < RH; i++) g[i] = read_dt(p->dt, graw, i);
    permute_ref_combine(p->T, p->K, p->H, g, p->row_map, NULL, want);
    float *got = get_floats(p->dt, d->gx, TH);
    compare(p->dt, got, want, TH, 1, "permute_bwd grad_x");
    free(got);
    float *gp = malloc(4 * gn + 4), *wp = calloc(gn + 1, 4);
    gpu_get(gp, d->gprobs, 4 * gn);
    permute_ref_routing rr = {p->T, p->E, p->K, p->use_map ? NULL : p->idx, p->use_map ? p->map : NULL};
    for (int t = 0; t < p->T; t++)
      for (int k = 0; k < p->K; k++) {
        int r = p->row_map[(size_t)t * p->K + k], e = permute_ref_slot_expert(&rr, t, k);
        float v = r >= 0 ? gpp[r] : 0.f;
        if (!p->use_map) wp[(size_t)t * p->K + k] = v;
        else if (e >= 0) wp[(size_t)t * p->E + e] = v;
      }
    int same = !memcmp(gp, wp, 4 * gn);
    free(g); free(gp); free(wp);
    CHECK(same, "permute_bwd grad_probs differ");
  }
  free(graw);
  free(gpp);
  /* unpermute backward, with and without merging probs */
  void *goraw = malloc(TH * esz(p) + 4);
  for (size_t i = 0; i < TH; i++) write_dt(p->dt, goraw, i, rng_normal());
  gpu_put(d->gout, goraw, TH * esz(p));
  float *gout = malloc(4 * TH + 4), *wg = malloc(4 * TK + 4), *ws = malloc(4 * TK + 4);
  for (size_t i = 0; i < TH; i++) gout[i] = read_dt(p->dt, goraw, i);
  for (int with = 0; with < 2; with++) {
    gpu_poison(d->grows, RH * esz(p));
    gpu_poison(d->gmprobs, 4 * TK);
    moegen_unpermute_bwd_args ub = {.num_tokens = p->T, .num_rows = p->R, .dtype = p->dt,
                                    .grad_out = d->gout, .row_map = d->row_map,
                                    .offsets = d->offsets, .counts = d->counts,
                                    .merging_probs = with ? d->mprobs : NULL, .rows = d->rows,
                                    .grad_rows = d->grows, .grad_probs = d->gmprobs};
    if (op_failed(m, moegen_unpermute_bwd(m, &ub, NULL), "unpermute_bwd")) break;
    CU(gpu_drv->cuCtxSynchronize());
    permute_ref_unpermute_bwd(p->T, p->K, p->H, p->R, gout, p->row_map, with ? p->mprobs : NULL,
                              rows, want, wg, ws);
    float *got = get_floats(p->dt, d->grows, RH), *gp = malloc(4 * TK + 4);
    compare(p->dt, got, want, RH, 1, with ? "unpermute_bwd grad_rows(probs)" : "unpermute_bwd grad_rows");
    gpu_get(gp, d->gmprobs, 4 * TK);
    for (size_t i = 0; i < TK; i++)
      /* fp32 partial sums in another order than the double reference:
       * the error scales with sum |g * row|, not with the (cancelling) dot */
      if (!(fabs((double)gp[i] - wg[i]) <= 1e-5 + 1e-5 * ws[i])) {
        printf("  FAIL: unpermute_bwd grad_probs[%zu] = %.9g, want %.9g\n", i, gp[i], wg[i]);
        failures++;
        break;
      }
    free(got);
    free(gp);
  }
  free(goraw); free(gout); free(wg); free(ws); free(rows); free(want);
}

static void run_case(moegen_module *m, int E, int K, int H, moegen_dtype dt, int T, int use_map,
                     int align, int capacity, int use_counts, int combines) {
  problem p = make_problem(E, K, H, dt, T, use_map, align, capacity, !use_counts);
  p.use_counts = use_counts;
  char what[160];
  snprintf(what, sizeof what, "permute T=%d %s align=%d cap=%d%s %s", T,
           use_map ? "bytemap" : "indices", align, capacity, use_counts ? " +counts" : "",
           dt == MOEGEN_DTYPE_FP32 ? "fp32" : dt == MOEGEN_DTYPE_BF16 ? "bf16" : "fp16");
  dev d = alloc_dev(m, &p);
  upload(&p, &d);
  moegen_permute_args a = permute_args(&p, &d);
  int before = failures;
  if (!op_failed(m, moegen_permute_fwd(m, &a, NULL), what)) {
    CU(gpu_drv->cuCtxSynchronize());
    check_permute(&p, &d, what);
    if (combines && failures == before) check_combines(m, &p, &d);
  }
  if (failures != before) printf("  (in %s)\n", what);
  free_dev(&d);
  free_problem(&p);
}

/* Chunk sort forward (rows, probs, row map) and backward, bit-exact. */
static void sort_case(moegen_module *m, int H, moegen_dtype dt, int N, int S) {
  int32_t *split = malloc(4 * (size_t)S + 4), *order = malloc(4 * (size_t)S + 4);
  int32_t *dst = malloc(4 * (size_t)N + 4), *got = malloc(4 * (size_t)N + 4);
  int left = N - (int)(rng_u64() % (uint64_t)(N / 4 + 1)); /* rows past the chunks stay */
  for (int c = 0; c < S; c++) {
    split[c] = c + 1 < S ? (int)(rng_u64() % (uint64_t)(2 * left / (S - c) + 1)) : left;
    if (split[c] > left) split[c] = left;
    if (rng_u64() % 5 == 0 && c + 1 < S) split[c] = 0;
    left -= split[c];
    order[c] = c;
  }
  for (int c = S - 1; c > 0; c--) {
    int j = (int)(rng_u64() % (uint64_t)(c + 1)), tmp = order[c];
    order[c] = order[j];
    order[j] = tmp;
  }
  permute_ref_sort_chunks(N, S, split, order, dst);
  size_t rb = (size_t)H * dt_size(dt);
  unsigned char *x = malloc((size_t)N * rb + 1), *y = malloc((size_t)N * rb + 1);
  float *pr = malloc(4 * (size_t)N + 4), *po = malloc(4 * (size_t)N + 4);
  for (size_t i = 0; i < (size_t)N * H; i++) write_dt(dt, x, i, rng_normal());
  for (int i = 0; i < N; i++) pr[i] = rng_normal();
  void *din = gpu_alloc((size_t)N * rb), *dout = gpu_alloc((size_t)N * rb), *dback = gpu_alloc((size_t)N * rb);
  int32_t *dsplit = gpu_alloc(4 * (size_t)S), *dorder = gpu_alloc(4 * (size_t)S), *dmap = gpu_alloc(4 * (size_t)N);
  float *dp = gpu_alloc(4 * (size_t)N), *dpo = gpu_alloc(4 * (size_t)N), *dpb = gpu_alloc(4 * (size_t)N);
  gpu_put(din, x, (size_t)N * rb);
  gpu_put(dsplit, split, 4 * (size_t)S);
  gpu_put(dorder, order, 4 * (size_t)S);
  gpu_put(dp, pr, 4 * (size_t)N);
  gpu_poison(dout, (size_t)N * rb);
  gpu_poison(dback, (size_t)N * rb);
  gpu_poison(dmap, 4 * (size_t)N);
  gpu_poison(dpo, 4 * (size_t)N);
  gpu_poison(dpb, 4 * (size_t)N);
  moegen_sort_chunks_args f = {.num_rows = N, .dtype = dt, .num_chunks = S, .split_sizes = dsplit,
                               .sorted_index = dorder, .in = din, .out = dout, .probs = dp,
                               .out_probs = dpo, .row_map = dmap};
  moegen_sort_chunks_args b = f;
  b.in = dout;
  b.out = dback;
  b.probs = dpo;
  b.out_probs = dpb;
  b.row_map = NULL;
  b.backward = 1;
  if (!op_failed(m, moegen_sort_chunks(m, &f, NULL), "sort_chunks") &&
      !op_failed(m, moegen_sort_chunks(m, &b, NULL), "sort_chunks backward")) {
    CU(gpu_drv->cuCtxSynchronize());
    gpu_get(got, dmap, 4 * (size_t)N);
    gpu_get(y, dout, (size_t)N * rb);
    gpu_get(po, dpo, 4 * (size_t)N);
    int bad = memcmp(got, dst, 4 * (size_t)N) != 0;
    for (int p = 0; p < N && !bad; p++)
      bad = memcmp(y + (size_t)dst[p] * rb, x + (size_t)p * rb, rb) || po[dst[p]] != pr[p];
    if (!bad) {
      gpu_get(y, dback, (size_t)N * rb);
      gpu_get(po, dpb, 4 * (size_t)N);
      bad = memcmp(y, x, (size_t)N * rb) || memcmp(po, pr, 4 * (size_t)N);
    }
    if (bad) {
      printf("  FAIL: sort_chunks N=%d S=%d H=%d: output differs\n", N, S, H);
      failures++;
    }
  }
  gpu_free(din); gpu_free(dout); gpu_free(dback); gpu_free(dsplit); gpu_free(dorder);
  gpu_free(dmap); gpu_free(dp); gpu_free(dpo); gpu_free(dpb);
  free(split); free(order); free(dst); free(got); free(x); free(y); free(pr); free(po);
}

/* Two permutes of different routings at once on two streams, separate
 * workspaces; both right. */
static void concurrent_case(moegen_module *m, int E, int K, int H, moegen_dtype dt, int T) {
  problem p[2];
  dev d[2];
  CUstream s[2];
  for (int i = 0; i < 2; i++) {
    p[i] = make_problem(E, K, H, dt, i ? gpu_token(T + 17) : T, i, i ? 16 : 1, 0, 1);
    d[i] = alloc_dev(m, &p[i]);
    upload(&p[i], &d[i]);
    CU(gpu_drv->cuStreamCreate(&s[i], MOEGEN_CU_STREAM_NON_BLOCKING));
  }
  CU(gpu_drv->cuCtxSynchronize());
  for (int rep = 0; rep < 3; rep++)
    for (int i = 0; i < 2; i++) {
      moegen_permute_args a = permute_args(&p[i], &d[i]);
      op_failed(m, moegen_permute_fwd(m, &a, s[i]), "permute_fwd (two streams)");
    }
  CU(gpu_drv->cuCtxSynchronize());
  for (int i = 0; i < 2; i++) {
    check_permute(&p[i], &d[i], i ? "stream 2" : "stream 1");
    gpu_drv->cuStreamDestroy(s[i]);
    free_dev(&d[i]);
    free_problem(&p[i]);
  }
}

/* A graph of permute + unpermute captured once, replayed with two
 * routings uploaded into the same buffers. */
static void graph_case(moegen_module *m, int E, int K, int H, moegen_dtype dt, int T) {
  problem p = make_problem(E, K, H, dt, T, 0, 16, 0, 1);
  dev d = alloc_dev(m, &p);
  CUstream stream;
  CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
  upload(&p, &d);
  moegen_permute_args a = permute_args(&p, &d);
  moegen_unpermute_args u = {.num_tokens = T, .dtype = dt, .rows = d.rows, .row_map = d.row_map,
                             .merging_probs = d.mprobs, .out = d.out};
  CUgraph g;
  CUgraphExec ge;
  CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
  moegen_status st = moegen_permute_fwd(m, &a, stream);
  if (st == MOEGEN_OK) st = moegen_unpermute_fwd(m, &u, stream);
  CU(gpu_drv->cuStreamEndCapture(stream, &g));
  if (!op_failed(m, st, "capture")) {
    CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
    int before = failures;
    for (int replay = 0; replay < 2 && failures == before; replay++) {
      if (replay) {
        make_routes(&p, 1);
        reference(&p);
        upload(&p, &d);
      }
      gpu_replay(ge, stream);
      check_permute(&p, &d, replay ? "graph replay 2" : "graph replay 1");
      float *rows = get_floats(dt, d.rows, (size_t)p.R * H), *want = malloc(4 * (size_t)T * H + 4);
      float *got = get_floats(dt, d.out, (size_t)T * H);
      permute_ref_combine(T, K, H, rows, p.row_map, p.mprobs, want);
      compare(dt, got, want, (size_t)T * H, 1, "graph unpermute");
      free(rows); free(want); free(got);
    }
    gpu_drv->cuGraphExecDestroy(ge);
  }
  gpu_drv->cuGraphDestroy(g);
  gpu_drv->cuStreamDestroy(stream);
  free_dev(&d);
  free_problem(&p);
}

/* Bad arguments are refused with a message, before any launch. */
static void arg_checks(moegen_module *m, int E, int K, int H) {
  problem p = make_problem(E, K, H, MOEGEN_DTYPE_BF16, 4, 0, 1, 0, 0);
  dev d = alloc_dev(m, &p);
  moegen_permute_args a = permute_args(&p, &d);
  a.routing_map = d.map;
  CHECK(moegen_permute_fwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "two routings accepted");
  a.routing_map = NULL;
  a.topk_indices = NULL;
  CHECK(moegen_permute_fwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "no routing accepted");
  a.topk_indices = d.idx;
  a.align = 24;
  CHECK(moegen_permute_fwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "align 24 accepted");
  a.align = 1;
  a.workspace_bytes = 0;
  CHECK(moegen_permute_fwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "no workspace accepted");
  CHECK(strstr(moegen_module_last_error(m), "workspace") != NULL, "message: %s",
        moegen_module_last_error(m));
  a.workspace_bytes = d.ws_bytes;
  a.dtype = 7;
  CHECK(moegen_permute_fwd(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "dtype 7 accepted");
  moegen_sort_chunks_args s = {.num_rows = 4, .num_chunks = 100000, .in = d.x, .out = d.rows};
  CHECK(moegen_sort_chunks(m, &s, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "100000 chunks accepted");
  moegen_permute_shape sh;
  CHECK(moegen_permute_shape_of(moegen_module_image(m), 10, 128, 0, &sh) == MOEGEN_OK &&
            sh.rows[0] == 10 * K + E * 127 && sh.rows[1] == H && sh.offsets[0] == E + 1,
        "shape_of");
  CHECK(moegen_permute_shape_of(moegen_module_image(m), 10, 16, 3, &sh) == MOEGEN_OK &&
            sh.rows[0] == (10 * K + E * 15 < E * 16 ? 10 * K + E * 15 : E * 16),
        "shape_of with capacity");
  free_dev(&d);
  free_problem(&p);
}

typedef struct spec {
  int E, K, H;
  moegen_dtype dt;
} spec;

static const spec specs[] = {
    {7, 1, 8, MOEGEN_DTYPE_BF16},       {7, 5, 1280, MOEGEN_DTYPE_FP16},
    {16, 2, 4096, MOEGEN_DTYPE_BF16},   {16, 8, 8, MOEGEN_DTYPE_FP16},
    {128, 5, 7168, MOEGEN_DTYPE_BF16},  {128, 8, 1280, MOEGEN_DTYPE_BF16},
    {256, 8, 7168, MOEGEN_DTYPE_BF16},  {256, 1, 4096, MOEGEN_DTYPE_FP16},
    {256, 2, 8, MOEGEN_DTYPE_BF16},
};

/* 1 if the n bytes at device pointer d are all 0 (n = 0: trivially). */
static int device_zero(const void *d, size_t n) {
  unsigned char *h = malloc(n ? n : 1);
  gpu_get(h, d, n);
  size_t i = 0;
  while (i < n && h[i] == 0) i++;
  free(h);
  return i == n;
}

/* T = 0 with NULL data pointers: permute_fwd still writes zero offsets,
 * counts, num_dropped and its R = E*(align-1) zero pad rows and probs;
 * unpermute_bwd zeroes grad_rows' R rows; the combines, permute_bwd and a
 * sort of 0 rows do nothing. */
static void empty_case(moegen_module *m, int align) {
  const moegen_permute_plan *p = &moegen_module_image(m)->permute;
  moegen_permute_shape sh;
  CHECK(moegen_permute_shape_of(moegen_module_image(m), 0, align, 0, &sh) == MOEGEN_OK,
        "permute_shape_of(T = 0)");
  const int64_t R = sh.rows[0];
  const size_t rbytes = (size_t)R * (size_t)p->hidden * 2, ibytes = 4 * ((size_t)p->experts + 1);
  int32_t *offsets = gpu_alloc(ibytes), *counts = gpu_alloc(ibytes), *dropped = gpu_alloc(4);
  void *ws = gpu_alloc(sh.workspace_bytes), *rows = R ? gpu_alloc(rbytes) : NULL;
  void *grows = R ? gpu_alloc(rbytes) : NULL;
  float *pprobs = R ? gpu_alloc(4 * (size_t)R) : NULL;
  gpu_poison(offsets, ibytes);
  gpu_poison(counts, ibytes);
  gpu_poison(dropped, 4);
  if (R) {
    gpu_poison(rows, rbytes);
    gpu_poison(grows, rbytes);
    gpu_poison(pprobs, 4 * (size_t)R);
  }
  moegen_permute_args pa = {.dtype = MOEGEN_DTYPE_BF16, .align = align, .rows = rows,
                            .permuted_probs = pprobs, .offsets = offsets, .counts = counts,
                            .num_dropped = dropped, .workspace = ws,
                            .workspace_bytes = sh.workspace_bytes};
  moegen_status st[6];
  st[0] = moegen_permute_fwd(m, &pa, NULL);
  moegen_unpermute_bwd_args ub = {.num_rows = R, .dtype = MOEGEN_DTYPE_BF16, .offsets = offsets,
                                  .counts = counts, .grad_rows = grows};
  st[1] = moegen_unpermute_bwd(m, &ub, NULL);
  st[2] = moegen_unpermute_fwd(m, &(moegen_unpermute_args){.dtype = MOEGEN_DTYPE_BF16}, NULL);
  st[3] = moegen_permute_bwd(m, &(moegen_permute_bwd_args){.dtype = MOEGEN_DTYPE_BF16}, NULL);
  st[4] = moegen_sort_chunks(
      m, &(moegen_sort_chunks_args){.dtype = MOEGEN_DTYPE_BF16, .num_chunks = 2}, NULL);
  st[5] = moegen_unpermute_bwd(m, &(moegen_unpermute_bwd_args){.dtype = MOEGEN_DTYPE_BF16}, NULL);
  CU(gpu_drv->cuCtxSynchronize());
  int zero = device_zero(offsets, ibytes) && device_zero(counts, ibytes - 4) &&
             device_zero(dropped, 4) && device_zero(rows, rbytes) &&
             device_zero(pprobs, 4 * (size_t)R) && device_zero(grows, rbytes);
  gpu_free(offsets);
  gpu_free(counts);
  gpu_free(dropped);
  gpu_free(ws);
  gpu_free(rows);
  gpu_free(grows);
  gpu_free(pprobs);
  for (int i = 0; i < 6; i++)
    CHECK(st[i] == MOEGEN_OK, "T = 0 (align %d), NULL pointers, op %d: %s: %s", align, i,
          moegen_status_string(st[i]), moegen_module_last_error(m));
  CHECK(zero, "T = 0 (align %d): offsets, counts, num_dropped, pad rows or grad_rows not zero",
        align);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    const spec *s = &specs[i];
    moegen_config c;
    moegen_config_defaults(&c);
    snprintf(c.name, sizeof c.name, "permute-test");
    c.experts = s->E;
    c.topk = s->K;
    c.hidden = s->H;
    c.ffn = 256;
    c.dtype = s->dt;
    char what[96];
    snprintf(what, sizeof what, "E=%d K=%d H=%d %s", s->E, s->K, s->H,
             s->dt == MOEGEN_DTYPE_BF16 ? "bf16" : "fp16");
    moegen_module *m = test_jit(&c, 1u << MOEGEN_UNIT_PERMUTE, what);
    if (!m) continue;
    int before = failures;
    /* large enough to span several tiles, small enough for the host reference */
    int big = (int)(24000000 / ((long long)s->K * s->H + s->H));
    if (big > 3000) big = 3000;
    big = gpu_token(big);
    static const int aligns[] = {1, 16, 128};
    const int own_Ts[] = {0, 1, 37, big};
    int Ts[GPU_MAX_TOKENS];
    const int nT = gpu_tokens(own_Ts, 4, Ts);
    for (int ti = 0; ti < nT; ti++)
      for (int use_map = 0; use_map < 2; use_map++) {
        int T = Ts[ti], align = aligns[(ti + use_map + (int)i) % 3];
        run_case(m, s->E, s->K, s->H, s->dt, T, use_map, align, 0, 0, T > 0);
      }
    int cap = big * s->K / s->E / 2 + 1; /* drops about half of the routes */
    run_case(m, s->E, s->K, s->H, s->dt, big, 0, 16, cap, 0, 1);
    run_case(m, s->E, s->K, s->H, s->dt, big, 1, 1, cap, 0, 0);
    run_case(m, s->E, s->K, s->H, s->dt, big, (int)i & 1, 32, 0, 1, 0);
    run_case(m, s->E, s->K, s->H, MOEGEN_DTYPE_FP32, gpu_token(37), 0, 16, 0, 0, 1);
    sort_case(m, s->H, s->dt, big * s->K / 2 + 5, s->E);
    sort_case(m, s->H, MOEGEN_DTYPE_FP32, gpu_token(33), 1);
    if (i % 3 == 0) {
      concurrent_case(m, s->E, s->K, s->H, s->dt, big);
      graph_case(m, s->E, s->K, s->H, s->dt, gpu_token(big / 2 + 3));
    }
    if (i == 0) arg_checks(m, s->E, s->K, s->H);
    empty_case(m, 1);
    empty_case(m, 16);
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", what);
    moegen_module_destroy(m);
  }
  printf("%s\n", failures ? "permute GPU test FAILED" : "permute GPU test passed");
  return failures ? 1 : 0;
}
