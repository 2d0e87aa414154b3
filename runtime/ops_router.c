/* runtime/ops_router.c -- the router forward op: shape function and launch. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernel_args.h"
#include "module.h"
#include "ops.h"

moegen_status moegen_router_fwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_fwd_shape *shape) {
  if (!image || !shape || num_tokens < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_router_plan *p = &image->router;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_ROUTER_FWD)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  int64_t T = num_tokens, E = p->experts, K = p->topk;
  shape->probs[0] = shape->routing_map[0] = T;
  shape->probs[1] = shape->routing_map[1] = E;
  if (!image->router_bwd.recompute) { /* recompute: the backward reads the logits instead */
    shape->intermediate[0] = T;
    shape->intermediate[1] = E;
  }
  shape->routing_bitmap[0] = T;
  shape->routing_bitmap[1] = (E + 7) / 8;
  shape->topk_indices[0] = shape->topk_weights[0] = T;
  shape->topk_indices[1] = shape->topk_weights[1] = K;
  shape->expert_counts[0] = E;
  shape->qb_cutoff[0] = p->qb ? T : 0;
  shape->workspace_bytes = 0;
  return MOEGEN_OK;
}

/* Cheap metadata checks; no value checks (they would need a sync). */
static moegen_status check_args(moegen_module *m, const moegen_router_fwd_args *a) {
  const moegen_router_plan *p = &moegen_module_image(m)->router;
  moegen_status st = moegen_require_kernel(m, MOEGEN_KERNEL_ROUTER_FWD, "router_fwd");
  if (st == MOEGEN_OK) st = moegen_check_tokens(m, "router_fwd", a->num_tokens, p->experts, "experts");
  if (st != MOEGEN_OK) return st;
  if (a->num_tokens > 0 && !a->logits)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "router_fwd: logits is NULL");
  if ((unsigned)a->index_dtype > MOEGEN_INDEX_INT64)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "router_fwd: index_dtype = %d is not a moegen_index_dtype",
                              (int)a->index_dtype);
  if (p->qb && (a->qb_bins <= 0 || (a->num_tokens > 0 && (!a->qb_histogram || !a->qb_bounds))))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_fwd: quantile balancing needs qb_bins > 0, and qb_histogram "
                              "and qb_bounds when num_tokens > 0 (got %d, %p, %p)", a->qb_bins,
                              (void *)a->qb_histogram, (const void *)a->qb_bounds);
  if (!p->qb && (a->qb_histogram || a->qb_bounds || a->qb_cutoff || a->qb_bins))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_fwd: qb_* arguments given but the config has no "
                              "quantile_balancing");
  if (moegen_module_image(m)->router_bwd.recompute && a->intermediate)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_fwd: intermediate given but the config has router_bwd = "
                              "recompute: the backward recomputes that state from the logits, so "
                              "the forward saves none (pass NULL)");
  if (p->has_bias && a->num_tokens > 0 && !a->expert_bias)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_fwd: the config has expert_bias but expert_bias is NULL");
  if (!p->has_bias && a->expert_bias)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_fwd: expert_bias given but the config has none");
  return MOEGEN_OK;
}

/* Grid and block of one launch for T > 0 tokens. The kernel serves
 * blockDim.x / lanes tokens per block iteration for any multiple of 32
 * threads up to the plan's block. Enough tokens: the plan's block, a
 * persistent grid of at most one full wave. Fewer tokens than one such block
 * per SM: the fewest warps per block w that keep the blocks at one per SM
 * at most (at T = 256 DeepSeek-V3 needs 128 warps: 128 one-warp blocks on
 * 128 SMs instead of 16 eight-warp blocks on 16 SMs; just past one warp per
 * SM, T = 266, w = 2 fills only 67 SMs, each scheduler still serving one
 * chain). */
