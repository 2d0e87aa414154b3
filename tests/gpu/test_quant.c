/* tests/gpu/test_quant.c -- the FP8 quantize ops (moegen_quant_weight,
 * moegen_quant_rows, moegen_quant_tensor; SPEC.md 5b) against the CPU
 * reference (tests/ref/quant_ref.h), byte for byte on the fp8 data and
 * exactly on the scales and amax: modules of fp8_block (pow2 and fp32
 * scales) and fp8_tensorwise, random shapes (T = 0 with NULL pointers,
 * T = 1, E not a power of two, partial edge tiles for fp8_tensorwise),
 * poisoned outputs (0xFF; the padding of the row scales must stay so),
 * blocks that are all zero, of huge, tiny and subnormal magnitude, values
 * at the format's maximum after scaling; a graph replay of the tensorwise
 * op; the FP8 rows of moegen_permute_fwd (fp8_block) against quant_rows of
 * its bf16 rows; the argument checks and NOT_SUPPORTED for the other recipes. Label
 * gpu; exits 77 without a device. test_quant_portable_gpu renders the
 * modules for the device's arch without the 'a' (the kernels are the same
 * source; no wgmma). */
#include "check.h"
#include "half.h"
#include "quant_ref.h"

static moegen_config config_of(const char *recipe, const char *scale) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "quant");
  c.experts = 6;
  c.topk = 2;
  c.hidden = 256;
  c.ffn = 384;
  char set[64];
  snprintf(set, sizeof set, "recipe=%s", recipe);
  moegen_config_set(&c, set, 1, &err);
  if (scale) {
    snprintf(set, sizeof set, "fp8_scale=%s", scale);
    moegen_config_set(&c, set, 2, &err);
  }
  if (moegen_config_validate(&c, &err)) {
    printf("FAIL config %s: %s\n", recipe, err.msg);
    exit(1);
  }
  return c;
}

/* bf16 bits of n values: a block of `group` consecutive values shares a
 * magnitude class (normal, all zero, huge, tiny, subnormal, or a power of
 * two that lands on FP8_MAX after scaling). */
static void fill(uint16_t *x, int64_t n, int64_t group) {
  float mag = 1.f;
  int kind = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i % group == 0) {
      kind = (int)(rng_u64() % 8);
      static const float mags[] = {1.f, 0.f, 1e30f, 1e-30f, 3e-39f, 1.f, 0.01f, 1.f};
      mag = mags[kind] * (0.5f + rng_uniform());
    }
    float v = rng_normal() * mag;
    if (kind == 7) v = (rng_u64() & 1 ? 1.f : -1.f) * (float)(1 << (rng_u64() % 8)); /* exact powers */
    x[i] = f32_to_bf16(v);
  }
}

static int same_bytes(const void *a, const void *b, size_t n, const char *what, int64_t *at) {
  const uint8_t *p = a, *q = b;
  for (size_t i = 0; i < n; i++)
    if (p[i] != q[i]) {
      *at = (int64_t)i;
      printf("  %s differs at byte %lld: %02x vs %02x (ref)\n", what, (long long)i, p[i], q[i]);
      return 0;
    }
  return 1;
}

/* ---------------------------------------------------------------- weights */

