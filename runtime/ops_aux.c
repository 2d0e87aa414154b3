/* runtime/ops_aux.c -- the aux-loss ops (SPEC.md 2): scores forward and
 * backward, loss forward and backward. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "kernel_args.h"
#include "module.h"
#include "ops.h"

/* The done-counter sits at offset 0, the partials at offset 16. */
enum { PARTIALS_OFFSET = 16, GRAD_BLOCKS_CAP = 4096 };

/* ---------------------------------------------------------------- scores */

moegen_status moegen_aux_scores_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_aux_scores_shape *shape) {
  if (!image || !shape || num_tokens < 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  int64_t E = image->aux.experts;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_AUX_SCORES_FWD)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->scores[0] = shape->routing_map[0] = shape->routing_bitmap[0] = num_tokens;
  shape->intermediate[0] = shape->grad_logits[0] = num_tokens;
  shape->scores[1] = shape->routing_map[1] = shape->intermediate[1] = shape->grad_logits[1] = E;
  shape->routing_bitmap[1] = (E + 7) / 8;
  shape->workspace_bytes = 0;
  return MOEGEN_OK;
}

/* Checks shared by the score ops: the module has them, T fits. */
static moegen_status check_scores(moegen_module *m, const char *op, int64_t T) {
  const moegen_aux_plan *p = &moegen_module_image(m)->aux;
  moegen_status st = moegen_require_kernel(m, MOEGEN_KERNEL_AUX_SCORES_FWD, op);
  return st != MOEGEN_OK ? st : moegen_check_tokens(m, op, T, p->experts, "experts");
}

/* Launches score kernel id over T > 0 tokens. */
static moegen_status launch_scores(moegen_module *m, moegen_kernel_id id, const char *op,
                                   int64_t T, moegen_aux_scores_params *prm, CUstream stream) {
  const moegen_aux_plan *p = &moegen_module_image(m)->aux;
  CUfunction fn;
  moegen_device_info dev;
  moegen_status st = moegen_module_kernel(m, id, (unsigned)p->threads, 0, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  moegen_launch_dims dims = {(unsigned)((T + p->tokens_per_block - 1) / p->tokens_per_block),
                            (unsigned)p->threads, 0};
  moegen_args_aux_scores args = {.a = *prm, .T = (int)T};
  return moegen_launch_aux_scores(m, id, fn, &dims, &args, stream, op);
}

moegen_status moegen_aux_scores_fwd(moegen_module *m, const moegen_aux_scores_fwd_args *a,
                                    CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_scores(m, "aux_scores_fwd", a->num_tokens);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  if (!a->logits || !a->scores || !a->intermediate)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "aux_scores_fwd: %s is NULL",
                              !a->logits ? "logits" : !a->scores ? "scores" : "intermediate");
  if (moegen_misaligned(a->logits) || moegen_misaligned(a->scores) || moegen_misaligned(a->intermediate) ||
      moegen_misaligned(a->routing_map))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "aux_scores_fwd: logits, scores, intermediate and routing_map must "
                              "be 16-byte aligned");
  moegen_aux_scores_params prm = {.logits = a->logits, .scores = a->scores, .map = a->routing_map,
                           .bitmap = a->routing_bitmap, .inter = a->intermediate};
  return launch_scores(m, MOEGEN_KERNEL_AUX_SCORES_FWD, "aux_scores_fwd", a->num_tokens, &prm,
                       stream);
}

moegen_status moegen_aux_scores_bwd(moegen_module *m, const moegen_aux_scores_bwd_args *a,
                                    CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_scores(m, "aux_scores_bwd", a->num_tokens);
  if (st != MOEGEN_OK || a->num_tokens == 0) return st;
  if (!a->grad_scores || !a->intermediate || !a->grad_logits)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "aux_scores_bwd: %s is NULL",
                              !a->grad_scores ? "grad_scores"
                              : !a->intermediate ? "intermediate" : "grad_logits");
  if (moegen_misaligned(a->grad_scores) || moegen_misaligned(a->intermediate) || moegen_misaligned(a->grad_logits))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "aux_scores_bwd: grad_scores, intermediate and grad_logits must be "
                              "16-byte aligned");
  moegen_aux_scores_params prm = {.inter = (float *)a->intermediate, .grad = a->grad_scores,
                           .grad_logits = a->grad_logits};
  return launch_scores(m, MOEGEN_KERNEL_AUX_SCORES_BWD, "aux_scores_bwd", a->num_tokens, &prm,
                       stream);
}

