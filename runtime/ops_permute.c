/* runtime/ops_permute.c -- the permutation ops (SPEC.md 4): permute,
 * unpermute, their backwards and the chunk sort; shape function and launches.
 *
 * The kernels (templates/permute.cu.lt) take their arguments as one struct
 * of pointers plus ints; every size they need on the device (counts,
 * offsets) stays on the device, so no op syncs with the host. */
#include <limits.h>
#include <string.h>

#include "kernel_args.h"
#include "module.h"
#include "ops.h"

/* Tiles of the index kernels for T tokens (at least one, so T = 0 still
 * writes the offsets). */
static int64_t tiles_of(const moegen_permute_plan *p, int64_t T) {
  int64_t n = (T + p->tile_tokens - 1) / p->tile_tokens;
  return n > 0 ? n : 1;
}

/* R, the host bound on the permuted rows. */
static int64_t rows_bound(const moegen_permute_plan *p, int64_t T, int align, int capacity) {
  int64_t r = T * p->topk + (int64_t)p->experts * (align - 1);
  if (capacity > 0) {
    int64_t cap = ((int64_t)capacity + align - 1) / align * align * p->experts;
    if (cap < r) r = cap;
  }
  return r;
}

/* 0 if align and capacity are valid. */
static int bad_layout(int align, int capacity) {
  return align < 1 || align > 128 || (align & (align - 1)) || capacity < 0;
}

moegen_status moegen_permute_shape_of(const moegen_image *image, int64_t num_tokens, int align,
                                      int capacity, moegen_permute_shape *shape) {
  if (!image || !shape || num_tokens < 0 || bad_layout(align, capacity))
    return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p = &image->permute;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_PERMUTE_ROUTES)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  int64_t R = rows_bound(p, num_tokens, align, capacity);
  shape->rows[0] = shape->permuted_probs[0] = R;
  shape->rows[1] = p->hidden;
  shape->row_map[0] = num_tokens;
  shape->row_map[1] = p->topk;
  shape->offsets[0] = p->experts + 1;
  shape->counts[0] = p->experts;
  shape->workspace_bytes = (size_t)tiles_of(p, num_tokens) * (size_t)p->experts * 4;
  shape->workspace_bytes = (shape->workspace_bytes + 15) / 16 * 16;
  if (moegen_has_kernel(image, MOEGEN_KERNEL_PERMUTE_ROWS_FP8)) {
    shape->rows_fp8[0] = R;
    shape->rows_fp8[1] = p->hidden;
    shape->scale_ld = moegen_scale_ld_of(R);
    shape->row_scales[0] = p->hidden / MOEGEN_FP8_BLOCK;
    shape->row_scales[1] = shape->scale_ld;
  }
  return MOEGEN_OK;
}

/* The module's plan, or NOT_SUPPORTED (recorded) for `what`. */
static moegen_status plan_of(moegen_module *m, const char *what, const moegen_permute_plan **p) {
  const moegen_image *img = moegen_module_image(m);
  *p = &img->permute;
  return moegen_require_kernel(m, MOEGEN_KERNEL_PERMUTE_ROUTES, what);
}

/* Common checks: T range, dtype; *nv = 16-byte vectors per row. */
static moegen_status check_common(moegen_module *m, const moegen_permute_plan *p, const char *what,
                                  int64_t T, int dtype, int *nv) {
  if (T < 0 || T * p->topk > INT32_MAX / 2)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: num_tokens = %lld is outside [0, INT32_MAX / (2 * K)]", what,
                              (long long)T);
  if (!moegen_dtype_size(dtype))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: dtype = %d is not a moegen_dtype", what, dtype);
  *nv = p->hidden * moegen_dtype_size(dtype) / 16;
  return MOEGEN_OK;
}

/* Loads kernel id and sizes its launch: `blocks` blocks of `threads`
 * (blocks <= 0: a persistent grid of one wave, capped at -blocks). */