static void weight_case(moegen_module *m, int E, int n, int k, int transpose) {
  const moegen_image *img = moegen_module_image(m);
  const int block = img->quant.recipe == MOEGEN_RECIPE_FP8_BLOCK;
  moegen_quant_weight_shape sh;
  CHECK(moegen_quant_weight_shape_of(img, E, n, k, &sh) == MOEGEN_OK, "weight shape_of");
  const size_t nd = (size_t)E * n * k;
  const size_t ns = (size_t)(sh.scales[0] * sh.scales[1] * sh.scales[2]);
  const size_t nst = (size_t)(sh.scales_t[0] * sh.scales_t[1] * sh.scales_t[2]);
  CHECK((size_t)(sh.data[0] * sh.data[1] * sh.data[2]) == nd && (!block || nst == ns) &&
            (block ? sh.amax[0] == 0 && ns == (size_t)E * (n / 128) * (k / 128)
                   : sh.amax[0] == 1 && ns == 1 && nst == 0),
        "weight shape");
  uint16_t *w = malloc(2 * nd + 2);
  uint8_t *q = malloc(nd + 1), *qt = malloc(nd + 1), *rq = malloc(nd + 1), *rqt = malloc(nd + 1);
  float *s = malloc(4 * ns + 4), *st = malloc(4 * nst + 4), *rs = malloc(4 * ns + 4),
        *rst = malloc(4 * nst + 4), amax = 0, ramax = 0;
  /* magnitude classes by runs of 128 values of a row */
  fill(w, (int64_t)nd, 128);
  for (int r = 0; block && r < 128; r++) memset(w + (size_t)r * k, 0, 2 * 128); /* an all-zero block */
  void *dw = gpu_alloc(2 * nd), *dq = gpu_alloc(nd), *dqt = transpose ? gpu_alloc(nd) : NULL;
  float *ds = gpu_alloc(4 * ns), *dst = transpose && block ? gpu_alloc(4 * nst) : NULL;
  float *damax = block ? NULL : gpu_alloc(16);
  gpu_put(dw, w, 2 * nd);
  gpu_poison(dq, nd);
  if (dqt) gpu_poison(dqt, nd);
  gpu_poison(ds, 4 * ns);
  if (dst) gpu_poison(dst, 4 * nst);
  if (damax) gpu_poison(damax, 16);
  moegen_quant_weight_args a = {.experts = E, .n = n, .k = k, .w = dw, .data = dq, .scales = ds,
                                .data_t = dqt, .scales_t = dst, .amax = damax};
  moegen_status status = moegen_quant_weight(m, &a, NULL);
  if (status == MOEGEN_OK) CU(gpu_drv->cuCtxSynchronize());
  gpu_get(q, dq, nd);
  if (dqt) gpu_get(qt, dqt, nd);
  gpu_get(s, ds, 4 * ns);
  if (dst) gpu_get(st, dst, 4 * nst);
  if (damax) gpu_get(&amax, damax, 4);
  gpu_free(dw), gpu_free(dq), gpu_free(dqt), gpu_free(ds), gpu_free(dst), gpu_free(damax);
  if (block)
    quant_ref_weight_block(w, E, n, k, img->quant.scale_pow2, rq, rs, transpose ? rqt : NULL, rst);
  else
    quant_ref_weight_tensor(w, E, n, k, rq, transpose ? rqt : NULL, &ramax, rs);
  int64_t at = 0;
  int ok = status == MOEGEN_OK && same_bytes(q, rq, nd, "data", &at) &&
           same_bytes(s, rs, 4 * ns, "scales", &at) &&
           (!transpose || same_bytes(qt, rqt, nd, "data_t", &at)) &&
           (!transpose || !block || same_bytes(st, rst, 4 * nst, "scales_t", &at)) &&
           (block || same_bytes(&amax, &ramax, 4, "amax", &at));
  free(w), free(q), free(qt), free(rq), free(rqt), free(s), free(st), free(rs), free(rst);
  CHECK(ok, "quant_weight E = %d [%d, %d]%s: %s %s", E, n, k, transpose ? " + transpose" : "",
        moegen_status_string(status), moegen_module_last_error(m));
}

/* ---------------------------------------------------------------- rows */

static void rows_case(moegen_module *m, int64_t M, int K, int64_t extra_ld) {
  const moegen_image *img = moegen_module_image(m);
  moegen_quant_rows_shape sh;
  CHECK(moegen_quant_rows_shape_of(img, M, K, &sh) == MOEGEN_OK && sh.scale_ld >= M &&
            sh.scale_ld % 4 == 0 && sh.scale_ld < M + 4 && sh.scales[0] == K / 128 &&
            sh.data[0] == M && sh.data[1] == K,
        "rows shape_of");
  const int64_t ld = sh.scale_ld + extra_ld;
  const size_t nd = (size_t)M * K, ns = (size_t)(K / 128) * (size_t)ld;
  uint16_t *x = malloc(2 * nd + 2);
  uint8_t *q = malloc(nd + 1), *rq = malloc(nd + 1);
  float *s = malloc(4 * ns + 4), *rs = malloc(4 * ns + 4);
  fill(x, (int64_t)nd, 128);
  memset(rs, 0xff, 4 * ns);
  void *dx = gpu_alloc(2 * nd), *dq = gpu_alloc(nd);
  float *ds = gpu_alloc(4 * ns);
  gpu_put(dx, x, 2 * nd);
  gpu_poison(dq, nd);
  gpu_poison(ds, 4 * ns);
  moegen_quant_rows_args a = {.rows = M, .cols = K, .x = dx, .data = dq, .scales = ds, .scale_ld = ld};
  moegen_status status = moegen_quant_rows(m, &a, NULL);
  if (status == MOEGEN_OK) CU(gpu_drv->cuCtxSynchronize());
  gpu_get(q, dq, nd);
  gpu_get(s, ds, 4 * ns);
  gpu_free(dx), gpu_free(dq), gpu_free(ds);
  quant_ref_rows(x, M, K, img->quant.scale_pow2, rq, rs, ld);
  int64_t at = 0;
  int ok = status == MOEGEN_OK && same_bytes(q, rq, nd, "data", &at) &&
           same_bytes(s, rs, 4 * ns, "scales (padding columns must keep the poison)", &at);
  free(x), free(q), free(rq), free(s), free(rs);
  CHECK(ok, "quant_rows [%lld, %d] scale_ld %lld: %s %s", (long long)M, K, (long long)ld,
        moegen_status_string(status), moegen_module_last_error(m));
}