/* ---------------------------------------------------------------- loss */

/* Blocks of the loss forward for n elements: a function of n and the plan
 * only, so the reduction order is the same on every device. */
static unsigned loss_blocks(const moegen_aux_plan *p, int64_t n) {
  int64_t per_block = (int64_t)p->loss_threads * p->loss_unroll;
  int64_t b = (n + per_block - 1) / per_block;
  return (unsigned)(b < 1 ? 1 : b > p->loss_max_blocks ? p->loss_max_blocks : b);
}

moegen_status moegen_aux_loss_shape_of(const moegen_image *image, int64_t rows, int64_t cols,
                                       moegen_aux_loss_shape *shape) {
  if (!image || !shape || rows < 0 || cols <= 0 || cols > INT32_MAX)
    return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!moegen_has_kernel(image, MOEGEN_KERNEL_AUX_LOSS_FWD)) return MOEGEN_ERR_NOT_SUPPORTED;
  memset(shape, 0, sizeof *shape);
  shape->grad_probs[0] = rows;
  shape->grad_probs[1] = cols;
  shape->workspace_bytes =
      PARTIALS_OFFSET + sizeof(float) * loss_blocks(&image->aux, rows * cols);
  return MOEGEN_OK;
}

/* Checks shared by the loss ops: sizes and dtypes. */
static moegen_status check_loss(moegen_module *m, const char *op, int64_t rows, int64_t cols,
                                int dtype, moegen_count_dtype tpe_dtype) {
  moegen_status st = moegen_require_kernel(m, MOEGEN_KERNEL_AUX_LOSS_FWD, op);
  if (st != MOEGEN_OK) return st;
  if (rows < 0 || cols <= 0 || cols > INT32_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: shape [%lld, %lld] needs rows >= 0 and 0 < cols <= INT32_MAX", op,
                              (long long)rows, (long long)cols);
  if (rows > INT64_MAX / cols)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: rows * cols overflows", op);
  if (!moegen_dtype_size(dtype))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: dtype = %d is not a moegen_dtype", op, dtype);
  if ((unsigned)tpe_dtype > MOEGEN_COUNT_INT16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: tpe_dtype = %d is not a moegen_count_dtype", op, (int)tpe_dtype);
  return MOEGEN_OK;
}

static moegen_status check_loss_fwd(moegen_module *m, const moegen_aux_loss_fwd_args *a) {
  const char *op = "aux_loss_fwd";
  moegen_status st = check_loss(m, op, a->rows, a->cols, a->probs_dtype, a->tpe_dtype);
  if (st != MOEGEN_OK) return st;
  if (a->num_experts <= 0 || a->cols % a->num_experts != 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: cols = %lld must be a multiple of num_experts = %d > 0", op,
                              (long long)a->cols, a->num_experts);
  if (a->topk <= 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: topk = %d <= 0", op, a->topk);
  if ((a->total_num_tokens > 0) == (a->total_num_tokens_dev != NULL) || a->total_num_tokens < 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: give exactly one of total_num_tokens > 0 (host, %lld) and "
                              "total_num_tokens_dev", op, (long long)a->total_num_tokens);
  if (!a->aux_loss)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: aux_loss is NULL (it is written also when rows = 0)", op);
  if (a->rows > 0 && (!a->probs || !a->tokens_per_expert))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                              !a->probs ? "probs" : "tokens_per_expert");
  moegen_aux_loss_shape sh;
  moegen_aux_loss_shape_of(moegen_module_image(m), a->rows, a->cols, &sh);
  if (!a->workspace || a->workspace_bytes < sh.workspace_bytes || moegen_misaligned(a->workspace))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: workspace needs %zu bytes, 16-byte aligned (got %zu at %p)", op,
                              sh.workspace_bytes, a->workspace_bytes, a->workspace);
  return MOEGEN_OK;
}

