/* runtime/ops_layer.c -- the MoE layer, forward and backward, as one call
 * each: router -> permute -> GEMM1 + SwiGLU (prob-scaled) -> GEMM2 ->
 * unpermute, and the way back. It is a fixed composition of the module's
 * ops (no kernels of its own): every buffer between them lives in the
 * caller's `saved` (kept from the forward for the backward) or `workspace`
 * (scratch), carved here by one layout function that the shape function,
 * the forward and the backward share. No host sync, no allocation: the
 * whole forward + backward is capturable in one CUDA graph. */
#include <string.h>

#include "module.h"
#include "moegen/config.h"

enum { ALIGN = 256 }; /* every carved buffer starts on a 256-byte boundary */

/* Where each buffer lives, as byte offsets into saved or workspace. */
typedef struct layer_layout {
  int64_t rows;                      /* R = max_tokens * K: rows of the permuted buffers */
  size_t idx, weights, inter, counts; /* saved: router outputs (no inter: router_bwd = recompute) */
  size_t row_map, offsets, pcounts, pprobs, xrows, h, act; /* saved: permute + GEMM1 */
  size_t saved_bytes;
  size_t perm_ws, perm_ws_bytes, y2, dh, dprob, gw; /* workspace (y2 is also dy2, then dxr) */
  size_t gemm_ws, gemm_ws_bytes; /* workspace: the GEMMs' tile ticket (one call at a time) */
  size_t workspace_bytes;
} layer_layout;

