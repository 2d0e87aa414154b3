/* runtime/ops_router_bwd.c -- the router backward op: shape function and launch. */
#include <limits.h>
#include <string.h>

#include "module.h"

/* Kernel argument block; must match rbwd::BwdArgs in router_bwd.cu.lt. */
typedef struct router_bwd_params {
  const void *grad;
  const float *grad_w;
  const float *inter;
  const uint8_t *map;
  const uint8_t *bitmap;
  const void *idx;
  void *out;
} router_bwd_params;

moegen_status moegen_router_bwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_bwd_shape *shape) {
  if (!image || !shape || num_tokens < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (image->router_bwd.experts <= 0) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->grad_logits[0] = num_tokens;
  shape->grad_logits[1] = image->router_bwd.experts;
  shape->workspace_bytes = 0;
  return MOEGEN_OK;
}

static int misaligned(const void *p) { return ((uintptr_t)p & 15u) != 0; }

/* Cheap metadata checks; no value checks (they would need a sync). */
static moegen_status check_args(moegen_module *m, const moegen_router_bwd_args *a) {
  const moegen_router_bwd_plan *p = &moegen_module_image(m)->router_bwd;
  if (p->experts <= 0)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED, "router_bwd: module has no router backward");
  if (a->num_tokens < 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "router_bwd: num_tokens = %lld < 0",
                              (long long)a->num_tokens);
  if (a->num_tokens > INT32_MAX / p->experts)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: num_tokens * experts = %lld * %d exceeds INT32_MAX",
                              (long long)a->num_tokens, p->experts);
  if ((unsigned)a->index_dtype > MOEGEN_INDEX_INT64)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: index_dtype = %d is not a moegen_index_dtype",
                              (int)a->index_dtype);
  if (a->index_dtype == MOEGEN_INDEX_INT16 && p->experts > 32767)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: int16 topk_indices need experts <= 32767 (E = %d)",
                              p->experts);
  int routings = !!a->routing_map + !!a->routing_bitmap + !!a->topk_indices;
  if (a->num_tokens == 0) return MOEGEN_OK;
  if (routings != 1)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: give exactly one of routing_map, routing_bitmap and "
                              "topk_indices (%d given)", routings);
  if (!a->grad_probs == !a->grad_weights)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: give exactly one of grad_probs and grad_weights (%s given)",
                              a->grad_probs ? "both" : "neither");
  if (a->grad_weights && !a->topk_indices)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: grad_weights are aligned with topk_indices, which is NULL");
  if (!a->intermediate || !a->grad_logits)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "router_bwd: %s is NULL",
                              a->intermediate ? "grad_logits" : "intermediate");
  if (misaligned(a->grad_probs) || misaligned(a->intermediate) || misaligned(a->routing_map) ||
      misaligned(a->grad_logits))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: grad_probs, intermediate, routing_map and grad_logits "
                              "must be 16-byte aligned");
  return MOEGEN_OK;
}

moegen_status moegen_router_bwd(moegen_module *m, const moegen_router_bwd_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_args(m, a);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  const moegen_router_bwd_plan *p = &moegen_module_image(m)->router_bwd;
  CUfunction fn;
  moegen_device_info dev;
  st = moegen_module_kernel(m, MOEGEN_KERNEL_ROUTER_BWD, (unsigned)p->threads, 0, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  int T = (int)a->num_tokens;
  unsigned grid = (unsigned)((a->num_tokens + p->tokens_per_block - 1) / p->tokens_per_block);
  router_bwd_params prm = {a->grad_probs, a->grad_weights, a->intermediate, a->routing_map,
                           a->routing_bitmap, a->topk_indices, a->grad_logits};
  int index_dtype = (int)a->index_dtype;
  void *params[] = {&prm, &T, &index_dtype};
  CUresult r = moegen_module_driver(m)->cuLaunchKernel(fn, grid, 1, 1, (unsigned)p->threads, 1, 1,
                                                       0, stream, params, NULL);
  if (r) return moegen_module_cuda_fail(m, r, "router_bwd: cuLaunchKernel");
  return MOEGEN_OK;
}
