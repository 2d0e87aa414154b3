/* runtime/ops_router_bwd.c -- the router backward op: shape function and launch. */
#include <limits.h>
#include <string.h>

#include "kernel_args.h"
#include "module.h"
#include "ops.h"

moegen_status moegen_router_bwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_bwd_shape *shape) {
  if (!image || !shape || num_tokens < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_ROUTER_BWD)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->grad_logits[0] = num_tokens;
  shape->grad_logits[1] = image->router_bwd.experts;
  shape->workspace_bytes = 0;
  return MOEGEN_OK;
}

/* Cheap metadata checks; no value checks (they would need a sync). */
static moegen_status check_args(moegen_module *m, const moegen_router_bwd_args *a) {
  const moegen_router_bwd_plan *p = &moegen_module_image(m)->router_bwd;
  moegen_status st = moegen_require_kernel(m, MOEGEN_KERNEL_ROUTER_BWD, "router_bwd");
  if (st == MOEGEN_OK) st = moegen_check_tokens(m, "router_bwd", a->num_tokens, p->experts, "experts");
  if (st != MOEGEN_OK) return st;
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
  /* The forward's state: the saved intermediate, or the logits to recompute it from. */
  const char *state = p->recompute ? "logits" : "intermediate";
  const void *given = p->recompute ? a->logits : (const void *)a->intermediate;
  const void *other = p->recompute ? (const void *)a->intermediate : a->logits;
  if (other)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: %s given but the config has router_bwd = %s (the "
                              "backward reads the %s): pass NULL", p->recompute ? "intermediate" : "logits",
                              p->recompute ? "recompute" : "saved", state);
  if (!given || !a->grad_logits)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "router_bwd: %s is NULL%s",
                              given ? "grad_logits" : state,
                              given ? "" : p->recompute ? " (router_bwd = recompute)" : "");
  if (moegen_misaligned(a->grad_probs) || moegen_misaligned(given) ||
      moegen_misaligned(a->routing_map) || moegen_misaligned(a->grad_logits))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "router_bwd: grad_probs, %s, routing_map and grad_logits "
                              "must be 16-byte aligned", state);
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
  moegen_launch_dims dims = {
      (unsigned)((a->num_tokens + p->tokens_per_block - 1) / p->tokens_per_block),
      (unsigned)p->threads, 0};
  moegen_args_router_bwd args = {
      .a = {a->grad_probs, a->grad_weights, a->intermediate, a->logits, a->routing_map,
            a->routing_bitmap, a->topk_indices, a->grad_logits},
      .T = (int)a->num_tokens,
      .index_dtype = (int)a->index_dtype};
  return moegen_launch_router_bwd(m, MOEGEN_KERNEL_ROUTER_BWD, fn, &dims, &args, stream,
                                  "router_bwd");
}