/* ---------------------------------------------------------------- fused permute (fp8_block) */

/* moegen_permute_fwd's rows_fp8 / row_scales against moegen_quant_rows of
 * its bf16 rows (checked against the CPU reference by rows_case): the same
 * bytes and scales, pad rows included (zeros, scale 1), the padding
 * columns of the scales untouched; then again without the bf16 rows (the
 * FP8 kernel alone, which must zero the pad rows' probs too). */
static void fused_case(moegen_module *m, int T, int align) {
  const moegen_image *img = moegen_module_image(m);
  const int E = img->permute.experts, K = img->permute.topk, H = img->permute.hidden;
  moegen_permute_shape sh;
  CHECK(moegen_permute_shape_of(img, T, align, 0, &sh) == MOEGEN_OK && sh.rows_fp8[0] == sh.rows[0] &&
            sh.rows_fp8[1] == H && sh.row_scales[0] == H / 128 && sh.row_scales[1] == sh.scale_ld &&
            sh.scale_ld >= sh.rows[0] && sh.scale_ld % 4 == 0,
        "permute shape_of (fp8)");
  const int64_t R = sh.rows[0], ld = sh.scale_ld + 4;
  const size_t nx = (size_t)T * H, nr = (size_t)R * H, ns = (size_t)(H / 128) * (size_t)ld;
  uint16_t *x = malloc(2 * nx + 2);
  int32_t *idx = malloc(4 * (size_t)T * K + 4);
  float *probs = malloc(4 * (size_t)T * K + 4);
  fill(x, (int64_t)nx, 128);
  for (int t = 0; t < T; t++) /* K distinct experts, a few routes to none (-1) */
    for (int k = 0; k < K; k++) {
      int e;
      do e = (int)(rng_u64() % (uint64_t)(E + 1)) - 1; while (e >= 0 && k && idx[t * K] == e);
      idx[t * K + k] = e;
      probs[t * K + k] = rng_uniform();
    }
  void *dx = gpu_alloc(2 * nx), *didx = gpu_alloc(4 * (size_t)T * K), *dprobs = gpu_alloc(4 * (size_t)T * K);
  void *drows = gpu_alloc(2 * nr), *ws = gpu_alloc(sh.workspace_bytes);
  uint8_t *dq = gpu_alloc(nr), *dq2 = gpu_alloc(nr), *dqr = gpu_alloc(nr);
  float *ds = gpu_alloc(4 * ns), *ds2 = gpu_alloc(4 * ns), *dsr = gpu_alloc(4 * ns);
  float *dpp = gpu_alloc(4 * (size_t)R), *dpp2 = gpu_alloc(4 * (size_t)R);
  int32_t *dmap = gpu_alloc(4 * (size_t)T * K), *doff = gpu_alloc(4 * (size_t)(E + 1)), *dcnt = gpu_alloc(4 * (size_t)E);
  gpu_put(dx, x, 2 * nx);
  gpu_put(didx, idx, 4 * (size_t)T * K);
  gpu_put(dprobs, probs, 4 * (size_t)T * K);
  gpu_poison(dq, nr), gpu_poison(dq2, nr), gpu_poison(dqr, nr);
  gpu_poison(ds, 4 * ns), gpu_poison(ds2, 4 * ns), gpu_poison(dsr, 4 * ns);
  gpu_poison(dpp, 4 * (size_t)R), gpu_poison(dpp2, 4 * (size_t)R);
  moegen_permute_args a = {.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .x = dx, .topk_indices = didx,
                           .probs = dprobs, .align = align, .rows = drows, .permuted_probs = dpp,
                           .row_map = dmap, .offsets = doff, .counts = dcnt, .workspace = ws,
                           .workspace_bytes = sh.workspace_bytes, .rows_fp8 = dq, .row_scales = ds,
                           .scale_ld = ld};
  moegen_status st = moegen_permute_fwd(m, &a, NULL);
  moegen_quant_rows_args qa = {.rows = R, .cols = H, .x = drows, .data = dqr, .scales = dsr, .scale_ld = ld};
  if (st == MOEGEN_OK) st = moegen_quant_rows(m, &qa, NULL);
  a.rows = NULL, a.rows_fp8 = dq2, a.row_scales = ds2, a.permuted_probs = dpp2;
  if (st == MOEGEN_OK) st = moegen_permute_fwd(m, &a, NULL);
  if (st == MOEGEN_OK) CU(gpu_drv->cuCtxSynchronize());
  uint8_t *q = malloc(nr + 1), *q2 = malloc(nr + 1), *qr = malloc(nr + 1);
  float *sc = malloc(4 * ns + 4), *sc2 = malloc(4 * ns + 4), *scr = malloc(4 * ns + 4);
  float *pp = malloc(4 * (size_t)R + 4), *pp2 = malloc(4 * (size_t)R + 4);
  gpu_get(q, dq, nr), gpu_get(q2, dq2, nr), gpu_get(qr, dqr, nr);
  gpu_get(sc, ds, 4 * ns), gpu_get(sc2, ds2, 4 * ns), gpu_get(scr, dsr, 4 * ns);
  gpu_get(pp, dpp, 4 * (size_t)R), gpu_get(pp2, dpp2, 4 * (size_t)R);
  int64_t at = 0;
  int ok = st == MOEGEN_OK && same_bytes(q, qr, nr, "rows_fp8", &at) &&
           same_bytes(sc, scr, 4 * ns, "row_scales", &at) &&
           same_bytes(q2, qr, nr, "rows_fp8 (fp8 rows only)", &at) &&
           same_bytes(sc2, scr, 4 * ns, "row_scales (fp8 rows only)", &at) &&
           same_bytes(pp2, pp, 4 * (size_t)R, "permuted_probs (fp8 rows only)", &at);
  gpu_free(dx), gpu_free(didx), gpu_free(dprobs), gpu_free(drows), gpu_free(ws), gpu_free(dq);
  gpu_free(dq2), gpu_free(dqr), gpu_free(ds), gpu_free(ds2), gpu_free(dsr), gpu_free(dpp);
  gpu_free(dpp2), gpu_free(dmap), gpu_free(doff), gpu_free(dcnt);
  free(x), free(idx), free(probs), free(q), free(q2), free(qr), free(sc), free(sc2), free(scr);
  free(pp), free(pp2);
  CHECK(ok, "permute_fwd rows_fp8 T = %d align %d (R = %lld): %s %s", T, align, (long long)R,
        moegen_status_string(st), moegen_module_last_error(m));
}