static moegen_status prepare(moegen_module *m, moegen_kernel_id id, long long blocks,
                             unsigned threads, CUfunction *fn, moegen_launch_dims *d) {
  moegen_device_info dev;
  moegen_status st = moegen_module_kernel(m, id, threads, 0, fn, &dev);
  if (st != MOEGEN_OK) return st;
  if (blocks <= 0) {
    long long wave = (long long)dev.sm_count * dev.blocks_per_sm;
    blocks = -blocks < wave ? -blocks : wave;
    if (blocks < 1) blocks = 1;
  }
  *d = (moegen_launch_dims){(unsigned)blocks, threads, 0};
  return MOEGEN_OK;
}

/* Loads kernel id, sizes its launch (prepare) and launches args, of
 * signature sig, on `stream`; sets st. */
#define RUN(sig, id, blocks, threads, args, what)                                   \
  do {                                                                              \
    CUfunction fn_;                                                                 \
    moegen_launch_dims d_;                                                          \
    st = prepare(m, id, blocks, (unsigned)(threads), &fn_, &d_);                    \
    if (st == MOEGEN_OK) st = moegen_launch_##sig(m, id, fn_, &d_, args, stream, what); \
  } while (0)

/* ---------------------------------------------------------------- permute */

/* The FP8 rows output (fp8_block modules): kernel, dtype, scales and their ld. */
static moegen_status check_permute_fp8(moegen_module *m, const moegen_permute_plan *p,
                                       const moegen_permute_args *a) {
  const moegen_image *img = moegen_module_image(m);
  if (!moegen_has_kernel(img, MOEGEN_KERNEL_PERMUTE_ROWS_FP8))
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                              "permute_fwd: rows_fp8 needs a module of recipe fp8_block (%s is not "
                              "one)", img->name);
  int64_t R = rows_bound(p, a->num_tokens, a->align, a->capacity);
  if (a->dtype != MOEGEN_DTYPE_BF16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: rows_fp8 quantizes bf16 x (dtype = %d)", (int)a->dtype);
  if (!a->row_scales || (a->num_tokens > 0 && !a->x))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "permute_fwd: rows_fp8 given but %s is NULL",
                              !a->row_scales ? "row_scales" : "x");
  if (!moegen_scale_ld_ok(a->scale_ld, R))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: scale_ld = %lld must be >= R (%lld), a multiple of 4 and "
                              "<= INT32_MAX", (long long)a->scale_ld, (long long)R);
  if (moegen_misaligned(a->rows_fp8) || moegen_misaligned(a->row_scales))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: rows_fp8 and row_scales must be 16-byte aligned");
  return MOEGEN_OK;
}

static moegen_status check_permute(moegen_module *m, const moegen_permute_plan *p,
                                   const moegen_permute_args *a, int *nv) {
  moegen_status st = check_common(m, p, "permute_fwd", a->num_tokens, a->dtype, nv);
  if (st != MOEGEN_OK) return st;
  if (bad_layout(a->align, a->capacity))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: align = %d (want 1 or a power of two <= 128) or "
                              "capacity = %d < 0", a->align, a->capacity);
  if (a->num_tokens * p->topk + (int64_t)p->experts * a->align > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: T*K + E*align exceeds INT32_MAX rows");
  /* T = 0: the [T, ...] tensors are empty (NULL in most frameworks); the
   * offsets, counts and pad rows are still written. */
  const int data = a->num_tokens > 0;
  if (a->topk_indices && a->routing_map)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: give exactly one of topk_indices and routing_map "
                              "(both given)");
  if (data && !a->topk_indices && !a->routing_map)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: give exactly one of topk_indices and routing_map "
                              "(neither given; only num_tokens = 0 needs none)");
  if (!a->offsets || !a->counts)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: offsets and counts are required outputs (written "
                              "also when num_tokens = 0)");
  if (data && !a->row_map)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: row_map is a required output");
  if (data && a->rows && !a->x)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "permute_fwd: rows given but x is NULL");
  if (data && a->permuted_probs && !a->probs)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: permuted_probs given but probs is NULL");
  size_t need = (size_t)tiles_of(p, a->num_tokens) * (size_t)p->experts * 4;
  if (!a->workspace || a->workspace_bytes < need)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: workspace of %zu bytes at %p, need %zu (see "
                              "moegen_permute_shape_of)", a->workspace_bytes, a->workspace, need);
  if (moegen_misaligned(a->x) || moegen_misaligned(a->rows) || moegen_misaligned(a->routing_map) ||
      moegen_misaligned(a->workspace))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_fwd: x, rows, routing_map and workspace must be 16-byte "
                              "aligned");
  return a->rows_fp8 ? check_permute_fp8(m, p, a) : MOEGEN_OK;
}

