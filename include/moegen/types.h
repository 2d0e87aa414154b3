/* moegen/types.h -- the enums and limits that the config, the runtime API and
 * the templates share. Each list is declared once here, as an X-macro, and
 * everything else derives from it: the C enums below, the names the config
 * parser and help texts use (gen/config.c), and the `abi` table the Lua
 * sandbox gives plan.lua and the templates (gen/sandbox.c: abi.dtype.bf16,
 * abi.score.softmax, abi.index_dtype.int16, abi.count_dtype.bf16,
 * abi.router_bwd.recompute, abi.limits.max_experts), so no template or plan
 * restates a number. */
#ifndef MOEGEN_TYPES_H
#define MOEGEN_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Element types: X(ENUM, name, value, bytes). */
#define MOEGEN_DTYPES(X) \
  X(FP32, fp32, 0, 4)    \
  X(BF16, bf16, 1, 2)    \
  X(FP16, fp16, 2, 2)

/* Score functions: X(ENUM, name, value); the values are TransformerEngine's
 * C enum ints. */
#define MOEGEN_SCORES(X) X(SIGMOID, sigmoid, 0) X(SOFTMAX, softmax, 1) X(SQRTSOFTPLUS, sqrtsoftplus, 2)

/* Element types of a [T, K] expert-index buffer: X(ENUM, name, value). */
#define MOEGEN_INDEX_DTYPES(X) X(INT32, int32, 0) X(INT16, int16, 1) X(INT64, int64, 2)

/* Element types of an aux-loss tokens_per_expert: X(ENUM, name, value). */
#define MOEGEN_COUNT_DTYPES(X) \
  X(INT32, int32, 0) X(INT64, int64, 1) X(FP32, fp32, 2) X(BF16, bf16, 3) X(INT16, int16, 4)

/* How the router backward gets the forward's per-token state (config key
 * router_bwd): X(ENUM, name, value). saved: the forward writes the fp32
 * intermediate [T, E] and the backward reads it (TransformerEngine's way);
 * recompute: the forward saves nothing, and the backward recomputes that
 * state from the logits the forward took (and the routing). */
#define MOEGEN_ROUTER_BWDS(X) X(SAVED, saved, 0) X(RECOMPUTE, recompute, 1)

/* Hard limits of the generated kernels (checked by config validation):
 * X(ENUM, name, value). The router kernels lay a token's experts over the
 * lanes of one warp, at most max_experts_per_lane a lane (they live in
 * registers): max_experts is 32 lanes of those. hidden and ffn are at
 * most max_dim (2^24): the image's plan fields, the kernels' shape
 * constants and the runtime's row sizes are ints (gemm1's N is 2 * ffn, an
 * fp32 row 4 * hidden bytes), and an expert's weight bytes times the
 * experts fit an int64 with room to spare. */
#define MOEGEN_LIMITS(X)                       \
  X(MAX_EXPERTS, max_experts, 2048)              \
  X(MAX_TOPK, max_topk, 32)                      \
  X(MAX_GROUPS, max_groups, 32) /* groups > 1 map to lanes of one warp */ \
  X(MAX_EXPERTS_PER_LANE, max_experts_per_lane, 64)                     \
  X(MAX_DIM, max_dim, 16777216) /* hidden, ffn: see below */

#define MOEGEN_DTYPE_ENUM_(e, name, value, bytes) MOEGEN_DTYPE_##e = value,
typedef enum moegen_dtype { MOEGEN_DTYPES(MOEGEN_DTYPE_ENUM_) } moegen_dtype;
#undef MOEGEN_DTYPE_ENUM_

#define MOEGEN_SCORE_ENUM_(e, name, value) MOEGEN_SCORE_##e = value,
typedef enum moegen_score { MOEGEN_SCORES(MOEGEN_SCORE_ENUM_) } moegen_score;
#undef MOEGEN_SCORE_ENUM_

#define MOEGEN_INDEX_ENUM_(e, name, value) MOEGEN_INDEX_##e = value,
typedef enum moegen_index_dtype { MOEGEN_INDEX_DTYPES(MOEGEN_INDEX_ENUM_) } moegen_index_dtype;
#undef MOEGEN_INDEX_ENUM_

#define MOEGEN_COUNT_ENUM_(e, name, value) MOEGEN_COUNT_##e = value,
typedef enum moegen_count_dtype { MOEGEN_COUNT_DTYPES(MOEGEN_COUNT_ENUM_) } moegen_count_dtype;
#undef MOEGEN_COUNT_ENUM_

#define MOEGEN_ROUTER_BWD_ENUM_(e, name, value) MOEGEN_ROUTER_BWD_##e = value,
typedef enum moegen_router_bwd_mode { MOEGEN_ROUTER_BWDS(MOEGEN_ROUTER_BWD_ENUM_) } moegen_router_bwd_mode;
#undef MOEGEN_ROUTER_BWD_ENUM_

#define MOEGEN_LIMIT_ENUM_(e, name, value) MOEGEN_##e = value,
enum { MOEGEN_LIMITS(MOEGEN_LIMIT_ENUM_) };
#undef MOEGEN_LIMIT_ENUM_

/* How expert parallelism sizes its exchanges (moegen_ep_dispatch, runtime/ep_plan.h). */
typedef enum moegen_ep_mode {
  MOEGEN_EP_EXACT = 0,   /* variable sizes: the counts exchanged, one host sync, sized sends */
  MOEGEN_EP_CAPACITY = 1 /* fixed rows per rank pair, drops at the source's permute, no sync */
} moegen_ep_mode;

/* Bytes of one element of dtype d; 0 if d is no moegen_dtype. */
static inline int moegen_dtype_size(int d) {
#define MOEGEN_DTYPE_SIZE_(e, name, value, bytes) if (d == value) return bytes;
  MOEGEN_DTYPES(MOEGEN_DTYPE_SIZE_)
#undef MOEGEN_DTYPE_SIZE_
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
