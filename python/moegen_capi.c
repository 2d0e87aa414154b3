/* python/moegen_capi.c -- the few C entry points the Python package needs
 * beyond moegen.h / runtime.h, in libmoegen.so (which also exports every
 * moegen_* function of the runtime and the generator library). The package
 * loads the library with ctypes, so each function here takes and returns
 * plain scalars and pointers: no struct crosses the boundary by value, and
 * no layout is restated in Python. Errors: a status (or sysexits code) and
 * the message in the caller's buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "driver.h"
#include "moegen/moegen.h"

/* In a shape function's wrapper (a shape struct `sh`, the field `name`
 * asked for, `dims` out): the shape of field f into dims, returning its
 * rank, when name is f. */
#define MGP_DIMS_(f)                                      \
  if (!strcmp(name, #f)) {                                \
    memcpy(dims, sh.f, sizeof sh.f);                      \
    return (int)(sizeof sh.f / sizeof sh.f[0]);           \
  }

/* Copies err's message into buf (size bytes) and returns err->code. */
static int report(const moegen_error *err, char *buf, size_t size) {
  if (buf && size) snprintf(buf, size, "%s", err->msg);
  return err->code;
}

/* A config from its sources, applied in the CLI's order onto the defaults:
 * a preset (or NULL), a Hugging Face config.json path (or NULL), a Lua file
 * path (or NULL), then nsets "key=value" overrides (argument positions
 * 1..nsets in messages), then validated. Returns 0 and *out (free it with
 * mgp_config_free), or the sysexits code with the message in why. */
int mgp_config_new(const char *preset, const char *hf_config, const char *lua,
                   const char *const *sets, int nsets, moegen_config **out, char *why,
                   size_t why_size) {
  moegen_error err = {0};
  *out = NULL;
  moegen_config *c = malloc(sizeof *c);
  if (!c) {
    snprintf(why, why_size, "out of memory");
    return EX_OSERR;
  }
  moegen_config_defaults(c);
  int rc = 0;
  if (preset) rc = moegen_config_preset(c, preset, &err);
  if (!rc && hf_config) rc = moegen_config_load_hf(c, hf_config, &err);
  if (!rc && lua) rc = moegen_config_load_lua(c, lua, &err);
  for (int i = 0; !rc && i < nsets; i++) rc = moegen_config_set(c, sets[i], i + 1, &err);
  if (!rc) rc = moegen_config_validate(c, &err);
  if (rc) {
    free(c);
    return report(&err, why, why_size);
  }
  *out = c;
  return 0;
}

void mgp_config_free(moegen_config *c) { free(c); }

/* The sizes and kinds the Python side needs of a config (any output may be
 * NULL): E, K, H, F, logits dtype, activation dtype (moegen_dtype values),
 * whether it has an expert bias and quantile balancing. */
void mgp_config_dims(const moegen_config *c, int *experts, int *topk, int *hidden, int *ffn,
                     int *logits_dtype, int *dtype, int *expert_bias, int *quantile_balancing) {
  if (experts) *experts = c->experts;
  if (topk) *topk = c->topk;
  if (hidden) *hidden = c->hidden;
  if (ffn) *ffn = c->ffn;
  if (logits_dtype) *logits_dtype = (int)c->logits_dtype;
  if (dtype) *dtype = (int)c->dtype;
  if (expert_bias) *expert_bias = c->expert_bias;
  if (quantile_balancing) *quantile_balancing = c->quantile_balancing;
}

/* The config as a Lua table into buf; returns the length it needs (as
 * moegen_config_to_lua). The package hashes it to name the module. */
size_t mgp_config_lua(const moegen_config *c, char *buf, size_t size) {
  return moegen_config_to_lua(c, buf, size);
}

/* A rendered image for shape functions only (no source kept, no driver, no
 * GPU): the plans moegen_jit(c, arch) would give its module, since
 * rendering is deterministic. */
typedef struct mgp_image {
  moegen_image image; /* first: a mgp_image * is a moegen_image * */
  char arch[16];
} mgp_image;

/* Renders c for arch ("sm_90a", ...; required) into *out (free it with
 * mgp_image_free). Returns 0 or the sysexits code, message in why. */
int mgp_image_new(const moegen_config *c, const char *arch, mgp_image **out, char *why,
                  size_t why_size) {
  moegen_error err = {0};
  *out = NULL;
  mgp_image *img = calloc(1, sizeof *img);
  if (!img) {
    snprintf(why, why_size, "out of memory");
    return EX_OSERR;
  }
  snprintf(img->arch, sizeof img->arch, "%s", arch);
  moegen_gen_options opt = {.name = "py", .arch = img->arch, .compile = MOEGEN_COMPILE_JIT,
                            .command_line = "moegen (Python)"};
  moegen_sources src;
  int rc = moegen_render(c, &opt, &src, &err);
  if (rc) {
    free(img);
    return report(&err, why, why_size);
  }
  img->image = src.image;
  img->image.name = "py";
  img->image.arch = img->arch;
  moegen_sources_free(&src);
  *out = img;
  return 0;
}

void mgp_image_free(mgp_image *img) { free(img); }

/* moegen_jit with the message in why instead of a moegen_error. */
moegen_status mgp_jit(const moegen_config *c, const char *arch, moegen_module **out, char *why,
                      size_t why_size) {
  moegen_error err = {0};
  moegen_status st = moegen_jit(c, arch, out, &err);
  if (st != MOEGEN_OK) report(&err, why, why_size);
  return st;
}

/* Makes device `ordinal`'s primary context current on the calling thread
 * if no context is (PyTorch's worker threads, e.g. autograd's, may have
 * none current until their first CUDA runtime call); leaves a current one
 * alone. Returns MOEGEN_OK or the error, message in why. */
moegen_status mgp_bind_device(int ordinal, char *why, size_t why_size) {
  const moegen_driver *d;
  moegen_status st = moegen_driver_get(&d, why, why_size);
  if (st != MOEGEN_OK) return st;
  CUcontext ctx = NULL;
  CUresult r = d->cuCtxGetCurrent(&ctx);
  if (!r && ctx) return MOEGEN_OK;
  CUdevice dev;
  if (!r) r = d->cuDeviceGet(&dev, ordinal);
  if (!r) r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
  if (!r) r = d->cuCtxSetCurrent(ctx);
  if (r) {
    moegen_driver_describe(r, why, why_size);
    return MOEGEN_ERR_CUDA;
  }
  return MOEGEN_OK;
}

/* ---------------------------------------------------------------- the layer */

/* moegen_layer_shape_of's byte counts (saved, workspace) for T tokens. */
moegen_status mgp_layer_bytes(const moegen_image *img, int64_t T, int64_t *saved_bytes,
                              int64_t *workspace_bytes) {
  moegen_layer_shape sh;
  moegen_status st = moegen_layer_shape_of(img, T, &sh);
  if (st != MOEGEN_OK) return st;
  *saved_bytes = (int64_t)sh.saved_bytes;
  *workspace_bytes = (int64_t)sh.workspace_bytes;
  return MOEGEN_OK;
}

/* moegen_layer_fwd at max_tokens = T (shapes as in moegen_layer_fwd_args). */
moegen_status mgp_layer_fwd(moegen_module *m, int64_t T, const void *x, const void *logits,
                            const float *expert_bias, const void *w1, const void *w2, void *y,
                            void *saved, int64_t saved_bytes, void *workspace,
                            int64_t workspace_bytes, CUstream stream) {
  moegen_layer_fwd_args a = {.num_tokens = T, .max_tokens = T, .x = x, .logits = logits,
                             .expert_bias = expert_bias, .w1 = w1, .w2 = w2, .y = y,
                             .saved = saved, .saved_bytes = (size_t)saved_bytes,
                             .workspace = workspace, .workspace_bytes = (size_t)workspace_bytes};
  return moegen_layer_fwd(m, &a, stream);
}

/* moegen_layer_bwd at max_tokens = T with bf16 weight grads (accumulate = 0). */
moegen_status mgp_layer_bwd(moegen_module *m, int64_t T, const void *dy, const void *w1,
                            const void *w2, const void *saved, int64_t saved_bytes, void *dx,
                            void *dlogits, void *dw1, void *dw2, void *workspace,
                            int64_t workspace_bytes, CUstream stream) {
  moegen_layer_bwd_args a = {.num_tokens = T, .max_tokens = T, .dy = dy, .w1 = w1, .w2 = w2,
                             .saved = saved, .saved_bytes = (size_t)saved_bytes, .dx = dx,
                             .dlogits = dlogits, .dw1 = dw1, .dw2 = dw2, .accumulate = 0,
                             .workspace = workspace,
                             .workspace_bytes = (size_t)workspace_bytes};
  return moegen_layer_bwd(m, &a, stream);
}

/* ---------------------------------------------------------------- the router */

/* The moegen_index_dtype value of an index dtype name ("int32", "int16",
 * "int64"), or -1. */
int mgp_index_dtype(const char *name) {
#define MGP_INDEX_(e, n, value) if (!strcmp(name, #n)) return value;
  MOEGEN_INDEX_DTYPES(MGP_INDEX_)
#undef MGP_INDEX_
  return -1;
}

/* One output's shape of moegen_router_fwd_shape_of at T tokens, by its
 * field name ("probs", "routing_map", "routing_bitmap", "topk_indices",
 * "topk_weights", "intermediate", "expert_counts", "qb_cutoff") into
 * dims[2]; returns its rank (1 or 2), 0 for an unknown name, or minus the
 * shape function's status. */
int mgp_router_fwd_shape(const moegen_image *img, int64_t T, const char *name, int64_t *dims) {
  moegen_router_fwd_shape sh;
  moegen_status st = moegen_router_fwd_shape_of(img, T, &sh);
  if (st != MOEGEN_OK) return -(int)st;
  MGP_DIMS_(probs) MGP_DIMS_(routing_map) MGP_DIMS_(routing_bitmap) MGP_DIMS_(topk_indices)
  MGP_DIMS_(topk_weights) MGP_DIMS_(intermediate) MGP_DIMS_(expert_counts) MGP_DIMS_(qb_cutoff)
  return 0;
}

/* moegen_router_fwd (shapes as in moegen_router_fwd_args; NULL outputs are
 * not written). */
moegen_status mgp_router_fwd(moegen_module *m, int64_t T, const void *logits,
                             const float *expert_bias, void *probs, uint8_t *routing_map,
                             uint8_t *routing_bitmap, void *topk_indices, int index_dtype,
                             float *topk_weights, float *intermediate, int32_t *expert_counts,
                             int32_t *qb_histogram, int qb_bins, const float *qb_bounds,
                             float *qb_cutoff, CUstream stream) {
  moegen_router_fwd_args a = {.num_tokens = T, .logits = logits, .expert_bias = expert_bias,
                              .probs = probs, .routing_map = routing_map,
                              .routing_bitmap = routing_bitmap, .topk_indices = topk_indices,
                              .index_dtype = (moegen_index_dtype)index_dtype,
                              .topk_weights = topk_weights, .intermediate = intermediate,
                              .expert_counts = expert_counts, .qb_histogram = qb_histogram,
                              .qb_bins = qb_bins, .qb_bounds = qb_bounds, .qb_cutoff = qb_cutoff};
  return moegen_router_fwd(m, &a, stream);
}

/* moegen_router_bwd (exactly one of grad_probs, grad_weights; exactly one
 * routing). */
moegen_status mgp_router_bwd(moegen_module *m, int64_t T, const void *grad_probs,
                             const float *grad_weights, const float *intermediate,
                             const uint8_t *routing_map, const uint8_t *routing_bitmap,
                             const void *topk_indices, int index_dtype, void *grad_logits,
                             CUstream stream) {
  moegen_router_bwd_args a = {.num_tokens = T, .grad_probs = grad_probs,
                              .grad_weights = grad_weights, .intermediate = intermediate,
                              .routing_map = routing_map, .routing_bitmap = routing_bitmap,
                              .topk_indices = topk_indices,
                              .index_dtype = (moegen_index_dtype)index_dtype,
                              .grad_logits = grad_logits};
  return moegen_router_bwd(m, &a, stream);
}

/* moegen_jit_warm with the message in why instead of a moegen_error. */
moegen_status mgp_jit_warm(const moegen_config *c, const char *arch, int *compiled, char *why,
                           size_t why_size) {
  moegen_error err = {0};
  moegen_status st = moegen_jit_warm(c, arch, compiled, &err);
  if (st != MOEGEN_OK) report(&err, why, why_size);
  return st;
}

/* ---------------------------------------------------------------- permutation */

/* The moegen_dtype value of a dtype name ("fp32", "bf16", "fp16"), or -1. */
int mgp_dtype(const char *name) {
#define MGP_DTYPE_(e, n, value, bytes) if (!strcmp(name, #n)) return value;
  MOEGEN_DTYPES(MGP_DTYPE_)
#undef MGP_DTYPE_
  return -1;
}

/* One output's shape of moegen_permute_shape_of(T, align, capacity) by its
 * field name ("rows", "permuted_probs", "row_map", "offsets", "counts") into
 * dims[2], or "workspace_bytes" into dims[0]; returns the rank (1 or 2), 0
 * for an unknown name, or minus the shape function's status. */
int mgp_permute_shape(const moegen_image *img, int64_t T, int align, int capacity,
                      const char *name, int64_t *dims) {
  moegen_permute_shape sh;
  moegen_status st = moegen_permute_shape_of(img, T, align, capacity, &sh);
  if (st != MOEGEN_OK) return -(int)st;
  if (!strcmp(name, "workspace_bytes")) {
    dims[0] = (int64_t)sh.workspace_bytes;
    return 1;
  }
  MGP_DIMS_(rows) MGP_DIMS_(permuted_probs) MGP_DIMS_(row_map) MGP_DIMS_(offsets)
  MGP_DIMS_(counts)
  return 0;
}

/* moegen_permute_fwd (shapes as in moegen_permute_args). */
moegen_status mgp_permute_fwd(moegen_module *m, int64_t T, int dtype, const void *x,
                              const int32_t *topk_indices, const uint8_t *routing_map,
                              const float *probs, const int32_t *expert_counts, int align,
                              int capacity, void *rows, float *permuted_probs, int32_t *row_map,
                              int32_t *offsets, int32_t *counts, int32_t *num_dropped,
                              void *workspace, int64_t workspace_bytes, CUstream stream) {
  moegen_permute_args a = {.num_tokens = T, .dtype = (moegen_dtype)dtype, .x = x,
                           .topk_indices = topk_indices, .routing_map = routing_map,
                           .probs = probs, .expert_counts = expert_counts, .align = align,
                           .capacity = capacity, .rows = rows, .permuted_probs = permuted_probs,
                           .row_map = row_map, .offsets = offsets, .counts = counts,
                           .num_dropped = num_dropped, .workspace = workspace,
                           .workspace_bytes = (size_t)workspace_bytes};
  return moegen_permute_fwd(m, &a, stream);
}

/* moegen_permute_bwd. */
moegen_status mgp_permute_bwd(moegen_module *m, int64_t T, int dtype, const void *grad_rows,
                              const int32_t *row_map, void *grad_x,
                              const float *grad_permuted_probs, const uint8_t *routing_map,
                              float *grad_probs, CUstream stream) {
  moegen_permute_bwd_args a = {.num_tokens = T, .dtype = (moegen_dtype)dtype,
                               .grad_rows = grad_rows, .row_map = row_map, .grad_x = grad_x,
                               .grad_permuted_probs = grad_permuted_probs,
                               .routing_map = routing_map, .grad_probs = grad_probs};
  return moegen_permute_bwd(m, &a, stream);
}

/* moegen_unpermute_fwd. */
moegen_status mgp_unpermute_fwd(moegen_module *m, int64_t T, int dtype, const void *rows,
                                const int32_t *row_map, const float *merging_probs, void *out,
                                CUstream stream) {
  moegen_unpermute_args a = {.num_tokens = T, .dtype = (moegen_dtype)dtype, .rows = rows,
                             .row_map = row_map, .merging_probs = merging_probs, .out = out};
  return moegen_unpermute_fwd(m, &a, stream);
}

/* moegen_unpermute_bwd. */
moegen_status mgp_unpermute_bwd(moegen_module *m, int64_t T, int64_t R, int dtype,
                                const void *grad_out, const int32_t *row_map,
                                const int32_t *offsets, const int32_t *counts,
                                const float *merging_probs, const void *rows, void *grad_rows,
                                float *grad_probs, CUstream stream) {
  moegen_unpermute_bwd_args a = {.num_tokens = T, .num_rows = R, .dtype = (moegen_dtype)dtype,
                                 .grad_out = grad_out, .row_map = row_map, .offsets = offsets,
                                 .counts = counts, .merging_probs = merging_probs, .rows = rows,
                                 .grad_rows = grad_rows, .grad_probs = grad_probs};
  return moegen_unpermute_bwd(m, &a, stream);
}

/* ---------------------------------------------------------------- grouped GEMM */

/* One shape of moegen_gemm_fwd_shape_of(which, max_rows) by its field name
 * ("x", "w", "y", "counts"; "workspace_bytes" into dims[0]) into dims[3];
 * returns the rank, 0 for an unknown name, or minus the status. */
int mgp_gemm_shape(const moegen_image *img, int which, int64_t max_rows, const char *name,
                   int64_t *dims) {
  moegen_gemm_fwd_shape sh;
  moegen_status st = moegen_gemm_fwd_shape_of(img, (moegen_gemm_id)which, max_rows, &sh);
  if (st != MOEGEN_OK) return -(int)st;
  if (!strcmp(name, "workspace_bytes")) {
    dims[0] = (int64_t)sh.workspace_bytes;
    return 1;
  }
  MGP_DIMS_(x) MGP_DIMS_(w) MGP_DIMS_(y) MGP_DIMS_(counts)
  return 0;
}

/* moegen_gemm_fwd (shapes as in moegen_gemm_fwd_args). */
moegen_status mgp_gemm_fwd(moegen_module *m, int which, int64_t max_rows, const void *x,
                           const void *w, void *y, const int32_t *counts, const int32_t *offsets,
                           void *workspace, int64_t workspace_bytes, CUstream stream) {
  moegen_gemm_fwd_args a = {.which = (moegen_gemm_id)which, .max_rows = max_rows, .x = x,
                            .w = w, .y = y, .counts = counts, .offsets = offsets,
                            .workspace = workspace, .workspace_bytes = (size_t)workspace_bytes};
  return moegen_gemm_fwd(m, &a, stream);
}

/* moegen_gemm_dgrad. */
moegen_status mgp_gemm_dgrad(moegen_module *m, int which, int64_t max_rows, const void *dy,
                             const void *w, void *dx, const int32_t *counts,
                             const int32_t *offsets, void *workspace, int64_t workspace_bytes,
                             CUstream stream) {
  moegen_gemm_dgrad_args a = {.which = (moegen_gemm_id)which, .max_rows = max_rows, .dy = dy,
                              .w = w, .dx = dx, .counts = counts, .offsets = offsets,
                              .workspace = workspace, .workspace_bytes = (size_t)workspace_bytes};
  return moegen_gemm_dgrad(m, &a, stream);
}

/* moegen_gemm_wgrad with bf16 dw written (accumulate = 0), no bias grad. */
moegen_status mgp_gemm_wgrad(moegen_module *m, int which, int64_t max_rows, const void *dy,
                             const void *x, void *dw, const int32_t *counts,
                             const int32_t *offsets, CUstream stream) {
  moegen_gemm_wgrad_args a = {.which = (moegen_gemm_id)which, .max_rows = max_rows, .dy = dy,
                              .x = x, .dw = dw, .accumulate = 0, .counts = counts,
                              .offsets = offsets};
  return moegen_gemm_wgrad(m, &a, stream);
}

/* ---------------------------------------------------------------- aux loss */

/* The moegen_count_dtype value of a tokens_per_expert dtype name ("int32",
 * "int64", "fp32", "bf16", "int16"), or -1. */
int mgp_count_dtype(const char *name) {
#define MGP_COUNT_(e, n, value) if (!strcmp(name, #n)) return value;
  MOEGEN_COUNT_DTYPES(MGP_COUNT_)
#undef MGP_COUNT_
  return -1;
}

/* One shape of moegen_aux_scores_shape_of(T) by its field name ("scores",
 * "routing_map", "routing_bitmap", "intermediate", "grad_logits") into
 * dims[2]; returns the rank, 0 for an unknown name, or minus the status. */
int mgp_aux_scores_shape(const moegen_image *img, int64_t T, const char *name, int64_t *dims) {
  moegen_aux_scores_shape sh;
  moegen_status st = moegen_aux_scores_shape_of(img, T, &sh);
  if (st != MOEGEN_OK) return -(int)st;
  MGP_DIMS_(scores) MGP_DIMS_(routing_map) MGP_DIMS_(routing_bitmap) MGP_DIMS_(intermediate)
  MGP_DIMS_(grad_logits)
  return 0;
}

/* moegen_aux_scores_fwd. */
moegen_status mgp_aux_scores_fwd(moegen_module *m, int64_t T, const void *logits, float *scores,
                                 uint8_t *routing_map, uint8_t *routing_bitmap,
                                 float *intermediate, CUstream stream) {
  moegen_aux_scores_fwd_args a = {.num_tokens = T, .logits = logits, .scores = scores,
                                  .routing_map = routing_map, .routing_bitmap = routing_bitmap,
                                  .intermediate = intermediate};
  return moegen_aux_scores_fwd(m, &a, stream);
}

/* moegen_aux_scores_bwd. */
moegen_status mgp_aux_scores_bwd(moegen_module *m, int64_t T, const float *grad_scores,
                                 const float *intermediate, void *grad_logits, CUstream stream) {
  moegen_aux_scores_bwd_args a = {.num_tokens = T, .grad_scores = grad_scores,
                                  .intermediate = intermediate, .grad_logits = grad_logits};
  return moegen_aux_scores_bwd(m, &a, stream);
}

/* moegen_aux_loss_shape_of's workspace bytes for probs [R, C]. */
moegen_status mgp_aux_loss_workspace(const moegen_image *img, int64_t R, int64_t C,
                                     int64_t *workspace_bytes) {
  moegen_aux_loss_shape sh;
  moegen_status st = moegen_aux_loss_shape_of(img, R, C, &sh);
  if (st == MOEGEN_OK) *workspace_bytes = (int64_t)sh.workspace_bytes;
  return st;
}

/* moegen_aux_loss_fwd with N read on the device (total_num_tokens_dev). */
moegen_status mgp_aux_loss_fwd(moegen_module *m, int64_t R, int64_t C, const void *probs,
                               int probs_dtype, const void *tokens_per_expert, int tpe_dtype,
                               const int64_t *total_num_tokens_dev, int num_experts, int topk,
                               float coeff, void *aux_loss, float *aux_const, void *workspace,
                               int64_t workspace_bytes, CUstream stream) {
  moegen_aux_loss_fwd_args a = {.rows = R, .cols = C, .probs = probs,
                                .probs_dtype = (moegen_dtype)probs_dtype,
                                .tokens_per_expert = tokens_per_expert,
                                .tpe_dtype = (moegen_count_dtype)tpe_dtype,
                                .total_num_tokens_dev = total_num_tokens_dev,
                                .num_experts = num_experts, .topk = topk, .coeff = coeff,
                                .aux_loss = aux_loss, .aux_const = aux_const,
                                .workspace = workspace, .workspace_bytes = (size_t)workspace_bytes};
  return moegen_aux_loss_fwd(m, &a, stream);
}

/* moegen_aux_loss_bwd. */
moegen_status mgp_aux_loss_bwd(moegen_module *m, int64_t R, int64_t C, const float *aux_const,
                               const void *tokens_per_expert, int tpe_dtype, const void *grad_aux,
                               int grad_dtype, void *grad_probs, CUstream stream) {
  moegen_aux_loss_bwd_args a = {.rows = R, .cols = C, .aux_const = aux_const,
                                .tokens_per_expert = tokens_per_expert,
                                .tpe_dtype = (moegen_count_dtype)tpe_dtype, .grad_aux = grad_aux,
                                .grad_dtype = (moegen_dtype)grad_dtype, .grad_probs = grad_probs};
  return moegen_aux_loss_bwd(m, &a, stream);
}

/* moegen_sort_chunks (shapes as in moegen_sort_chunks_args). */
moegen_status mgp_sort_chunks(moegen_module *m, int64_t N, int dtype, int S,
                              const int32_t *split_sizes, const int32_t *sorted_index,
                              const void *in, void *out, const float *probs, float *out_probs,
                              int32_t *row_map, int backward, CUstream stream) {
  moegen_sort_chunks_args a = {.num_rows = N, .dtype = (moegen_dtype)dtype, .num_chunks = S,
                               .split_sizes = split_sizes, .sorted_index = sorted_index,
                               .in = in, .out = out, .probs = probs, .out_probs = out_probs,
                               .row_map = row_map, .backward = backward};
  return moegen_sort_chunks(m, &a, stream);
}