moegen_status moegen_permute_fwd(moegen_module *m, const moegen_permute_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p;
  int nv = 0; /* set by check_common on success */
  moegen_status st = plan_of(m, "permute_fwd", &p);
  if (st == MOEGEN_OK) st = check_permute(m, p, a, &nv);
  if (st != MOEGEN_OK) return st;
  int T = (int)a->num_tokens, R = (int)rows_bound(p, a->num_tokens, a->align, a->capacity);
  long long tiles = tiles_of(p, a->num_tokens);
  moegen_args_permute_routes routes = {
      .a = {a->topk_indices, a->routing_map, a->workspace, NULL, NULL, NULL}, .T = T, .mode = 0};
  RUN(permute_routes, MOEGEN_KERNEL_PERMUTE_ROUTES, tiles, p->tile_tokens, &routes, "permute_fwd");
  if (st != MOEGEN_OK) return st;
  moegen_args_permute_rank rank = {
      .a = {a->topk_indices, a->routing_map, a->probs, a->expert_counts, a->workspace, a->row_map,
            a->permuted_probs, a->offsets, a->counts, a->num_dropped},
      .T = T, .R = R, .align = a->align, .capacity = a->capacity};
  RUN(permute_rank, MOEGEN_KERNEL_PERMUTE_RANK, tiles, p->tile_tokens, &rank, "permute_fwd");
  if (st != MOEGEN_OK || (!a->rows && !a->permuted_probs && !a->rows_fp8)) return st;
  long long zero_units = (long long)p->experts + (R + p->zero_chunk - 1) / p->zero_chunk;
  if (a->rows_fp8) { /* a warp a token or zero unit; it zeroes the pad rows' probs too */
    moegen_args_permute_rows_fp8 fp8 = {.x = a->x, .q = a->rows_fp8, .s = a->row_scales,
                                        .row_map = a->row_map, .offsets = a->offsets,
                                        .counts = a->counts, .pprobs = a->permuted_probs, .T = T,
                                        .R = R, .scale_ld = (int)a->scale_ld};
    int warps = p->fp8_threads / 32;
    RUN(permute_rows_fp8, MOEGEN_KERNEL_PERMUTE_ROWS_FP8, (T + zero_units + warps - 1) / warps,
        p->fp8_threads, &fp8, "permute_fwd");
    if (st != MOEGEN_OK || !a->rows) return st;
  }
  moegen_args_permute_rows rows = {
      .a = {a->x, a->rows, a->row_map, a->offsets, a->counts, a->permuted_probs},
      .T = T, .R = R, .nv = nv};
  /* One group per token or zero unit, not a persistent wave: blocks that
   * retire and start keep more rows in flight than a wave looping over
   * tokens (DeepSeek-V3 T = 16384: 0.584 -> 0.565 ms for the rows kernel,
   * bench/RESULTS.md run 7). */
  int per_block = p->copy_threads / p->copy_group;
  long long units = (long long)T + zero_units;
  RUN(permute_rows, MOEGEN_KERNEL_PERMUTE_ROWS, (units + per_block - 1) / per_block,
      p->copy_threads, &rows, "permute_fwd");
  return st;
}

