/* moegen/types.h -- the enums and limits that the config, the runtime API and
 * the templates share. Each list is declared once here, as an X-macro, and
 * everything else derives from it: the C enums below, the names the config
 * parser and help texts use (gen/config.c), and the `abi` table the Lua
 * sandbox gives plan.lua and the templates (gen/abi.c: abi.dtype.bf16,
 * abi.score.softmax, abi.index_dtype.int16, abi.count_dtype.bf16,
 * abi.router_bwd.recompute, abi.recipe.fp8_block, abi.fp8_grad_format.hybrid,
 * abi.fp8_scale.pow2, abi.fp8_format.e5m2, abi.fp8_max.e4m3,
 * abi.limits.max_experts), so no template or plan
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

/* Precision recipes (config key recipe; SPEC.md 5b): X(ENUM, name, value).
 * bf16: bf16 activations and weights throughout. fp8_tensorwise: TE's
 * current scaling, one scale per tensor from its amax on the device each
 * call. fp8_block: DeepSeek-V3 / TE Float8BlockScaling, E4M3 with an fp32
 * scale per 1 x 128 tile of an activation or gradient row and per 128 x 128
 * block of a weight. */
#define MOEGEN_RECIPES(X) X(BF16, bf16, 0) X(FP8_TENSORWISE, fp8_tensorwise, 1) X(FP8_BLOCK, fp8_block, 2)

/* FP8 element formats: X(ENUM, name, value, max), max = the largest
 * finite value (quantization saturates to +-max). */
#define MOEGEN_FP8_FORMATS(X) X(E4M3, e4m3, 0, 448) X(E5M2, e5m2, 1, 57344)

/* fp8_tensorwise's gradient format (config key fp8_grad_format), as TE's
 * Format: X(ENUM, name, value). hybrid: E4M3 forward tensors, E5M2
 * gradients; e4m3: E4M3 everywhere. */
#define MOEGEN_FP8_GRAD_FORMATS(X) X(HYBRID, hybrid, 0) X(E4M3, e4m3, 1)

/* fp8_block's scales (config key fp8_scale): X(ENUM, name, value). pow2:
 * the quant scale FP8_MAX / amax rounded down to a power of two (its fp32
 * mantissa cleared); fp32: that quotient as it is. */
#define MOEGEN_FP8_SCALES(X) X(POW2, pow2, 0) X(FP32, fp32, 1)

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
  X(MAX_DIM, max_dim, 16777216) /* hidden, ffn: see below */ \
  X(FP8_BLOCK, fp8_block, 128) /* fp8_block's tile: 1 x 128 of a row, 128 x 128 of a weight */

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

#define MOEGEN_RECIPE_ENUM_(e, name, value) MOEGEN_RECIPE_##e = value,
typedef enum moegen_recipe { MOEGEN_RECIPES(MOEGEN_RECIPE_ENUM_) } moegen_recipe;
#undef MOEGEN_RECIPE_ENUM_

#define MOEGEN_FP8_FORMAT_ENUM_(e, name, value, max) MOEGEN_FP8_##e = value,
typedef enum moegen_fp8_format { MOEGEN_FP8_FORMATS(MOEGEN_FP8_FORMAT_ENUM_) } moegen_fp8_format;
#undef MOEGEN_FP8_FORMAT_ENUM_

#define MOEGEN_FP8_GRAD_ENUM_(e, name, value) MOEGEN_FP8_GRAD_##e = value,
typedef enum moegen_fp8_grad_format { MOEGEN_FP8_GRAD_FORMATS(MOEGEN_FP8_GRAD_ENUM_) } moegen_fp8_grad_format;
#undef MOEGEN_FP8_GRAD_ENUM_

#define MOEGEN_FP8_SCALE_ENUM_(e, name, value) MOEGEN_FP8_SCALE_##e = value,
typedef enum moegen_fp8_scale { MOEGEN_FP8_SCALES(MOEGEN_FP8_SCALE_ENUM_) } moegen_fp8_scale;
#undef MOEGEN_FP8_SCALE_ENUM_

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

/* Largest finite value of FP8 format f; 0 if f is no moegen_fp8_format. */
static inline int moegen_fp8_max(int f) {
#define MOEGEN_FP8_MAX_(e, name, value, max) if (f == value) return max;
  MOEGEN_FP8_FORMATS(MOEGEN_FP8_MAX_)
#undef MOEGEN_FP8_MAX_
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