/* ---------------------------------------------------------------- tensorwise */

/* quant_tensor on x [n] in format f, on stream (NULL: the legacy one), or
 * captured into a graph and replayed twice with fresh inputs. */
static void tensor_case(moegen_module *m, int64_t n, moegen_fp8_format f, int graph) {
  uint16_t *x = malloc(2 * (size_t)n + 2);
  uint8_t *q = malloc((size_t)n + 1), *rq = malloc((size_t)n + 1);
  void *dx = gpu_alloc(2 * (size_t)n), *dq = gpu_alloc((size_t)n);
  float *damax = n ? gpu_alloc(16) : NULL, *dinv = n ? gpu_alloc(16) : NULL;
  moegen_quant_tensor_args a = {.n = n, .x = dx, .data = dq, .format = f, .amax = damax,
                                .scale_inv = dinv};
  CUstream stream = NULL;
  CUgraph g;
  CUgraphExec ge;
  moegen_status status = MOEGEN_OK;
  if (graph) {
    CU(gpu_drv->cuStreamCreate(&stream, MOEGEN_CU_STREAM_NON_BLOCKING));
    CU(gpu_drv->cuStreamBeginCapture(stream, MOEGEN_CU_STREAM_CAPTURE_MODE_GLOBAL));
    status = moegen_quant_tensor(m, &a, stream);
    CU(gpu_drv->cuStreamEndCapture(stream, &g));
    if (status == MOEGEN_OK) CU(gpu_drv->cuGraphInstantiate(&ge, g, 0));
  }
  int ok = status == MOEGEN_OK;
  for (int rep = 0; ok && rep < (graph ? 2 : 1); rep++) {
    fill(x, n, 1 + (int64_t)(rng_u64() % 4096));
    gpu_put(dx, x, 2 * (size_t)n);
    gpu_poison(dq, (size_t)n);
    if (n) gpu_poison(damax, 16), gpu_poison(dinv, 16);
    if (graph) {
      gpu_replay(ge, stream);
    } else {
      status = moegen_quant_tensor(m, &a, NULL);
      if (status == MOEGEN_OK) CU(gpu_drv->cuCtxSynchronize());
    }
    float amax = 0, inv = 0, ramax = 0, rinv = 0;
    gpu_get(q, dq, (size_t)n);
    if (n) gpu_get(&amax, damax, 4), gpu_get(&inv, dinv, 4);
    if (n) quant_ref_tensor(x, n, f, rq, &ramax, &rinv);
    int64_t at = 0;
    ok = status == MOEGEN_OK && same_bytes(q, rq, (size_t)n, "data", &at) &&
         (!n || (same_bytes(&amax, &ramax, 4, "amax", &at) &&
                 same_bytes(&inv, &rinv, 4, "scale_inv", &at)));
  }
  if (graph) {
    if (status == MOEGEN_OK) CU(gpu_drv->cuGraphExecDestroy(ge));
    CU(gpu_drv->cuGraphDestroy(g));
    CU(gpu_drv->cuStreamDestroy(stream));
  }
  gpu_free(dx), gpu_free(dq), gpu_free(damax), gpu_free(dinv);
  free(x), free(q), free(rq);
  CHECK(ok, "quant_tensor n = %lld %s%s: %s %s", (long long)n, f == MOEGEN_FP8_E5M2 ? "e5m2" : "e4m3",
        graph ? " (graph replay)" : "", moegen_status_string(status), moegen_module_last_error(m));
}