/* ---------------------------------------------------------------- combine */

/* The combine kernel: out[t] = sum_k w rows[row_map[t,k]]. Its blocks walk
 * slabs of >= gather_threads output vectors grid-stride: one wave, or one
 * block per gather_threads vectors when fewer (blocks past the last slab
 * return at once). */
static moegen_status combine(moegen_module *m, const moegen_permute_plan *p, int64_t num_tokens,
                             int dtype, int nv, const void *rows, const int32_t *row_map,
                             const float *probs, void *out, CUstream stream, const char *what) {
  moegen_args_unpermute args = {.a = {rows, row_map, probs, out}, .T = (int)num_tokens,
                                 .dtype = dtype};
  long long vecs = (long long)num_tokens * nv;
  moegen_status st;
  RUN(unpermute, MOEGEN_KERNEL_UNPERMUTE, -((vecs + p->gather_threads - 1) / p->gather_threads),
      p->gather_threads, &args, what);
  return st;
}

moegen_status moegen_unpermute_fwd(moegen_module *m, const moegen_unpermute_args *a,
                                   CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p;
  int nv = 0; /* set by check_common on success */
  moegen_status st = plan_of(m, "unpermute_fwd", &p);
  if (st == MOEGEN_OK) st = check_common(m, p, "unpermute_fwd", a->num_tokens, a->dtype, &nv);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  if (!a->rows || !a->row_map || !a->out)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "unpermute_fwd: rows, row_map and out are required");
  if (moegen_misaligned(a->rows) || moegen_misaligned(a->out))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "unpermute_fwd: rows and out must be 16-byte aligned");
  return combine(m, p, a->num_tokens, a->dtype, nv, a->rows, a->row_map, a->merging_probs, a->out,
                 stream, "unpermute_fwd");
}

moegen_status moegen_permute_bwd(moegen_module *m, const moegen_permute_bwd_args *a,
                                 CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p;
  int nv = 0; /* set by check_common on success */
  moegen_status st = plan_of(m, "permute_bwd", &p);
  if (st == MOEGEN_OK) st = check_common(m, p, "permute_bwd", a->num_tokens, a->dtype, &nv);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  if (!a->row_map || (a->grad_x && !a->grad_rows) || (a->grad_probs && !a->grad_permuted_probs))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_bwd: row_map is required; grad_x needs grad_rows and "
                              "grad_probs needs grad_permuted_probs");
  if (moegen_misaligned(a->grad_rows) || moegen_misaligned(a->grad_x) || moegen_misaligned(a->routing_map))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "permute_bwd: grad_rows, grad_x and routing_map must be 16-byte "
                              "aligned");
  if (a->grad_x) {
    st = combine(m, p, a->num_tokens, a->dtype, nv, a->grad_rows, a->row_map, NULL, a->grad_x,
                 stream, "permute_bwd");
    if (st != MOEGEN_OK) return st;
  }
  if (!a->grad_probs) return MOEGEN_OK;
  moegen_args_permute_routes args = {
      .a = {NULL, a->routing_map, NULL, a->row_map, a->grad_permuted_probs, a->grad_probs},
      .T = (int)a->num_tokens, .mode = 1};
  RUN(permute_routes, MOEGEN_KERNEL_PERMUTE_ROUTES, tiles_of(p, a->num_tokens), p->tile_tokens,
      &args, "permute_bwd");
  return st;
}

/* ---------------------------------------------------------------- unpermute backward */

