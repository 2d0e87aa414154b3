/* runtime/kernel_args.h -- internal: the arguments of every kernel launch,
 * derived from moegen/abi.def's MOEGEN_SIGNATURES.
 *
 * For each signature SIG: the struct moegen_args_SIG with one field per
 * parameter, in launch order (a grouped-GEMM operand O(x) is field mx, a
 * moegen_gemm_operand), and moegen_params_SIG(args, portable, params), which
 * fills cuLaunchKernel's params array (at most MOEGEN_MAX_PARAMS entries)
 * in that order. An op fills the struct by field name and launches through
 * moegen_launch (ops_launch.c), which checks the kernel's signature; the
 * generator checks at render time that each rendered kernel declares the
 * same parameters (gen/abi.c), so host and device order are one fact.
 *
 * The *_params structs below are passed by value; each mirrors, field for
 * field, the device struct named above it. */
#ifndef MOEGEN_RUNTIME_KERNEL_ARGS_H
#define MOEGEN_RUNTIME_KERNEL_ARGS_H

#include <stdint.h>

#include "module.h"
#include "tma.h"

/* = router::Outputs (router.cu.lt) */
typedef struct moegen_router_fwd_params {
  const void *logits;
  const float *bias;
  void *probs;
  uint8_t *map;
  uint8_t *bitmap;
  void *idx;
  float *weights;
  float *inter;
  int32_t *counts;
  int32_t *qb_hist;
  const float *qb_bounds;
  float *qb_cutoff;
} moegen_router_fwd_params;

/* = rbwd::BwdArgs (router_bwd.cu.lt) */
typedef struct moegen_router_bwd_params {
  const void *grad;
  const float *grad_w;
  const float *inter;
  const uint8_t *map;
  const uint8_t *bitmap;
  const void *idx;
  void *out;
} moegen_router_bwd_params;

/* = aux::ScoresArgs (aux_loss.cu.lt) */
typedef struct moegen_aux_scores_params {
  const void *logits;
  float *scores;
  uint8_t *map;
  uint8_t *bitmap;
  float *inter;
  const float *grad;
  void *grad_logits;
} moegen_aux_scores_params;

/* = aux::LossArgs (aux_loss.cu.lt) */
typedef struct moegen_aux_loss_params {
  const void *probs;
  const void *tpe;
  const int64_t *n_dev;
  int64_t n_host;
  float e_coeff_k;
  void *aux;
  float *cc;
  unsigned *counter;
  float *partials;
  const void *grad_aux;
  void *grad_probs;
  int64_t n;
  int cols;
  int probs_dtype;
  int tpe_dtype;
} moegen_aux_loss_params;

/* = perm::RoutesArgs (permute.cu.lt) */
typedef struct moegen_permute_routes_params {
  const int32_t *idx;
  const uint8_t *map;
  int32_t *tile_counts;
  const int32_t *row_map;
  const float *gpp;
  float *gprobs;
} moegen_permute_routes_params;

/* = perm::RankArgs */
typedef struct moegen_permute_rank_params {
  const int32_t *idx;
  const uint8_t *map;
  const float *probs;
  const int32_t *counts_in;
  const int32_t *tile_counts;
  int32_t *row_map;
  float *pprobs;
  int32_t *offsets;
  int32_t *counts;
  int32_t *dropped;
} moegen_permute_rank_params;

/* = perm::RowsArgs */
typedef struct moegen_permute_rows_params {
  const void *x;
  void *rows;
  const int32_t *row_map;
  const int32_t *offsets;
  const int32_t *counts;
  float *pprobs;
} moegen_permute_rows_params;

/* = perm::CombineArgs */
typedef struct moegen_unpermute_params {
  const void *rows;
  const int32_t *row_map;
  const float *probs;
  void *out;
} moegen_unpermute_params;

/* = perm::UnpermuteBwdArgs */
typedef struct moegen_unpermute_bwd_params {
  const void *gout;
  const int32_t *row_map;
  const float *probs;
  const void *rows;
  void *grows;
  float *gprobs;
  const int32_t *offsets;
  const int32_t *counts;
} moegen_unpermute_bwd_params;

/* = perm::SortArgs */
typedef struct moegen_sort_chunks_params {
  const void *in;
  void *out;
  const int32_t *split;
  const int32_t *order;
  const float *pin;
  float *pout;
  int32_t *row_map;
} moegen_sort_chunks_params;

enum { MOEGEN_MAX_PARAMS = 16 };

#define MOEGEN_ARG_FIELD_(type, name) type name;
#define MOEGEN_ARG_OPERAND_(name) moegen_gemm_operand m##name;
#define MOEGEN_ARGS_STRUCT_(sig, params) typedef struct moegen_args_##sig { params } moegen_args_##sig;
MOEGEN_SIGNATURES(MOEGEN_ARGS_STRUCT_, MOEGEN_ARG_FIELD_, MOEGEN_ARG_OPERAND_, MOEGEN_ARG_FIELD_,
                  MOEGEN_ARG_OPERAND_)
#undef MOEGEN_ARGS_STRUCT_

/* An operand's parameter: the tensor map (sm_90a) or the pointer (portable). */
#define MOEGEN_PARAM_(type, name) params[n++] = &a->name;
#define MOEGEN_PARAM_OPERAND_(name) params[n++] = portable ? (void *)&a->m##name.ptr : (void *)&a->m##name.map;
#define MOEGEN_PARAMS_FN_(sig, params_list)                                                  \
  static inline int moegen_params_##sig(moegen_args_##sig *a, int portable, void **params) { \
    int n = 0;                                                                                \
    (void)portable;                                                                           \
    params_list return n;                                                                     \
  }
MOEGEN_SIGNATURES(MOEGEN_PARAMS_FN_, MOEGEN_PARAM_, MOEGEN_PARAM_OPERAND_, MOEGEN_PARAM_,
                  MOEGEN_PARAM_OPERAND_)
#undef MOEGEN_PARAMS_FN_

/* moegen_launch_SIG(m, id, fn, dims, args, stream, what): packs args and
 * launches kernel id (fn) through moegen_module_launch. */
#define MOEGEN_LAUNCH_FN_(sig, params_list)                                                      \
  static inline moegen_status moegen_launch_##sig(moegen_module *m, moegen_kernel_id id,         \
                                                  CUfunction fn, const moegen_launch_dims *d,    \
                                                  moegen_args_##sig *a, CUstream stream,         \
                                                  const char *what) {                            \
    void *params[MOEGEN_MAX_PARAMS];                                                             \
    moegen_params_##sig(a, moegen_module_image(m)->gemm.portable, params);                       \
    return moegen_module_launch(m, id, MOEGEN_SIG_##sig, fn, d, params, stream, what);           \
  }
MOEGEN_SIGNATURES(MOEGEN_LAUNCH_FN_, , , , )
#undef MOEGEN_LAUNCH_FN_

#endif