/* ---------------------------------------------------------------- argument checks */

#define EXPECT(call, want, what)                                                            \
  do {                                                                                      \
    moegen_status s_ = (call);                                                              \
    CHECK(s_ == (want), "%s: %s, want %s (%s)", what, moegen_status_string(s_),             \
          moegen_status_string(want), moegen_module_last_error(m));                         \
  } while (0)

static void arg_checks(moegen_module *m) {
  const moegen_image *img = moegen_module_image(m);
  const int block = img->quant.recipe == MOEGEN_RECIPE_FP8_BLOCK;
  void *buf = gpu_alloc(1 << 20);
  float *f = gpu_alloc(1 << 16);
  uint8_t *u = (uint8_t *)buf;
  /* empty calls: no GPU work, NULL pointers */
  moegen_quant_weight_args w0 = {.experts = 0, .n = 128, .k = 256};
  EXPECT(moegen_quant_weight(m, &w0, NULL), MOEGEN_OK, "weight E = 0 with NULLs");
  moegen_quant_weight_args w1 = {.experts = 1, .n = 128, .k = 100, .w = buf, .data = u + (1 << 19),
                                 .scales = f, .amax = f + 4};
  EXPECT(moegen_quant_weight(m, &w1, NULL), block ? MOEGEN_ERR_INVALID_ARGUMENT : MOEGEN_OK,
         "weight k = 100");
  w1.k = 128;
  w1.w = NULL;
  EXPECT(moegen_quant_weight(m, &w1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "weight w NULL");
  w1.w = u + 8;
  EXPECT(moegen_quant_weight(m, &w1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "weight w misaligned");
  w1.w = buf;
  w1.experts = -1;
  EXPECT(moegen_quant_weight(m, &w1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "weight E < 0");
  w1.experts = 1;
  w1.n = 0;
  EXPECT(moegen_quant_weight(m, &w1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "weight n = 0");
  moegen_quant_rows_args r0 = {.rows = 0, .cols = 256, .scale_ld = 0};
  moegen_quant_rows_args r1 = {.rows = 5, .cols = 256, .x = buf, .data = u + (1 << 19), .scales = f,
                               .scale_ld = 8};
  moegen_quant_tensor_args t0 = {.n = 0, .format = MOEGEN_FP8_E4M3};
  moegen_quant_tensor_args t1 = {.n = 100, .x = buf, .data = u + (1 << 19), .format = MOEGEN_FP8_E5M2,
                                 .amax = f, .scale_inv = f + 4};
  moegen_quant_rows_shape rsh;
  moegen_quant_weight_shape wsh;
  if (block) {
    EXPECT(moegen_quant_rows(m, &r0, NULL), MOEGEN_OK, "rows M = 0 with NULLs");
    r1.cols = 200;
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "rows cols = 200");
    r1.cols = 256;
    r1.scale_ld = 4;
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "rows scale_ld < rows");
    r1.scale_ld = 10;
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "rows scale_ld % 4");
    r1.scale_ld = 8;
    r1.scales = NULL;
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "rows scales NULL");
    r1.rows = -1;
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "rows M < 0");
    EXPECT(moegen_quant_rows_shape_of(img, 3, 100, &rsh), MOEGEN_ERR_INVALID_ARGUMENT, "rows shape cols 100");
    EXPECT(moegen_quant_tensor(m, &t1, NULL), MOEGEN_ERR_NOT_SUPPORTED, "tensor on fp8_block");
  } else {
    EXPECT(moegen_quant_rows(m, &r1, NULL), MOEGEN_ERR_NOT_SUPPORTED, "rows on fp8_tensorwise");
    EXPECT(moegen_quant_rows_shape_of(img, 3, 256, &rsh), MOEGEN_ERR_NOT_SUPPORTED, "rows shape tw");
    EXPECT(moegen_quant_tensor(m, &t0, NULL), MOEGEN_OK, "tensor n = 0 with NULLs");
    t1.format = (moegen_fp8_format)2;
    EXPECT(moegen_quant_tensor(m, &t1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "tensor format 2");
    t1.format = MOEGEN_FP8_E4M3;
    t1.amax = NULL;
    EXPECT(moegen_quant_tensor(m, &t1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "tensor amax NULL");
    t1.n = -1;
    EXPECT(moegen_quant_tensor(m, &t1, NULL), MOEGEN_ERR_INVALID_ARGUMENT, "tensor n < 0");
  }
  EXPECT(moegen_quant_weight_shape_of(img, 2, 0, 128, &wsh), MOEGEN_ERR_INVALID_ARGUMENT, "weight shape n 0");
  gpu_free(buf);
  gpu_free(f);
}

/* A bf16 module has no quant kernels: every op and shape function says NOT_SUPPORTED. */
static void bf16_case(moegen_module *m) {
  const moegen_image *img = moegen_module_image(m);
  CHECK(!(img->units >> MOEGEN_UNIT_QUANT & 1u) && img->quant.recipe == MOEGEN_RECIPE_BF16,
        "bf16 module has a quant unit (units 0x%x)", img->units);
  moegen_quant_weight_args w = {.experts = 0, .n = 128, .k = 128};
  moegen_quant_rows_args r = {.rows = 0, .cols = 128};
  moegen_quant_tensor_args t = {.n = 0};
  moegen_quant_weight_shape wsh;
  EXPECT(moegen_quant_weight(m, &w, NULL), MOEGEN_ERR_NOT_SUPPORTED, "bf16 weight");
  EXPECT(moegen_quant_rows(m, &r, NULL), MOEGEN_ERR_NOT_SUPPORTED, "bf16 rows");
  EXPECT(moegen_quant_tensor(m, &t, NULL), MOEGEN_ERR_NOT_SUPPORTED, "bf16 tensor");
  EXPECT(moegen_quant_weight_shape_of(img, 1, 128, 128, &wsh), MOEGEN_ERR_NOT_SUPPORTED, "bf16 shape");
  moegen_permute_shape psh;
  EXPECT(moegen_permute_shape_of(img, 5, 1, 0, &psh), MOEGEN_OK, "bf16 permute shape");
  CHECK(psh.rows_fp8[0] == 0 && psh.scale_ld == 0, "bf16 permute shape has FP8 rows");
  void *buf = gpu_alloc(4096);
  moegen_permute_args pa = {.num_tokens = 0, .dtype = MOEGEN_DTYPE_BF16, .align = 1,
                            .offsets = buf, .counts = buf, .workspace = buf,
                            .workspace_bytes = psh.workspace_bytes, .rows_fp8 = buf,
                            .row_scales = buf, .scale_ld = 4};
  moegen_status pst = moegen_permute_fwd(m, &pa, NULL);
  gpu_free(buf);
  CHECK(pst == MOEGEN_ERR_NOT_SUPPORTED, "bf16 permute_fwd rows_fp8: %s", moegen_status_string(pst));
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  static const int own_tokens[] = {0, 1, 3, 33, 777, 4099};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, sizeof own_tokens / sizeof own_tokens[0], tokens);
  static const struct {
    const char *recipe, *scale;
  } modules[] = {{"fp8_block", NULL}, {"fp8_block", "fp32"}, {"fp8_tensorwise", NULL}};
  for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
    moegen_config c = config_of(modules[i].recipe, modules[i].scale);
    char what[64];
    snprintf(what, sizeof what, "%s%s%s", modules[i].recipe, modules[i].scale ? " " : "",
             modules[i].scale ? modules[i].scale : "");
    moegen_module *m = test_jit(&c, 1u << MOEGEN_UNIT_QUANT | 1u << MOEGEN_UNIT_PERMUTE, what);
    if (!m) continue;
    const int block = moegen_module_image(m)->quant.recipe == MOEGEN_RECIPE_FP8_BLOCK;
    int before = failures;
    /* weights: E not a power of two, transposed or not; fp8_tensorwise also odd n, k */
    static const int wshapes[][3] = {{1, 128, 128}, {3, 256, 384}, {5, 384, 128}, {6, 768, 256}};
    static const int tw_shapes[][3] = {{1, 1, 1}, {3, 200, 72}, {5, 130, 257}, {2, 129, 8}};
    for (int s = 0; s < 4; s++)
      for (int t = 0; t < 2; t++) {
        weight_case(m, gpu_small() ? 1 : wshapes[s][0], wshapes[s][1], wshapes[s][2], t);
        if (!block) weight_case(m, tw_shapes[s][0], tw_shapes[s][1], tw_shapes[s][2], t);
      }
    printf("%s weights: %s\n", failures == before ? "ok  " : "FAIL", what);
    before = failures;
    if (block) {
      static const int cols[] = {128, 384, 2048};
      for (int t = 0; t < nt; t++)
        for (int k = 0; k < 3; k++) rows_case(m, tokens[t], cols[k], k == 1 ? 8 : 0);
      printf("%s rows (1x128): %s\n", failures == before ? "ok  " : "FAIL", what);
      before = failures;
      for (int t = 0; t < nt; t++)
        for (int al = 1; al <= 128; al *= 16) fused_case(m, tokens[t], al);
      printf("%s permute_fwd with FP8 rows: %s\n", failures == before ? "ok  " : "FAIL", what);
    } else {
      for (int t = 0; t < nt; t++)
        for (int f = 0; f < 2; f++) {
          tensor_case(m, (int64_t)tokens[t] * 7, (moegen_fp8_format)f, 0);
          tensor_case(m, (int64_t)tokens[t] * 1024 + (t % 2), (moegen_fp8_format)f, 0);
        }
      tensor_case(m, gpu_token(4099) * 2048 + 5, MOEGEN_FP8_E5M2, 1); /* every block busy, graph */
      printf("%s tensorwise (amax + quantize, e4m3 and e5m2, graph replay): %s\n",
             failures == before ? "ok  " : "FAIL", what);
    }
    before = failures;
    arg_checks(m);
    printf("%s argument checks: %s\n", failures == before ? "ok  " : "FAIL", what);
    moegen_module_destroy(m);
  }
  moegen_config c = config_of("bf16", NULL);
  moegen_module *m = test_jit(&c, 1u << MOEGEN_UNIT_PERMUTE, "bf16");
  if (m) {
    int before = failures;
    bf16_case(m);
    printf("%s bf16 module: NOT_SUPPORTED\n", failures == before ? "ok  " : "FAIL");
    moegen_module_destroy(m);
  }
  printf("%s\n", failures ? "quant GPU test FAILED" : "quant GPU test passed");
  return failures ? 1 : 0;
}