moegen_status moegen_unpermute_bwd(moegen_module *m, const moegen_unpermute_bwd_args *a,
                                   CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p;
  int nv = 0; /* set by check_common on success */
  moegen_status st = plan_of(m, "unpermute_bwd", &p);
  if (st == MOEGEN_OK) st = check_common(m, p, "unpermute_bwd", a->num_tokens, a->dtype, &nv);
  if (st != MOEGEN_OK) return st;
  if (a->num_rows < 0 || a->num_rows > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "unpermute_bwd: num_rows = %lld is outside [0, INT32_MAX]",
                              (long long)a->num_rows);
  if (a->num_tokens == 0 && a->num_rows == 0) return MOEGEN_OK;
  /* T = 0 < R: only the zero rows of grad_rows are written (from offsets
   * and counts); the [T, ...] tensors are empty and may be NULL. */
  const int data = a->num_tokens > 0;
  if (!a->offsets || !a->counts || !a->grad_rows ||
      (data && (!a->row_map || !a->grad_out || (a->grad_probs && !a->rows))))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "unpermute_bwd: offsets, counts and grad_rows are required (also "
                              "when num_tokens = 0 < num_rows), and with num_tokens > 0 row_map "
                              "and grad_out; grad_probs needs rows");
  if (moegen_misaligned(a->grad_out) || moegen_misaligned(a->rows) || moegen_misaligned(a->grad_rows))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "unpermute_bwd: grad_out, rows and grad_rows must be 16-byte aligned");
  int T = (int)a->num_tokens, R = (int)a->num_rows;
  moegen_args_unpermute_bwd args = {
      .a = {a->grad_out, a->row_map, a->merging_probs, a->rows, a->grad_rows, a->grad_probs,
            a->offsets, a->counts},
      .T = T, .R = R, .nv = nv, .dtype = a->dtype};
  int per_block = p->gather_threads / p->gather_group;
  long long units = (long long)T + p->experts + (R + p->zero_chunk - 1) / p->zero_chunk;
  RUN(unpermute_bwd, MOEGEN_KERNEL_UNPERMUTE_BWD, -((units + per_block - 1) / per_block),
      p->gather_threads, &args, "unpermute_bwd");
  return st;
}

/* ---------------------------------------------------------------- chunk sort */

moegen_status moegen_sort_chunks(moegen_module *m, const moegen_sort_chunks_args *a,
                                 CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_permute_plan *p;
  int nv = 0; /* set by check_common on success */
  moegen_status st = plan_of(m, "sort_chunks", &p);
  if (st == MOEGEN_OK && (a->num_rows < 0 || a->num_rows > INT32_MAX))
    st = moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                            "sort_chunks: num_rows = %lld is outside [0, INT32_MAX]",
                            (long long)a->num_rows);
  if (st == MOEGEN_OK) st = check_common(m, p, "sort_chunks", 0, a->dtype, &nv);
  if (st != MOEGEN_OK) return st;
  if (a->num_chunks < 0 || a->num_chunks > p->max_chunks)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "sort_chunks: num_chunks = %d is outside [0, %d]", a->num_chunks,
                              p->max_chunks);
  if (a->num_rows == 0) return MOEGEN_OK;
  if (!a->in || !a->out || (a->num_chunks > 0 && (!a->split_sizes || !a->sorted_index)) ||
      (a->out_probs && !a->probs))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "sort_chunks: in, out, split_sizes and sorted_index are required; "
                              "out_probs needs probs");
  if (a->backward && a->row_map)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "sort_chunks: row_map is a forward output (backward = 1 given)");
  if (moegen_misaligned(a->in) || moegen_misaligned(a->out))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "sort_chunks: in and out must be 16-byte aligned");
  moegen_args_sort_chunks args = {
      .a = {a->in, a->out, a->split_sizes, a->sorted_index, a->probs, a->out_probs, a->row_map},
      .N = (int)a->num_rows, .S = a->num_chunks, .nv = nv, .backward = a->backward ? 1 : 0};
  int per_block = p->copy_threads / p->copy_group;
  RUN(sort_chunks, MOEGEN_KERNEL_SORT_CHUNKS, -(((long long)args.N + per_block - 1) / per_block),
      p->copy_threads, &args, "sort_chunks");
  return st;
}