static size_t take(size_t *cursor, size_t bytes) {
  size_t at = *cursor;
  *cursor += (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return at;
}

/* The layout for up to max_tokens tokens; NOT_SUPPORTED if the module lacks
 * a kernel the layer needs. */
static moegen_status layout_of(const moegen_image *img, int64_t max_tokens, layer_layout *L) {
  if (!moegen_has_kernel(img, MOEGEN_KERNEL_GEMM1_FWD_GLU) ||
      !moegen_has_kernel(img, MOEGEN_KERNEL_PERMUTE_ROUTES) ||
      !moegen_has_kernel(img, MOEGEN_KERNEL_ROUTER_FWD))
    return MOEGEN_ERR_NOT_SUPPORTED;
  const int64_t T = max_tokens, E = img->router.experts, K = img->router.topk;
  const int64_t H = img->gemm.gemm1.k, F = img->gemm.gemm2.k;
  const size_t esz = 2; /* bf16 / fp16 activations and weights */
  moegen_permute_shape ps;
  moegen_status st = moegen_permute_shape_of(img, T, 1, 0, &ps);
  if (st != MOEGEN_OK) return st;
  memset(L, 0, sizeof *L);
  const int64_t R = ps.rows[0];
  L->rows = R;
  size_t c = 0;
  L->idx = take(&c, 4 * (size_t)(T * K));
  L->weights = take(&c, 4 * (size_t)(T * K));
  /* router_bwd = recompute: the backward recomputes the router's state from the logits */
  L->inter = img->router_bwd.recompute ? 0 : take(&c, 4 * (size_t)(T * E));
  L->counts = take(&c, 4 * (size_t)E);
  L->row_map = take(&c, 4 * (size_t)(T * K));
  L->offsets = take(&c, 4 * (size_t)(E + 1));
  L->pcounts = take(&c, 4 * (size_t)E);
  L->pprobs = take(&c, 4 * (size_t)R);
  L->xrows = take(&c, esz * (size_t)(R * H));
  L->h = take(&c, esz * (size_t)(R * 2 * F));
  L->act = take(&c, esz * (size_t)(R * F));
  L->saved_bytes = c;
  c = 0;
  L->perm_ws_bytes = ps.workspace_bytes;
  L->perm_ws = take(&c, ps.workspace_bytes);
  L->y2 = take(&c, esz * (size_t)(R * H));
  L->dh = take(&c, esz * (size_t)(R * 2 * F));
  L->dprob = take(&c, 4 * (size_t)R);
  L->gw = take(&c, 4 * (size_t)(T * K));
  moegen_gemm_fwd_shape gs;
  if ((st = moegen_gemm_fwd_shape_of(img, MOEGEN_GEMM1, R, &gs)) != MOEGEN_OK) return st;
  L->gemm_ws_bytes = gs.workspace_bytes;
  L->gemm_ws = take(&c, gs.workspace_bytes);
  L->workspace_bytes = c;
  return MOEGEN_OK;
}

moegen_status moegen_layer_shape_of(const moegen_image *image, int64_t max_tokens,
                                    moegen_layer_shape *shape) {
  if (!image || !shape || max_tokens < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  layer_layout L;
  moegen_status st = layout_of(image, max_tokens, &L);
  if (st != MOEGEN_OK) return st;
  memset(shape, 0, sizeof *shape);
  const int64_t E = image->router.experts, H = image->gemm.gemm1.k, F = image->gemm.gemm2.k;
  shape->x[0] = shape->y[0] = max_tokens;
  shape->x[1] = shape->y[1] = H;
  shape->logits[0] = max_tokens;
  shape->logits[1] = E;
  shape->w1[0] = shape->w2[0] = E;
  shape->w1[1] = 2 * F;
  shape->w1[2] = H;
  shape->w2[1] = H;
  shape->w2[2] = F;
  shape->rows = L.rows;
  shape->saved_bytes = L.saved_bytes;
  shape->workspace_bytes = L.workspace_bytes;
  return MOEGEN_OK;
}

/* Buffer at byte offset off of saved or workspace (the backward only reads saved). */
#define AT(base, off) ((void *)((const char *)(base) + (off)))

/* Checks what forward and backward share; fills the layout. At T = 0
 * neither op touches saved or workspace: they may be NULL (if given they
 * are checked all the same). */
static moegen_status check_layer(moegen_module *m, const char *what, int64_t T, int64_t max_tokens,
                                 const void *saved, size_t saved_bytes, const void *ws,
                                 size_t ws_bytes, layer_layout *L) {
  const moegen_image *img = moegen_module_image(m);
  if (T < 0 || T > max_tokens)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: num_tokens = %lld is outside [0, max_tokens = %lld]", what,
                              (long long)T, (long long)max_tokens);
  moegen_status st = layout_of(img, max_tokens, L);
  if (st != MOEGEN_OK)
    return moegen_module_fail(m, st,
                              "%s: module %s (%s) lacks the grouped GEMM or permute kernels (they "
                              "need sm_80 or later and hidden, ffn multiples of 8)", what, img->name,
                              img->arch);
  if ((T > 0 || saved) && (!saved || saved_bytes < L->saved_bytes || ((uintptr_t)saved % ALIGN)))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: saved = %p (%zu bytes) must be %d-byte aligned and hold %zu "
                              "bytes (moegen_layer_shape_of)", what, saved, saved_bytes, ALIGN,
                              L->saved_bytes);
  if ((T > 0 || ws) && (!ws || ws_bytes < L->workspace_bytes || ((uintptr_t)ws % ALIGN)))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: workspace = %p (%zu bytes) must be %d-byte aligned and hold %zu "
                              "bytes (moegen_layer_shape_of)", what, ws, ws_bytes, ALIGN,
                              L->workspace_bytes);
  return MOEGEN_OK;
}

