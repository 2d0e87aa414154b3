/* GPU test: expert parallelism through NCCL with one rank (R = 1: a
 * one-rank communicator on one GPU, whose unique id needs no network).
 * The EP forward -- router -> permute -> moegen_ep_dispatch -> GEMM1 +
 * SwiGLU -> GEMM2 -> moegen_ep_combine -> unpermute -- must equal
 * moegen_layer_fwd on the same inputs bit for bit (at R = 1 the regrouping
 * is the identity and every kernel sees the same rows), and dispatch's
 * outputs must equal the permute's (rows, probs, offsets) bit for bit;
 * the EP y is also checked against the CPU reference (SPEC.md 6). The EP
 * backward -- unpermute backward -> dispatch (reuse: the dy rows, no sync)
 * -> SwiGLU dgrad, wgrads, GEMM1 dgrad -> combine (dx rows and the
 * route-weight grads) -> permute backward -> router backward -- must equal
 * moegen_layer_bwd's dx, dw1, dw2 bit for bit, and its dlogits within
 * SPEC.md 6 (the route-weight grad is summed with fp32 atomics).
 * Poisoned outputs; T = 1, an odd T and T = 0 (nothing sent); the sizes of
 * the one sync (host_sizes). Exit 77 (skipped) without a device or without
 * libnccl.so.2. (R > 1 needs a multi-GPU machine: not here.) */
#include <dlfcn.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "layer_ref.h"
#include "layer_test.h"
#include "moegen/moegen.h"

enum { H = 264, F = 136 };

static const layer_model model = {"ep-r1", 64, 6, H, F, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0};

/* The NCCL calls the test makes itself (nccl.h's prototypes; ncclUniqueId
 * is 128 bytes passed by value). */
typedef struct { char internal[128]; } unique_id;
static int (*nccl_get_unique_id)(unique_id *id);
static int (*nccl_comm_init_rank)(struct ncclComm **comm, int nranks, unique_id id, int rank);
static int (*nccl_comm_destroy)(struct ncclComm *comm);

static struct ncclComm *one_rank_comm(void) {
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("SKIP: no libnccl.so.2 (%s)\n", dlerror());
    exit(GPU_SKIP);
  }
  void *f[3] = {dlsym(lib, "ncclGetUniqueId"), dlsym(lib, "ncclCommInitRank"),
                dlsym(lib, "ncclCommDestroy")};
  memcpy(&nccl_get_unique_id, &f[0], sizeof f[0]);
  memcpy(&nccl_comm_init_rank, &f[1], sizeof f[1]);
  memcpy(&nccl_comm_destroy, &f[2], sizeof f[2]);
  unique_id id;
  struct ncclComm *comm = NULL;
  int r = nccl_get_unique_id ? nccl_get_unique_id(&id) : -1;
  if (!r) r = nccl_comm_init_rank(&comm, 1, id, 0);
  if (r) {
    printf("FAIL: one-rank NCCL communicator: error %d\n", r);
    exit(1);
  }
  return comm;
}

static void *dev_bf16(float *host, size_t n, float scale) {
  void *d = gpu_alloc(2 * n);
  fill_bf16(host, d, n, scale);
  return d;
}

/* memcmp of n bytes of two device buffers. */
static int same_bytes(const void *a, const void *b, size_t n) {
  if (!n) return 1;
  unsigned char *ha = malloc(n), *hb = malloc(n);
  gpu_get(ha, a, n);
  gpu_get(hb, b, n);
  int same = !memcmp(ha, hb, n);
  free(ha);
  free(hb);
  return same;
}