static void launch_shape(const moegen_router_plan *p, const moegen_device_info *dev, int64_t T,
                         unsigned *threads, unsigned *grid) {
  int64_t warps_per_block = p->threads / 32;
  int64_t tokens_per_warp = p->tokens_per_block / warps_per_block;
  int64_t warps = (T + tokens_per_warp - 1) / tokens_per_warp;
  int64_t sms = dev->sm_count > 0 ? dev->sm_count : 1;
  if (warps < warps_per_block * sms) warps_per_block = (warps + sms - 1) / sms;
  int64_t blocks = (warps + warps_per_block - 1) / warps_per_block;
  int64_t cap = (int64_t)dev->sm_count * dev->blocks_per_sm; /* one full wave, persistent */
  *threads = (unsigned)(32 * warps_per_block);
  *grid = (unsigned)(blocks < cap ? blocks : cap);
}

moegen_status moegen_router_fwd(moegen_module *m, const moegen_router_fwd_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_args(m, a);
  if (st != MOEGEN_OK) return st;
  const moegen_image *img = moegen_module_image(m);
  const moegen_router_plan *p = &img->router;
  if (a->num_tokens == 0) /* no kernel: only the counts are written */
    return a->expert_counts ? moegen_module_memset32(m, a->expert_counts, 0, (size_t)p->experts,
                                                     stream, "router_fwd: cuMemsetD32Async(expert_counts)")
                            : MOEGEN_OK;
  moegen_kernel_id id = MOEGEN_KERNEL_ROUTER_FWD;
  CUfunction fn;
  moegen_device_info dev;
  st = moegen_module_kernel(m, id, (unsigned)p->threads,
                            (unsigned)p->smem_bytes, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  /* Small T is one latency-bound chain per warp: the small-T kernel (more
   * lanes per token, shorter chains) while it needs at most the plan's
   * max_warps_per_sm warps an SM (templates/plan.lua says why). */
  const moegen_router_plan *q = &img->router_small;
  if (q->threads > 0) {
    int64_t tokens_per_warp = q->tokens_per_block / (q->threads / 32);
    int64_t warps = (a->num_tokens + tokens_per_warp - 1) / tokens_per_warp;
    if (warps <= (int64_t)q->max_warps_per_sm * dev.sm_count) {
      p = q;
      id = MOEGEN_KERNEL_ROUTER_FWD_SMALL;
      st = moegen_module_kernel(m, id, (unsigned)p->threads,
                                (unsigned)p->smem_bytes, &fn, &dev);
      if (st != MOEGEN_OK) return st;
    }
  }
  if (a->expert_counts &&
      (st = moegen_module_memset32(m, a->expert_counts, 0, (size_t)p->experts, stream,
                                   "router_fwd: cuMemsetD32Async(expert_counts)")) != MOEGEN_OK)
    return st;
  moegen_launch_dims dims = {0, 0, (unsigned)p->smem_bytes};
  launch_shape(p, &dev, a->num_tokens, &dims.threads, &dims.grid);
  moegen_args_router_fwd args = {
      .o = {a->logits, a->expert_bias, a->probs, a->routing_map, a->routing_bitmap, a->topk_indices,
            a->topk_weights, a->intermediate, a->expert_counts, a->qb_histogram, a->qb_bounds,
            a->qb_cutoff},
      .T = (int)a->num_tokens,
      .index_dtype = (int)a->index_dtype,
      .qb_bins = a->qb_bins};
  return moegen_launch_router_fwd(m, id, fn, &dims, &args, stream, "router_fwd");
}

moegen_status moegen_router_qb_check_bounds(moegen_module *m, const float *bounds, CUstream stream) {
  if (!m) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!bounds)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "qb_check_bounds: bounds is NULL");
  const moegen_driver *d = moegen_module_driver(m);
  float b[2];
  CUresult r = d->cuStreamSynchronize(stream);
  if (!r) r = d->cuMemcpyDtoH(b, (CUdeviceptr)(uintptr_t)bounds, sizeof b);
  if (r) return moegen_module_cuda_fail(m, r, "qb_check_bounds: copying the bounds");
  if (!isfinite(b[0]) || !isfinite(b[1]) || !(b[0] < b[1]))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "qb_check_bounds: bounds = [%g, %g]: need finite lower < upper",
                              (double)b[0], (double)b[1]);
  return MOEGEN_OK;
}