moegen_status moegen_layer_fwd(moegen_module *m, const moegen_layer_fwd_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  layer_layout L;
  moegen_status st = check_layer(m, "layer_fwd", a->num_tokens, a->max_tokens, a->saved,
                                 a->saved_bytes, a->workspace, a->workspace_bytes, &L);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  const moegen_image *img = moegen_module_image(m);
  const int64_t T = a->num_tokens, R = T * img->router.topk;
  void *s = a->saved, *w = a->workspace;
  moegen_router_fwd_args ra = {.num_tokens = T,
                               .logits = a->logits,
                               .expert_bias = a->expert_bias,
                               .topk_indices = AT(s, L.idx),
                               .topk_weights = AT(s, L.weights),
                               .intermediate = img->router_bwd.recompute ? NULL : AT(s, L.inter),
                               .expert_counts = AT(s, L.counts)};
  st = moegen_router_fwd(m, &ra, stream);
  if (st != MOEGEN_OK) return st;
  moegen_permute_args pa = {.num_tokens = T,
                            .dtype = MOEGEN_DTYPE_BF16,
                            .x = a->x,
                            .topk_indices = AT(s, L.idx),
                            .probs = AT(s, L.weights),
                            .expert_counts = AT(s, L.counts),
                            .align = 1,
                            .rows = AT(s, L.xrows),
                            .permuted_probs = AT(s, L.pprobs),
                            .row_map = AT(s, L.row_map),
                            .offsets = AT(s, L.offsets),
                            .counts = AT(s, L.pcounts),
                            .workspace = AT(w, L.perm_ws),
                            .workspace_bytes = L.perm_ws_bytes};
  st = moegen_permute_fwd(m, &pa, stream);
  if (st != MOEGEN_OK) return st;
  moegen_gemm_glu_args ga = {.max_rows = R,
                             .x = AT(s, L.xrows),
                             .w = a->w1,
                             .prob = AT(s, L.pprobs),
                             .act = AT(s, L.act),
                             .h = AT(s, L.h),
                             .offsets = AT(s, L.offsets),
                             .workspace = AT(w, L.gemm_ws),
                             .workspace_bytes = L.gemm_ws_bytes};
  st = moegen_gemm1_fwd_glu(m, &ga, stream);
  if (st != MOEGEN_OK) return st;
  moegen_gemm_fwd_args g2 = {.which = MOEGEN_GEMM2,
                             .max_rows = R,
                             .x = AT(s, L.act),
                             .w = a->w2,
                             .y = AT(w, L.y2),
                             .offsets = AT(s, L.offsets),
                             .workspace = AT(w, L.gemm_ws),
                             .workspace_bytes = L.gemm_ws_bytes};
  st = moegen_gemm_fwd(m, &g2, stream);
  if (st != MOEGEN_OK) return st;
  moegen_unpermute_args ua = {.num_tokens = T,
                              .dtype = MOEGEN_DTYPE_BF16,
                              .rows = AT(w, L.y2),
                              .row_map = AT(s, L.row_map),
                              .out = a->y};
  return moegen_unpermute_fwd(m, &ua, stream);
}

/* Both weight grads from dy2 (in y2's space) and dh over R > 0 rows. */
static moegen_status weight_grads(moegen_module *m, const moegen_layer_bwd_args *a,
                                  const layer_layout *L, int64_t R, CUstream stream) {
  const void *s = a->saved;
  void *w = a->workspace;
  moegen_gemm_wgrad_args w2g = {.which = MOEGEN_GEMM2,
                                .max_rows = R,
                                .dy = AT(w, L->y2),
                                .x = AT(s, L->act),
                                .dw = a->dw2,
                                .accumulate = a->accumulate,
                                .offsets = AT(s, L->offsets)};
  moegen_status st = moegen_gemm_wgrad(m, &w2g, stream);
  moegen_gemm_wgrad_args w1g = {.which = MOEGEN_GEMM1,
                                .max_rows = R,
                                .dy = AT(w, L->dh),
                                .x = AT(s, L->xrows),
                                .dw = a->dw1,
                                .accumulate = a->accumulate,
                                .offsets = AT(s, L->offsets)};
  return st != MOEGEN_OK ? st : moegen_gemm_wgrad(m, &w1g, stream);
}