static void run_case(moegen_module *m, struct ncclComm *comm, int T, CUstream s) {
  const moegen_image *img = moegen_module_image(m);
  const moegen_config c = layer_config(&model, "eptest");
  const int E = model.E, K = model.K;
  const int before = failures;
  const size_t nx = (size_t)T * H, n1 = (size_t)E * 2 * F * H, n2 = (size_t)E * H * F;
  float *x = malloc(4 * nx + 4), *lg = malloc(4 * (size_t)T * E + 4), *w1 = malloc(4 * n1),
        *w2 = malloc(4 * n2);
  void *dx = dev_bf16(x, nx, 1.f), *dlg = dev_bf16(lg, (size_t)T * E, 2.f);
  void *dw1 = dev_bf16(w1, n1, 1.f / sqrtf((float)H)), *dw2 = dev_bf16(w2, n2, 1.f / sqrtf((float)F));
  /* The single-GPU layer. */
  moegen_layer_shape ls;
  CHECK(moegen_layer_shape_of(img, T, &ls) == MOEGEN_OK, "layer shape");
  void *y_ref = gpu_alloc(2 * nx), *saved = gpu_alloc(ls.saved_bytes), *ws = gpu_alloc(ls.workspace_bytes);
  gpu_poison(y_ref, 2 * nx);
  moegen_layer_fwd_args la = {.num_tokens = T, .max_tokens = T, .x = dx, .logits = dlg, .w1 = dw1,
                              .w2 = dw2, .y = y_ref, .saved = saved,
                              .saved_bytes = ls.saved_bytes, .workspace = ws,
                              .workspace_bytes = ls.workspace_bytes};
  CU(gpu_drv->cuCtxSynchronize());
  CHECK(moegen_layer_fwd(m, &la, s) == MOEGEN_OK, "layer_fwd: %s", moegen_module_last_error(m));
  /* The EP path at R = 1. */
  moegen_permute_shape ps;
  moegen_ep_shape es;
  moegen_gemm_fwd_shape gs;
  CHECK(moegen_permute_shape_of(img, T, 1, 0, &ps) == MOEGEN_OK, "permute shape");
  CHECK(moegen_ep_shape_of(img, 1, T, MOEGEN_EP_EXACT, &es) == MOEGEN_OK, "ep shape");
  const int64_t Rp = ps.rows[0], N = es.recv_rows[0];
  CHECK(moegen_gemm_fwd_shape_of(img, MOEGEN_GEMM1, N, &gs) == MOEGEN_OK, "gemm shape");
  int32_t *idx = gpu_alloc(4 * (size_t)T * K), *counts = gpu_alloc(4 * (size_t)E);
  float *wts = gpu_alloc(4 * (size_t)T * K), *inter = gpu_alloc(4 * (size_t)T * E);
  void *rows = gpu_alloc(2 * (size_t)Rp * H), *yrows = gpu_alloc(2 * (size_t)Rp * H);
  float *pprobs = gpu_alloc(4 * (size_t)Rp);
  int32_t *row_map = gpu_alloc(4 * (size_t)T * K), *offsets = gpu_alloc(4 * (size_t)(E + 1));
  int32_t *pcounts = gpu_alloc(4 * (size_t)E);
  void *pws = gpu_alloc(ps.workspace_bytes), *gws = gpu_alloc(gs.workspace_bytes);
  void *recv = gpu_alloc(2 * (size_t)N * H), *act = gpu_alloc(2 * (size_t)N * F);
  void *h = gpu_alloc(2 * (size_t)N * 2 * F), *y2 = gpu_alloc(2 * (size_t)N * H);
  float *recv_probs = gpu_alloc(4 * (size_t)N);
  int32_t *recv_offsets = gpu_alloc(4 * (size_t)(es.recv_offsets[0] * es.recv_offsets[1]));
  int32_t *local_offsets = gpu_alloc(4 * (size_t)es.local_offsets[0]);
  void *state = gpu_alloc(es.state_bytes), *y_ep = gpu_alloc(2 * nx);
  int64_t host_sizes[4] = {-1, -1, -1, -1};
  gpu_poison(recv, 2 * (size_t)N * H), gpu_poison(recv_probs, 4 * (size_t)N);
  gpu_poison(local_offsets, 4 * (size_t)(E + 1)), gpu_poison(yrows, 2 * (size_t)Rp * H);
  gpu_poison(y_ep, 2 * nx);
  CU(gpu_drv->cuCtxSynchronize()); /* the fills and poisons (legacy stream) before s */
  moegen_status st;
  moegen_router_fwd_args ra = {.num_tokens = T, .logits = dlg, .topk_indices = idx,
                               .topk_weights = wts, .intermediate = inter,
                               .expert_counts = counts};
  st = moegen_router_fwd(m, &ra, s);
  moegen_permute_args pa = {.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .x = dx,
                            .topk_indices = idx, .probs = wts, .expert_counts = counts, .align = 1,
                            .rows = rows, .permuted_probs = pprobs, .row_map = row_map,
                            .offsets = offsets, .counts = pcounts, .workspace = pws,
                            .workspace_bytes = ps.workspace_bytes};
  if (st == MOEGEN_OK) st = moegen_permute_fwd(m, &pa, s);
  moegen_ep_args ea = {.comm = comm, .rank = 0, .ranks = 1, .mode = MOEGEN_EP_EXACT,
                       .max_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .num_rows = Rp,
                       .offsets = offsets, .rows = rows, .probs = pprobs, .recv_rows = recv,
                       .recv_probs = recv_probs, .recv_offsets = recv_offsets,
                       .local_offsets = local_offsets, .results = y2, .home_rows = yrows,
                       .host_sizes = host_sizes, .state = state, .state_bytes = es.state_bytes};
  if (st == MOEGEN_OK) st = moegen_ep_dispatch(m, &ea, s);
  moegen_gemm_glu_args g1 = {.max_rows = N, .x = recv, .w = dw1, .prob = recv_probs, .act = act,
                             .h = h, .offsets = local_offsets, .workspace = gws,
                             .workspace_bytes = gs.workspace_bytes};
  if (st == MOEGEN_OK) st = moegen_gemm1_fwd_glu(m, &g1, s);
  moegen_gemm_fwd_args g2 = {.which = MOEGEN_GEMM2, .max_rows = N, .x = act, .w = dw2, .y = y2,
                             .offsets = local_offsets, .workspace = gws,
                             .workspace_bytes = gs.workspace_bytes};
  if (st == MOEGEN_OK) st = moegen_gemm_fwd(m, &g2, s);
  if (st == MOEGEN_OK) st = moegen_ep_combine(m, &ea, s);
  moegen_unpermute_args ua = {.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .rows = yrows,
                              .row_map = row_map, .out = y_ep};
  if (st == MOEGEN_OK) st = moegen_unpermute_fwd(m, &ua, s);
  CHECK(st == MOEGEN_OK, "EP path: %s: %s", moegen_status_string(st), moegen_module_last_error(m));
  CU(gpu_drv->cuStreamSynchronize(s));
  if (st == MOEGEN_OK) {
    int32_t off[65];
    gpu_get(off, offsets, 4 * (size_t)(E + 1));
    CHECK(host_sizes[0] == 0 && host_sizes[1] == off[E] && host_sizes[2] == 0 &&
              host_sizes[3] == off[E],
          "T=%d host_sizes %lld %lld %lld %lld, permuted rows %d", T, (long long)host_sizes[0],
          (long long)host_sizes[1], (long long)host_sizes[2], (long long)host_sizes[3], off[E]);
    CHECK(same_bytes(local_offsets, offsets, 4 * (size_t)(E + 1)), "T=%d local_offsets", T);
    CHECK(same_bytes(recv, rows, 2 * (size_t)off[E] * H), "T=%d received rows", T);
    CHECK(same_bytes(recv_probs, pprobs, 4 * (size_t)off[E]), "T=%d received probs", T);
    CHECK(same_bytes(y_ep, y_ref, 2 * nx), "T=%d EP y differs from layer_fwd's", T);
    if (T > 0) {
      float *ref = malloc(4 * nx);
      uint16_t *got = malloc(2 * nx);
      layer_ref_io io = {T, x, lg, NULL, w1, w2, NULL};
      layer_ref_fwd(&c, &io, ref);
      gpu_get(got, y_ep, 2 * nx);
      CHECK(layer_compare("EP y vs layer_ref_fwd", got, 0, ref, nx), "T=%d reference", T);
      free(ref);
      free(got);
    }
  }
  printf("%s R=1 T=%d: EP forward vs layer_fwd bit for bit\n", failures == before ? "ok  " : "FAIL",
         T);
  /* The backward, both ways. */
  const int bwd_before = failures;
  float *dy = malloc(4 * nx + 4);
  void *ddy = dev_bf16(dy, nx, 1.f);
  void *gx = gpu_alloc(2 * nx), *glg = gpu_alloc(2 * (size_t)T * E), *gw1 = gpu_alloc(2 * n1),
       *gw2 = gpu_alloc(2 * n2);
  void *ex = gpu_alloc(2 * nx), *elg = gpu_alloc(2 * (size_t)T * E), *ew1 = gpu_alloc(2 * n1),
       *ew2 = gpu_alloc(2 * n2);
  void *dyrows = gpu_alloc(2 * (size_t)Rp * H), *dy2 = gpu_alloc(2 * (size_t)N * H);
  void *dh = gpu_alloc(2 * (size_t)N * 2 * F), *dxr = gpu_alloc(2 * (size_t)N * H);
  void *gxrows = gpu_alloc(2 * (size_t)Rp * H);
  float *dprob = gpu_alloc(4 * (size_t)N), *hprob = gpu_alloc(4 * (size_t)Rp);
  float *gwts = gpu_alloc(4 * (size_t)T * K);
  void *outs[] = {gx, glg, gw1, gw2, ex, elg, ew1, ew2};
  size_t out_bytes[] = {2 * nx, 2 * (size_t)T * E, 2 * n1, 2 * n2};
  for (int i = 0; i < 8; i++) gpu_poison(outs[i], out_bytes[i % 4]);
  gpu_poison(dxr, 2 * (size_t)N * H), gpu_poison(gxrows, 2 * (size_t)Rp * H);
  CU(gpu_drv->cuCtxSynchronize());
  moegen_layer_bwd_args lb = {.num_tokens = T, .max_tokens = T, .dy = ddy, .w1 = dw1, .w2 = dw2,
                              .saved = saved, .saved_bytes = ls.saved_bytes, .dx = gx,
                              .dlogits = glg, .dw1 = gw1, .dw2 = gw2, .workspace = ws,
                              .workspace_bytes = ls.workspace_bytes};
  st = moegen_layer_bwd(m, &lb, s);
  CHECK(st == MOEGEN_OK, "layer_bwd: %s", moegen_module_last_error(m));
  moegen_unpermute_bwd_args ub = {.num_tokens = T, .num_rows = Rp, .dtype = MOEGEN_DTYPE_BF16,
                                  .grad_out = ddy, .row_map = row_map, .offsets = offsets,
                                  .counts = pcounts, .grad_rows = dyrows};
  st = moegen_unpermute_bwd(m, &ub, s);
  moegen_ep_args eb = ea;
  eb.reuse = 1, eb.rows = dyrows, eb.probs = NULL, eb.recv_rows = dy2, eb.recv_probs = NULL;
  eb.results = dxr, eb.results_probs = dprob, eb.home_rows = gxrows, eb.home_probs = hprob;
  if (st == MOEGEN_OK) st = moegen_ep_dispatch(m, &eb, s);
  if (st == MOEGEN_OK && N > 0)
    CU(gpu_drv->cuMemsetD32Async((CUdeviceptr)(uintptr_t)dprob, 0, (size_t)N, s));
  moegen_gemm_dglu_args dg = {.max_rows = N, .dy = dy2, .w = dw2, .h = h, .prob = recv_probs,
                              .dh = dh, .dprob = dprob, .offsets = local_offsets,
                              .workspace = gws, .workspace_bytes = gs.workspace_bytes};
  if (st == MOEGEN_OK) st = moegen_gemm2_dgrad_glu(m, &dg, s);
  moegen_gemm_wgrad_args w2g = {.which = MOEGEN_GEMM2, .max_rows = N, .dy = dy2, .x = act,
                                .dw = ew2, .offsets = local_offsets};
  moegen_gemm_wgrad_args w1g = {.which = MOEGEN_GEMM1, .max_rows = N, .dy = dh, .x = recv,
                                .dw = ew1, .offsets = local_offsets};
  if (st == MOEGEN_OK) st = moegen_gemm_wgrad(m, &w2g, s);
  if (st == MOEGEN_OK) st = moegen_gemm_wgrad(m, &w1g, s);
  moegen_gemm_dgrad_args d1 = {.which = MOEGEN_GEMM1, .max_rows = N, .dy = dh, .w = dw1,
                               .dx = dxr, .offsets = local_offsets, .workspace = gws,
                               .workspace_bytes = gs.workspace_bytes};
  if (st == MOEGEN_OK) st = moegen_gemm_dgrad(m, &d1, s);
  if (st == MOEGEN_OK) st = moegen_ep_combine(m, &eb, s);
  moegen_permute_bwd_args pb = {.num_tokens = T, .dtype = MOEGEN_DTYPE_BF16, .grad_rows = gxrows,
                                .row_map = row_map, .grad_x = ex, .grad_permuted_probs = hprob,
                                .grad_probs = gwts};
  if (st == MOEGEN_OK) st = moegen_permute_bwd(m, &pb, s);
  moegen_router_bwd_args rb = {.num_tokens = T, .grad_weights = gwts, .intermediate = inter,
                               .topk_indices = idx, .grad_logits = elg};
  if (st == MOEGEN_OK) st = moegen_router_bwd(m, &rb, s);
  CHECK(st == MOEGEN_OK, "EP backward: %s: %s", moegen_status_string(st),
        moegen_module_last_error(m));
  CU(gpu_drv->cuStreamSynchronize(s));
  if (st == MOEGEN_OK) {
    CHECK(same_bytes(ex, gx, 2 * nx), "T=%d EP dx differs from layer_bwd's", T);
    CHECK(same_bytes(ew1, gw1, 2 * n1), "T=%d EP dw1 differs from layer_bwd's", T);
    CHECK(same_bytes(ew2, gw2, 2 * n2), "T=%d EP dw2 differs from layer_bwd's", T);
    const size_t nl = (size_t)T * E;
    uint16_t *a16 = malloc(2 * nl + 2), *b16 = malloc(2 * nl + 2);
    float *bf = malloc(4 * nl + 4);
    gpu_get(a16, elg, 2 * nl);
    gpu_get(b16, glg, 2 * nl);
    for (size_t i = 0; i < nl; i++) bf[i] = bf16_to_f32(b16[i]);
    CHECK(!nl || layer_compare("EP dlogits vs layer_bwd", a16, 0, bf, nl), "T=%d dlogits", T);
    free(a16), free(b16), free(bf);
  }
  printf("%s R=1 T=%d: EP backward vs layer_bwd (dx, dw1, dw2 bit for bit; dlogits)\n",
         failures == bwd_before ? "ok  " : "FAIL", T);
  void *bbufs[] = {ddy, gx, glg, gw1, gw2, ex, elg, ew1, ew2, dyrows, dy2, dh, dxr, gxrows, dprob,
                   hprob, gwts};
  for (size_t i = 0; i < sizeof bbufs / sizeof bbufs[0]; i++) gpu_free(bbufs[i]);
  free(dy);
  void *bufs[] = {dx, dlg, dw1, dw2, y_ref, saved, ws, idx, counts, wts, inter, rows, yrows, pprobs,
                  row_map, offsets, pcounts, pws, gws, recv, act, h, y2, recv_probs,
                  recv_offsets, local_offsets, state, y_ep};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu_free(bufs[i]);
  free(x), free(lg), free(w1), free(w2);
}

int main(void) {
  gpu_init_or_skip();
  rng_seed();
  moegen_config c = layer_config(&model, "eptest");
  if (gpu_warm()) { /* warm mode: compile only (no NCCL needed) */
    test_jit(&c, LAYER_UNITS, model.name);
    return failures ? 1 : 0;
  }
  struct ncclComm *comm = one_rank_comm();
  moegen_module *m = test_jit(&c, LAYER_UNITS, model.name);
  if (!m) return 1;
  CUstream s;
  CU(gpu_drv->cuStreamCreate(&s, MOEGEN_CU_STREAM_NON_BLOCKING));
  static const int own_tokens[] = {1, 77, 0};
  int tokens[GPU_MAX_TOKENS];
  const int nt = gpu_tokens(own_tokens, 3, tokens);
  for (int t = 0; t < nt; t++) run_case(m, comm, tokens[t], s);
  CU(gpu_drv->cuStreamDestroy(s));
  moegen_module_destroy(m);
  nccl_comm_destroy(comm);
  printf("%s\n", failures ? "EP GPU test FAILED" : "EP GPU test passed");
  return failures ? 1 : 0;
}