moegen_status moegen_aux_loss_fwd(moegen_module *m, const moegen_aux_loss_fwd_args *a,
                                  CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_loss_fwd(m, a);
  if (st != MOEGEN_OK) return st;
  const moegen_aux_plan *p = &moegen_module_image(m)->aux;
  CUfunction fn;
  moegen_device_info dev;
  st = moegen_module_kernel(m, MOEGEN_KERNEL_AUX_LOSS_FWD, (unsigned)p->loss_threads, 0, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  const moegen_driver *d = moegen_module_driver(m);
  CUresult r = d->cuMemsetD32Async((CUdeviceptr)(uintptr_t)a->workspace, 0, 1, stream);
  if (r) return moegen_module_cuda_fail(m, r, "aux_loss_fwd: cuMemsetD32Async(workspace counter)");
  int64_t n = a->rows * a->cols;
  moegen_aux_loss_params prm = {.probs = a->probs,
                         .tpe = a->tokens_per_expert,
                         .n_dev = a->total_num_tokens_dev,
                         .n_host = a->total_num_tokens,
                         .e_coeff_k = ((float)a->num_experts * a->coeff) / (float)a->topk,
                         .aux = a->aux_loss,
                         .cc = a->aux_const,
                         .counter = (unsigned *)a->workspace,
                         .partials = (float *)((char *)a->workspace + PARTIALS_OFFSET),
                         .n = n,
                         .cols = (int)a->cols,
                         .probs_dtype = a->probs_dtype,
                         .tpe_dtype = (int)a->tpe_dtype};
  moegen_launch_dims dims = {loss_blocks(p, n), (unsigned)p->loss_threads, 0};
  moegen_args_aux_loss args = {.a = prm};
  return moegen_launch_aux_loss(m, MOEGEN_KERNEL_AUX_LOSS_FWD, fn, &dims, &args, stream,
                                "aux_loss_fwd");
}

moegen_status moegen_aux_loss_bwd(moegen_module *m, const moegen_aux_loss_bwd_args *a,
                                  CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  moegen_status st = check_loss(m, "aux_loss_bwd", a->rows, a->cols, a->grad_dtype, a->tpe_dtype);
  if (st != MOEGEN_OK || a->rows == 0) return st;
  if (!a->aux_const || !a->tokens_per_expert || !a->grad_aux || !a->grad_probs)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "aux_loss_bwd: %s is NULL",
                              !a->aux_const ? "aux_const"
                              : !a->tokens_per_expert ? "tokens_per_expert"
                              : !a->grad_aux ? "grad_aux" : "grad_probs");
  const moegen_aux_plan *p = &moegen_module_image(m)->aux;
  CUfunction fn;
  moegen_device_info dev;
  st = moegen_module_kernel(m, MOEGEN_KERNEL_AUX_LOSS_BWD, (unsigned)p->loss_threads, 0, &fn, &dev);
  if (st != MOEGEN_OK) return st;
  int64_t n = a->rows * a->cols;
  int64_t blocks = (n + p->loss_threads - 1) / p->loss_threads;
  moegen_aux_loss_params prm = {.tpe = a->tokens_per_expert,
                         .cc = (float *)a->aux_const,
                         .grad_aux = a->grad_aux,
                         .grad_probs = a->grad_probs,
                         .n = n,
                         .cols = (int)a->cols,
                         .probs_dtype = a->grad_dtype,
                         .tpe_dtype = (int)a->tpe_dtype};
  moegen_launch_dims dims = {(unsigned)(blocks < GRAD_BLOCKS_CAP ? blocks : GRAD_BLOCKS_CAP),
                            (unsigned)p->loss_threads, 0};
  moegen_args_aux_loss args = {.a = prm};
  return moegen_launch_aux_loss(m, MOEGEN_KERNEL_AUX_LOSS_BWD, fn, &dims, &args, stream,
                                "aux_loss_bwd");
}