moegen_status moegen_layer_bwd(moegen_module *m, const moegen_layer_bwd_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  layer_layout L;
  moegen_status st = check_layer(m, "layer_bwd", a->num_tokens, a->max_tokens, a->saved,
                                 a->saved_bytes, a->workspace, a->workspace_bytes, &L);
  if (st != MOEGEN_OK) return st;
  const moegen_image *img = moegen_module_image(m);
  const int64_t T = a->num_tokens, R = T * img->router.topk;
  const int recompute = img->router_bwd.recompute;
  if (T > 0 && !a->logits != !!recompute)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "layer_bwd: logits %s the config has router_bwd = %s", a->logits
                              ? "given but" : "is NULL but", recompute ? "recompute (the router "
                              "backward reads the forward's logits)" : "saved (pass NULL)");
  if (T == 0) { /* an empty batch: zero weight grads (accumulate: main_grad kept); reads nothing */
    if (!a->accumulate && (!a->dw1 || !a->dw2))
      return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                                "layer_bwd: dw1 and dw2 are written also when num_tokens = 0 "
                                "(zeros) and may not be NULL");
    moegen_gemm_wgrad_args g2 = {.which = MOEGEN_GEMM2, .dw = a->dw2, .accumulate = a->accumulate};
    moegen_gemm_wgrad_args g1 = {.which = MOEGEN_GEMM1, .dw = a->dw1, .accumulate = a->accumulate};
    st = moegen_gemm_wgrad(m, &g2, stream);
    return st != MOEGEN_OK ? st : moegen_gemm_wgrad(m, &g1, stream);
  }
  const void *s = a->saved;
  void *w = a->workspace;
  /* dy2 = dy at each route's row (probs were applied in GEMM1's epilogue). */
  moegen_unpermute_bwd_args ub = {.num_tokens = T,
                                  .num_rows = R,
                                  .dtype = MOEGEN_DTYPE_BF16,
                                  .grad_out = a->dy,
                                  .row_map = AT(s, L.row_map),
                                  .offsets = AT(s, L.offsets),
                                  .counts = AT(s, L.pcounts),
                                  .grad_rows = AT(w, L.y2)};
  st = moegen_unpermute_bwd(m, &ub, stream);
  if (st != MOEGEN_OK) return st;
  CUresult r = moegen_module_driver(m)->cuMemsetD32Async(
      (CUdeviceptr)(uintptr_t)AT(w, L.dprob), 0, (size_t)R, stream);
  if (r) return moegen_module_cuda_fail(m, r, "layer_bwd: cuMemsetD32Async(dprob)");
  /* dh = SwiGLU backward of dact = dy2 w2; dprob += dact . silu(g) u. */
  moegen_gemm_dglu_args dg = {.max_rows = R,
                              .dy = AT(w, L.y2),
                              .w = a->w2,
                              .h = AT(s, L.h),
                              .prob = AT(s, L.pprobs),
                              .dh = AT(w, L.dh),
                              .dprob = AT(w, L.dprob),
                              .offsets = AT(s, L.offsets),
                              .workspace = AT(w, L.gemm_ws),
                              .workspace_bytes = L.gemm_ws_bytes};
  st = moegen_gemm2_dgrad_glu(m, &dg, stream);
  if (st == MOEGEN_OK) st = weight_grads(m, a, &L, R, stream);
  if (st != MOEGEN_OK) return st;
  /* dxr = dh w1 (into y2's space: dy2 is no longer needed). */
  moegen_gemm_dgrad_args d1 = {.which = MOEGEN_GEMM1,
                               .max_rows = R,
                               .dy = AT(w, L.dh),
                               .w = a->w1,
                               .dx = AT(w, L.y2),
                               .offsets = AT(s, L.offsets),
                               .workspace = AT(w, L.gemm_ws),
                               .workspace_bytes = L.gemm_ws_bytes};
  st = moegen_gemm_dgrad(m, &d1, stream);
  if (st != MOEGEN_OK) return st;
  /* dx = sum of each token's row grads; the route-weight grads back to [T, K]. */
  moegen_permute_bwd_args pb = {.num_tokens = T,
                                .dtype = MOEGEN_DTYPE_BF16,
                                .grad_rows = AT(w, L.y2),
                                .row_map = AT(s, L.row_map),
                                .grad_x = a->dx,
                                .grad_permuted_probs = AT(w, L.dprob),
                                .grad_probs = AT(w, L.gw)};
  st = moegen_permute_bwd(m, &pb, stream);
  if (st != MOEGEN_OK) return st;
  moegen_router_bwd_args rb = {.num_tokens = T,
                               .grad_weights = AT(w, L.gw),
                               .intermediate = recompute ? NULL : AT(s, L.inter),
                               .logits = a->logits,
                               .topk_indices = AT(s, L.idx),
                               .grad_logits = a->dlogits};
  return moegen_router_bwd(m, &rb, stream);
}
