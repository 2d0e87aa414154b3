/* moegen/runtime.h -- loading generated kernels and launching MoE ops.
 *
 * libmoegen_rt has no Lua and links no CUDA library: it dlopens libcuda.so.1
 * (every entry point through cuGetProcAddress with an explicit version) and,
 * for JIT images only, libnvrtc.so.13. AOT output (NAME.c from the generator)
 * and the in-process JIT (moegen_jit in moegen.h) both produce a
 * `moegen_image`, and moegen_module_create turns either into a module.
 *
 * Rules every op follows:
 *  - status codes, never exit() or printing (the one exception is the single
 *    progress line before a cold JIT compile, sent to the log callback);
 *  - no hidden global state: scratch memory is the caller's workspace, sized
 *    by the op's pure shape function;
 *  - no allocation, no host sync, no device-to-host copy: ops are
 *    capturable in CUDA graphs;
 *  - the device is the one of the context current on the calling thread;
 *    a module serves any number of devices, streams and threads at once.
 */
#ifndef MOEGEN_RUNTIME_H
#define MOEGEN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same typedef as cuda.h / cuda_runtime.h (cudaStream_t is this type too). */
typedef struct CUstream_st *CUstream;

#include "moegen/types.h"
#include "moegen/abi.def" /* MOEGEN_RT_ABI_VERSION, the plan structs, the kernels */

typedef enum moegen_status {
  MOEGEN_OK = 0,
  MOEGEN_ERR_INVALID_ARGUMENT, /* a NULL, a size or a dtype the op cannot take */
  MOEGEN_ERR_NO_DRIVER,        /* libcuda.so.1 missing or too old */
  MOEGEN_ERR_NO_DEVICE,        /* driver present, no usable device / no current context */
  MOEGEN_ERR_NO_NVRTC,         /* JIT image but libnvrtc.so.13 cannot be loaded */
  MOEGEN_ERR_COMPILE,          /* NVRTC rejected the source (log in last error) */
  MOEGEN_ERR_ARCH_MISMATCH,    /* image built for another architecture than the device */
  MOEGEN_ERR_CUDA,             /* a driver call failed (code in last error) */
  MOEGEN_ERR_OUT_OF_MEMORY,    /* host allocation failed */
  MOEGEN_ERR_ABI_MISMATCH,     /* image made by an incompatible generator */
  MOEGEN_ERR_NOT_SUPPORTED     /* the op is not in this module's configuration */
} moegen_status;

/* Static text for a status ("MOEGEN_ERR_NO_DRIVER: ..."). Never NULL. */
const char *moegen_status_string(moegen_status s);

/* ---------------------------------------------------------------- images */

/* The plan structs (moegen_router_plan, moegen_router_bwd_plan,
 * moegen_aux_plan, moegen_gemm_kernel_plan, moegen_gemm_plan,
 * moegen_permute_plan): the launch plans templates/plan.lua chose, one int
 * (or moegen_dtype) per field of moegen/abi.def, which documents each. */
#define MOEGEN_PLAN_INT_(name) int name;
#define MOEGEN_PLAN_DTYPE_(name) moegen_dtype name;
#define MOEGEN_PLAN_SUB_(type, name) type name;
#define MOEGEN_PLAN_STRUCT_(type, FIELDS) \
  typedef struct type { FIELDS(MOEGEN_PLAN_INT_, MOEGEN_PLAN_DTYPE_, MOEGEN_PLAN_SUB_) } type;
MOEGEN_PLAN_STRUCTS(MOEGEN_PLAN_STRUCT_)
#undef MOEGEN_PLAN_STRUCT_

/* Compile units. A module's kernels are compiled, cached and loaded in
 * independent units, each on the first use of one of its kernels, so a
 * program that runs only the router never waits for the GEMM's compile. The
 * generated NAME.cu holds every unit: unit u is that text compiled with
 * MOEGEN_UNIT defined to u (without MOEGEN_UNIT it compiles everything),
 * and one of its kernels with MOEGEN_KERNEL defined too (the JIT's way). */
typedef enum moegen_unit {
  MOEGEN_UNIT_ROUTER = 0,   /* router forward */
  MOEGEN_UNIT_ROUTER_TRAIN, /* what training adds: router backward, aux-loss scores and loss */
  MOEGEN_UNIT_PERMUTE,      /* permute, unpermute, chunk sort */
  MOEGEN_UNIT_GEMM,         /* grouped GEMM forward (plain and with the SwiGLU epilogue) */
  MOEGEN_UNIT_GEMM_TRAIN,   /* what training adds: grouped GEMM dgrad, wgrad, SwiGLU backward */
  MOEGEN_UNIT_QUANT,        /* FP8 quantization (recipes other than bf16): weights, rows, tensors */
  MOEGEN_UNIT_COUNT
} moegen_unit;

/* Everything the runtime needs to load one generated module. AOT images
 * carry a cubin per unit; JIT images carry only the source, each unit
 * compiled at its first use (through the on-disk cache), a kernel an NVRTC
 * program, the unit's kernels in parallel. Images are immutable and may be
 * static. */
typedef struct moegen_image {
  int abi_version;                 /* MOEGEN_RT_ABI_VERSION */
  const char *name;                /* module name ("ds3") */
  const char *arch;                /* "sm_90a", "sm_80", ... */
  const char *config_lua;          /* the config, as a Lua table (for messages) */
  unsigned units;                  /* bit u set: unit u holds kernels (the config calls for them) */
  const unsigned char *const *cubins; /* AOT: [MOEGEN_UNIT_COUNT] cubins (NULL for an empty unit);
                                       * JIT: NULL */
  const size_t *cubin_sizes;       /* AOT: [MOEGEN_UNIT_COUNT] bytes; JIT: NULL */
  const char *source;              /* the generated .cu text (always present) */
  size_t source_size;
  const char *source_path;         /* where NAME.cu was written, or "<jit>" */
#define MOEGEN_IMAGE_PLAN_(type, member) type member;
  MOEGEN_IMAGE_PLANS(MOEGEN_IMAGE_PLAN_) /* router, router_small, router_bwd, aux, gemm, permute, quant */
} moegen_image;

/* ---------------------------------------------------------------- modules */

typedef struct moegen_module moegen_module;

/* Log sink for the runtime's only output, the JIT cache's lines: one
 * progress line before a cold JIT compile of a unit, one line when a
 * corrupt cache entry is discarded (then rebuilt), and one when a unit
 * waits for another process's (or thread's) compile of the same unit. The
 * default writes each line to stderr; NULL silences them. Process-wide; set
 * it before creating modules. */
typedef void (*moegen_log_fn)(const char *line, void *user);
void moegen_set_log(moegen_log_fn fn, void *user);

/* Creates a module from an image (the image must outlive the module). Loads
 * the driver if needed; no GPU work happens until the first launch or
 * moegen_module_load. On error *out may still be a module whose last error
 * explains it (destroy it), or NULL if allocation failed. */
moegen_status moegen_module_create(const moegen_image *image, moegen_module **out);

/* Compiles (JIT) and loads the module for the current context's device now,
 * so the first op launch does no work beyond the launch. Cold JIT kernels
 * are compiled concurrently, a thread each up to the CPUs the process may
 * use ($MOEGEN_JIT_THREADS caps it). Thread-safe. */
moegen_status moegen_module_load(moegen_module *m);

/* Same, for one unit only (its kernels). NOT_SUPPORTED if the module has no
 * kernels of unit u. */
moegen_status moegen_module_load_unit(moegen_module *m, moegen_unit u);

/* "router", "router_train", "permute", "gemm", "gemm_train", "quant"; "?" for anything else. */
const char *moegen_unit_name(moegen_unit u);

void moegen_module_destroy(moegen_module *m);

/* The last error message of this module, from any thread (CUDA code and
 * name, NVRTC log, source path), or "" if none. The text is a copy private to
 * the calling thread, valid until that thread's next call of this function. */
const char *moegen_module_last_error(const moegen_module *m);

const moegen_image *moegen_module_image(const moegen_module *m);

/* ---------------------------------------------------------------- router */

/* moegen_index_dtype (moegen/types.h): element type of a [T, K] expert-index
 * buffer (int16 needs E <= 32767). */

/* Shapes and workspace of moegen_router_fwd for T tokens. Pure: touches no
 * GPU, needs no driver. Shapes are element counts (row-major). */
typedef struct moegen_router_fwd_shape {
  int64_t probs[2];          /* [T, E]  logits dtype */
  int64_t routing_map[2];    /* [T, E]  uint8 0/1 (bytemap) */
  int64_t routing_bitmap[2]; /* [T, ceil(E/8)] uint8, bit e%8 of byte e/8 (LSB-first) */
  int64_t topk_indices[2];   /* [T, K]  index_dtype */
  int64_t topk_weights[2];   /* [T, K]  fp32 */
  int64_t intermediate[2];   /* [T, E]  fp32, saved for backward; [0, 0] where the config has
                              * router_bwd = recompute (the backward reads the logits instead,
                              * and the forward takes no intermediate) */
  int64_t expert_counts[1];  /* [E]    int32 */
  int64_t qb_cutoff[1];      /* [T]    fp32 (quantile-balancing modules) */
  size_t workspace_bytes;    /* 0: the router needs no scratch */
} moegen_router_fwd_shape;

moegen_status moegen_router_fwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_fwd_shape *shape);

/* Router forward arguments (device pointers; any output may be NULL). */
typedef struct moegen_router_fwd_args {
  int64_t num_tokens;     /* T >= 0, T*E <= INT32_MAX. T = 0 launches no kernel and reads
                           * nothing: every pointer but expert_counts may be NULL
                           * (expert_bias, qb_histogram, qb_bounds too); expert_counts, if
                           * given, is still zeroed (a memset node) */
  const void *logits;     /* in  [T, E] logits dtype, contiguous */
  const float *expert_bias; /* in [E] fp32; required iff the config has expert_bias */
  void *probs;            /* out [T, E] logits dtype: scaling*p at selected, 0 elsewhere */
  uint8_t *routing_map;   /* out [T, E] 1 at selected experts, 0 elsewhere */
  uint8_t *routing_bitmap; /* out [T, ceil(E/8)] bit e%8 of byte e/8 set iff e is selected */
  void *topk_indices;     /* out [T, K] index_dtype: selected expert ids, value-descending
                           * order (a caller's buffer is overwritten in place) */
  moegen_index_dtype index_dtype; /* element type of topk_indices (0 = int32) */
  float *topk_weights;    /* out [T, K] scaling*p of topk_indices, fp32 */
  float *intermediate;    /* out [T, E] fp32 saved state for the backward (SPEC 1); must be
                           * NULL where the config has router_bwd = recompute */
  int32_t *expert_counts; /* out [E] tokens routed to each expert (overwritten) */
  /* Quantile balancing (modules with quantile_balancing; NULL/0 otherwise). */
  int32_t *qb_histogram;  /* in/out [E, qb_bins]: ACCUMULATED in place, += 1 per (token,
                           * expert) at the bin of cutoff - s; never zeroed (required) */
  int qb_bins;            /* bins per expert, > 0 (also at T = 0) */
  const float *qb_bounds; /* in [2] fp32 device: lower < upper, both finite (required;
                           * check once with moegen_router_qb_check_bounds) */
  float *qb_cutoff;       /* out [T] fp32: the (K+1)-th largest s + bias of each token */
} moegen_router_fwd_args;

/* Fused top-k router forward (TransformerEngine fused_topk_with_score_function
 * semantics, ties by value descending then expert id ascending).
 * Buffer contract: reads logits and expert_bias; writes every element of each
 * non-NULL output; mutates nothing else. Launches on `stream`: one kernel, plus
 * one memset node before it when expert_counts is requested. No host sync. */
moegen_status moegen_router_fwd(moegen_module *m, const moegen_router_fwd_args *args,
                                CUstream stream);

/* Validates quantile-balancing bounds [2] fp32 on the device: both finite and
 * lower < upper. SYNCHRONIZES `stream` and copies the 8 bytes to the host,
 * so call it once when the bounds change, never in a captured graph; the
 * router op itself never checks them. MOEGEN_ERR_INVALID_ARGUMENT (with the
 * values in the last error) if they are bad. */
moegen_status moegen_router_qb_check_bounds(moegen_module *m, const float *bounds, CUstream stream);

/* ---------------------------------------------------------------- router backward */

/* Shapes and workspace of moegen_router_bwd for T tokens. Pure: touches no
 * GPU, needs no driver. */
typedef struct moegen_router_bwd_shape {
  int64_t grad_logits[2]; /* [T, E]  logits dtype */
  size_t workspace_bytes; /* 0: the backward needs no scratch */
} moegen_router_bwd_shape;

moegen_status moegen_router_bwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_bwd_shape *shape);

/* Router backward arguments (device pointers, 16-byte aligned). The gradient
 * comes as exactly one of grad_probs (dense) or grad_weights (compact, with
 * topk_indices); the routing as exactly one of routing_map, routing_bitmap
 * or topk_indices, as moegen_router_fwd wrote it; the forward's state as
 * the config's router_bwd says: intermediate (saved) or logits (recompute),
 * the other NULL. */
typedef struct moegen_router_bwd_args {
  int64_t num_tokens;            /* T >= 0, T*E <= INT32_MAX; T = 0 does nothing (no GPU
                                  * work) and every pointer may be NULL */
  const void *grad_probs;        /* in [T, E] logits dtype: grad of probs, or NULL */
  const float *grad_weights;     /* in [T, K] fp32: grad of topk_weights, aligned with
                                  * topk_indices, or NULL */
  const float *intermediate;     /* in [T, E] fp32 saved by moegen_router_fwd (router_bwd =
                                  * saved), else NULL */
  const void *logits;            /* in [T, E] logits dtype: the logits moegen_router_fwd read
                                  * (router_bwd = recompute), else NULL */
  const uint8_t *routing_map;    /* in [T, E] bytemap (nonzero = selected), or NULL */
  const uint8_t *routing_bitmap; /* in [T, ceil(E/8)] bit e%8 of byte e/8, or NULL */
  const void *topk_indices;      /* in [T, K] index_dtype: distinct expert ids, or NULL */
  moegen_index_dtype index_dtype; /* element type of topk_indices (0 = int32) */
  void *grad_logits;             /* out [T, E] logits dtype */
} moegen_router_bwd_args;

/* Backward of moegen_router_fwd (SPEC.md 1, Backward): grad_logits from the
 * grad of the probs (times the config's scaling), the saved intermediate
 * (or, router_bwd = recompute, the same state recomputed in fp32 from the
 * logits and the selection: equal within SPEC.md 6's tolerances) and the
 * selection; all math fp32. Every routing format gives bit-identical
 * grad_logits. Buffer contract: reads the inputs; writes every element of
 * grad_logits; mutates nothing else. One kernel on `stream`; no host sync. */
moegen_status moegen_router_bwd(moegen_module *m, const moegen_router_bwd_args *args,
                                CUstream stream);

/* ---------------------------------------------------------------- aux loss */

/* Shapes and workspace of moegen_aux_scores_fwd / _bwd for T tokens. Pure. */
typedef struct moegen_aux_scores_shape {
  int64_t scores[2];         /* [T, E]  fp32 */
  int64_t routing_map[2];    /* [T, E]  uint8 0/1 (bytemap) */
  int64_t routing_bitmap[2]; /* [T, ceil(E/8)] uint8, bit e%8 of byte e/8 (LSB-first) */
  int64_t intermediate[2];   /* [T, E]  fp32, saved for the backward */
  int64_t grad_logits[2];    /* [T, E]  logits dtype */
  size_t workspace_bytes;    /* 0: no scratch */
} moegen_aux_scores_shape;

moegen_status moegen_aux_scores_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_aux_scores_shape *shape);

/* Aux-loss score forward arguments (device pointers, 16-byte aligned). */
typedef struct moegen_aux_scores_fwd_args {
  int64_t num_tokens;       /* T >= 0, T*E <= INT32_MAX; T = 0 does nothing (no GPU work)
                             * and every pointer may be NULL */
  const void *logits;       /* in  [T, E] logits dtype */
  float *scores;            /* out [T, E] fp32: softmax, or sigmoid / sqrtsoftplus
                             * normalized over all E */
  uint8_t *routing_map;     /* out [T, E] 1 at the top-K scores, or NULL */
  uint8_t *routing_bitmap;  /* out [T, ceil(E/8)] the same selection as bits, or NULL */
  float *intermediate;      /* out [T, E] fp32: softmax, sigmoid, or the raw logit */
} moegen_aux_scores_fwd_args;

/* fused_compute_score_for_moe_aux_loss (SPEC.md 2a): scores over all E (no
 * bias, no groups) and their top-K (the config's K; ties by value descending,
 * then expert id ascending). Buffer contract: reads logits; writes every
 * element of scores, intermediate and each non-NULL map. One kernel. */
moegen_status moegen_aux_scores_fwd(moegen_module *m, const moegen_aux_scores_fwd_args *args,
                                    CUstream stream);

/* Aux-loss score backward arguments (device pointers, 16-byte aligned). */
typedef struct moegen_aux_scores_bwd_args {
  int64_t num_tokens;        /* T >= 0, T*E <= INT32_MAX; T = 0 does nothing (no GPU work)
                              * and every pointer may be NULL */
  const float *grad_scores;  /* in  [T, E] fp32 */
  const float *intermediate; /* in  [T, E] fp32 saved by moegen_aux_scores_fwd */
  void *grad_logits;         /* out [T, E] logits dtype */
} moegen_aux_scores_bwd_args;

/* Backward of moegen_aux_scores_fwd (SPEC.md 2a; no routing mask). Buffer
 * contract: reads the inputs; writes every element of grad_logits. One kernel. */
moegen_status moegen_aux_scores_bwd(moegen_module *m, const moegen_aux_scores_bwd_args *args,
                                    CUstream stream);

/* moegen_count_dtype (moegen/types.h): element type of tokens_per_expert. */

/* Shapes and workspace of moegen_aux_loss_fwd / _bwd for probs [R, C]. Pure. */
typedef struct moegen_aux_loss_shape {
  int64_t grad_probs[2];  /* [R, C]  grad dtype */
  size_t workspace_bytes; /* scratch of moegen_aux_loss_fwd (a done-counter + one
                           * fp32 partial per block); the backward needs none */
} moegen_aux_loss_shape;

moegen_status moegen_aux_loss_shape_of(const moegen_image *image, int64_t rows, int64_t cols,
                                       moegen_aux_loss_shape *shape);

/* Aux loss forward arguments (device pointers, unless noted). */
typedef struct moegen_aux_loss_fwd_args {
  int64_t rows;                   /* R >= 0. R = 0 reads neither probs nor tokens_per_expert
                                   * (both may be NULL) and still writes aux_loss = 0 and
                                   * aux_const (so N, aux_loss and the workspace are needed) */
  int64_t cols;                   /* C > 0, a multiple of num_experts, <= INT32_MAX */
  const void *probs;              /* in [R, C] probs_dtype */
  moegen_dtype probs_dtype;       /* of probs and aux_loss */
  const void *tokens_per_expert;  /* in [C] tpe_dtype */
  moegen_count_dtype tpe_dtype;
  int64_t total_num_tokens;       /* host N > 0, or 0 with total_num_tokens_dev */
  const int64_t *total_num_tokens_dev; /* in [] int64 device N > 0 (read when the graph
                                   * runs, so one capture serves any N), or NULL */
  int num_experts;                /* E of Cc (not necessarily the module's) */
  int topk;                       /* K of Cc, > 0 */
  float coeff;                    /* loss coefficient */
  void *aux_loss;                 /* out [] probs_dtype: Cc * sum_c tpe[c] sum_r probs[r,c] */
  float *aux_const;               /* out [] fp32 Cc = ((E*coeff)/topk)/N/N, for the
                                   * backward, or NULL */
  void *workspace;                /* scratch, 16-byte aligned, contents undefined in/out */
  size_t workspace_bytes;         /* >= moegen_aux_loss_shape_of's */
} moegen_aux_loss_fwd_args;

/* fused_moe_aux_loss forward (SPEC.md 2b). Deterministic: a fixed-order
 * reduction (per-block partials in the workspace, the last block adds them
 * in order), the same bits on every run and device. Buffer contract: reads
 * probs, tokens_per_expert and N; writes aux_loss and aux_const; clobbers
 * the workspace. A memset node and one kernel on `stream`; no host sync. */
moegen_status moegen_aux_loss_fwd(moegen_module *m, const moegen_aux_loss_fwd_args *args,
                                  CUstream stream);

/* Aux loss backward arguments (device pointers). */
typedef struct moegen_aux_loss_bwd_args {
  int64_t rows;                  /* R >= 0; R = 0 does nothing (no GPU work) and every pointer
                                  * may be NULL */
  int64_t cols;                  /* C > 0, <= INT32_MAX */
  const float *aux_const;        /* in [] fp32 Cc from moegen_aux_loss_fwd */
  const void *tokens_per_expert; /* in [C] tpe_dtype */
  moegen_count_dtype tpe_dtype;
  const void *grad_aux;          /* in [] grad_dtype */
  moegen_dtype grad_dtype;       /* of grad_aux and grad_probs */
  void *grad_probs;              /* out [R, C] grad_dtype: Cc * tpe[c] * grad_aux */
} moegen_aux_loss_bwd_args;

/* Backward of moegen_aux_loss_fwd. Buffer contract: reads the inputs; writes
 * every element of grad_probs. One kernel on `stream`; no host sync. */
moegen_status moegen_aux_loss_bwd(moegen_module *m, const moegen_aux_loss_bwd_args *args,
                                  CUstream stream);

/* ---------------------------------------------------------------- grouped GEMM */

/* Which of the module's two expert GEMMs. */
typedef enum moegen_gemm_id {
  MOEGEN_GEMM1 = 1, /* N = 2F, K = H: [rows, H] x [E, 2F, H]^T (gate and up projections) */
  MOEGEN_GEMM2 = 2  /* N = H, K = F:  [rows, F] x [E, H, F]^T (down projection) */
} moegen_gemm_id;

/* Shapes and workspace of moegen_gemm_fwd for at most max_rows rows. Pure:
 * touches no GPU, needs no driver. NOT_SUPPORTED if the module has no GEMM
 * kernels (an arch before sm_80, or H or F not a multiple of 8). */
typedef struct moegen_gemm_fwd_shape {
  int64_t x[2];           /* [max_rows, K]  bf16 */
  int64_t w[3];           /* [E, N, K]      bf16 */
  int64_t y[2];           /* [max_rows, N]  bf16 */
  int64_t counts[1];      /* [E]            int32 (or offsets [E + 1] int32) */
  size_t workspace_bytes; /* scratch of moegen_gemm_fwd: MOEGEN_GEMM_WORKSPACE_BYTES on sm_90a
                           * (the tile ticket), 0 on the portable path */
} moegen_gemm_fwd_shape;

/* Scratch bytes of a row-tiled GEMM call on sm_90a (forward, dgrad, SwiGLU
 * forward, dgrad + SwiGLU): one int32 tile ticket the op zeroes (a memset
 * node) before its kernel, which hands tiles to its persistent CTAs in
 * ticket order. Calls that may run at the same time need their own. */
#define MOEGEN_GEMM_WORKSPACE_BYTES 16u

moegen_status moegen_gemm_fwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_fwd_shape *shape);

/* Grouped GEMM forward arguments (device pointers, 16-byte aligned). The
 * rows of expert e are rows [o_e, o_e + m_e) of x and y, where m_e and o_e
 * come from exactly one of counts (o_e = sum of earlier counts) or offsets
 * (o_e = offsets[e], m_e = offsets[e+1] - offsets[e]), read on the device
 * when the kernel runs (so one captured graph serves any routing); with
 * max_rows = 0 neither is needed. */
typedef struct moegen_gemm_fwd_args {
  moegen_gemm_id which;   /* MOEGEN_GEMM1 or MOEGEN_GEMM2 */
  int64_t max_rows;       /* host bound on the rows of x and y (>= sum m_e; <= INT32_MAX);
                           * 0 does nothing (no GPU work) and every pointer (counts,
                           * offsets, workspace too) may be NULL. Rows at or past it are
                           * never touched */
  const void *x;          /* in  [max_rows, K] bf16 row-major, rows grouped by expert */
  const void *w;          /* in  [E, N, K] bf16, K contiguous (nn.Linear weight per expert) */
  void *y;                /* out [max_rows, N] bf16: y_e = x_e w_e^T, fp32 accumulation */
  const int32_t *counts;  /* in  [E] int32 device: m_e >= 0 (negative counts read as 0), or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device: nondecreasing row offsets, or NULL */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out; NULL when the
                           * shape's workspace_bytes is 0 */
  size_t workspace_bytes; /* >= moegen_gemm_fwd_shape_of's */
} moegen_gemm_fwd_args;

/* Grouped GEMM forward: y_e = x_e w_e^T for every expert (SPEC.md 5, no bias).
 * Buffer contract: reads x, w and the counts/offsets; writes exactly the
 * rows of y that belong to an expert (below max_rows) and clobbers the
 * workspace; mutates nothing else (rows of y outside every expert keep
 * their contents). On sm_90a a memset node (the workspace's tile ticket)
 * and one kernel on `stream` (its two TMA descriptors are encoded on the
 * host, no GPU work); on the portable path one kernel; no host sync,
 * graph-capturable. NOT_SUPPORTED as for the shape function. With gemm.tall_rows_per_expert > 0 and max_rows >=
 * gemm.tall_rows_per_expert * E it runs the tall-tile kernel
 * (gemm.gemm1_tall / gemm2_tall), else the 128-row one. */
moegen_status moegen_gemm_fwd(moegen_module *m, const moegen_gemm_fwd_args *args,
                              CUstream stream);

/* ---------------------------------------------------------------- grouped GEMM backward, SwiGLU */

/* Shapes and workspace of the backward ops of GEMM `which` (N, K as in
 * moegen_gemm_fwd_shape) for at most max_rows rows. Pure; NOT_SUPPORTED as
 * for the forward. */
typedef struct moegen_gemm_bwd_shape {
  int64_t dy[2];          /* [max_rows, N]  bf16 */
  int64_t w[3];           /* [E, N, K]      bf16 */
  int64_t x[2];           /* [max_rows, K]  bf16 */
  int64_t dx[2];          /* [max_rows, K]  bf16 */
  int64_t dw[3];          /* [E, N, K]      bf16 (or fp32 with accumulate) */
  int64_t db[2];          /* [E, N]         fp32 */
  int64_t counts[1];      /* [E]            int32 (or offsets [E + 1] int32) */
  size_t workspace_bytes; /* scratch of dgrad, the SwiGLU forward and dgrad + SwiGLU:
                           * MOEGEN_GEMM_WORKSPACE_BYTES on sm_90a, else 0 (wgrad needs none) */
} moegen_gemm_bwd_shape;

moegen_status moegen_gemm_bwd_shape_of(const moegen_image *image, moegen_gemm_id which,
                                       int64_t max_rows, moegen_gemm_bwd_shape *shape);

/* Grouped GEMM data gradient (device pointers, 16-byte aligned; rows of
 * expert e as in moegen_gemm_fwd_args). */
typedef struct moegen_gemm_dgrad_args {
  moegen_gemm_id which;   /* MOEGEN_GEMM1 or MOEGEN_GEMM2 */
  int64_t max_rows;       /* as in moegen_gemm_fwd_args; 0 does nothing and every pointer
                           * may be NULL */
  const void *dy;         /* in  [max_rows, N] bf16, rows grouped by expert */
  const void *w;          /* in  [E, N, K] bf16 (the forward's weight, not transposed) */
  void *dx;               /* out [max_rows, K] bf16: dx_e = dy_e w_e, fp32 accumulation */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out (NULL if the
                           * shape's workspace_bytes is 0) */
  size_t workspace_bytes; /* >= moegen_gemm_bwd_shape_of's */
} moegen_gemm_dgrad_args;

/* dgrad: dx_e = dy_e w_e for every expert (SPEC.md 5, cuBLAS "NN").
 * Buffer contract: reads dy, w, counts/offsets; writes exactly the rows of
 * dx that belong to an expert (below max_rows) and clobbers the workspace;
 * mutates nothing else. A memset node (sm_90a) and one kernel on `stream`,
 * no host sync, graph-capturable. Tall tiles as for
 * moegen_gemm_fwd (gemm.gemm1_dgrad_tall / gemm2_dgrad_tall). */
moegen_status moegen_gemm_dgrad(moegen_module *m, const moegen_gemm_dgrad_args *args,
                                CUstream stream);

/* Grouped GEMM weight (and bias) gradient. */
typedef struct moegen_gemm_wgrad_args {
  moegen_gemm_id which;   /* MOEGEN_GEMM1 or MOEGEN_GEMM2 */
  int64_t max_rows;       /* as in moegen_gemm_fwd_args. 0: every expert is empty; dy, x,
                           * counts and offsets are not read (may be NULL), dw (required)
                           * and db are zeroed with accumulate = 0 (memset nodes, no
                           * kernel), left as they are with accumulate = 1 */
  const void *dy;         /* in  [max_rows, N] bf16, rows grouped by expert */
  const void *x;          /* in  [max_rows, K] bf16 (the forward's input) */
  void *dw;               /* out [E, N, K]: bf16 dw_e = dy_e^T x_e (accumulate = 0), or
                           * in/out fp32 main_grad dw_e += dy_e^T x_e (accumulate = 1) */
  float *db;              /* out [E, N] fp32 column sums of dy_e (= or += as dw), or NULL */
  int accumulate;         /* 0 or 1 */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
} moegen_gemm_wgrad_args;

/* wgrad: dw_e = dy_e^T x_e and db_e = sum over the expert's rows of dy_e
 * (SPEC.md 5, "NT"; fp32 accumulation over the m_e rows read from the
 * device). Buffer contract: reads dy, x, counts/offsets; accumulate = 0
 * writes all of dw and db (an expert with no rows gets zeros); accumulate =
 * 1 adds into dw and db in place (an expert with no rows leaves them
 * untouched). Rows of dy and x outside every expert are never read into a
 * sum. One kernel on `stream`, no host sync, graph-capturable. */
moegen_status moegen_gemm_wgrad(moegen_module *m, const moegen_gemm_wgrad_args *args,
                                CUstream stream);

/* gemm1 forward with the fused SwiGLU epilogue. With h = x_e w_e^T + b_e
 * ([rows, 2F], fp32 accumulation), gate = h[:, :F] and up = h[:, F:] (the
 * order of torch.chunk(h, 2, -1) and TE's swiglu): act = silu(gate) * up *
 * prob[row]. */
typedef struct moegen_gemm_glu_args {
  int64_t max_rows;       /* as in moegen_gemm_fwd_args; 0 does nothing and every pointer
                           * may be NULL */
  const void *x;          /* in  [max_rows, H] bf16, rows grouped by expert */
  const void *w;          /* in  [E, 2F, H] bf16: rows [0, F) gate, [F, 2F) up */
  const void *bias;       /* in  [E, 2F] bf16, or NULL (no bias) */
  const float *prob;      /* in  [max_rows] fp32 per-row scale of act, or NULL (1) */
  void *act;              /* out [max_rows, F] bf16 */
  void *h;                /* out [max_rows, 2F] bf16 pre-activation (bias added), or NULL */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out (NULL if the
                           * shape's workspace_bytes is 0) */
  size_t workspace_bytes; /* >= moegen_gemm_bwd_shape_of's */
} moegen_gemm_glu_args;

/* Buffer contract: reads x, w, bias, prob, counts/offsets; writes exactly
 * the expert rows (below max_rows) of act and h and clobbers the workspace;
 * mutates nothing else. A memset node (sm_90a) and one kernel, no host
 * sync, graph-capturable. Tall tiles as for moegen_gemm_fwd
 * (gemm.gemm1_glu_tall). */
moegen_status moegen_gemm1_fwd_glu(moegen_module *m, const moegen_gemm_glu_args *args,
                                   CUstream stream);

/* gemm2 dgrad fused with the SwiGLU backward: dact = dy_e w2_e ([rows, F],
 * fp32), then from the h saved by moegen_gemm1_fwd_glu (gate g, up u):
 * dh[:, :F] = dact * prob * u * silu'(g), dh[:, F:] = dact * prob * silu(g),
 * and dprob[row] += sum_f dact * silu(g) * u. */
typedef struct moegen_gemm_dglu_args {
  int64_t max_rows;       /* as in moegen_gemm_fwd_args; 0 does nothing and every pointer
                           * may be NULL */
  const void *dy;         /* in  [max_rows, H] bf16: the gradient of gemm2's output */
  const void *w;          /* in  [E, H, F] bf16: gemm2's weight */
  const void *h;          /* in  [max_rows, 2F] bf16 pre-activation (moegen_gemm_glu_args.h) */
  const float *prob;      /* in  [max_rows] fp32 as given to the forward, or NULL (1) */
  void *dh;               /* out [max_rows, 2F] bf16: the gradient of h (gemm1's dy) */
  float *dprob;           /* in/out [max_rows] fp32, += (the caller zeroes it), or NULL */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out (NULL if the
                           * shape's workspace_bytes is 0) */
  size_t workspace_bytes; /* >= moegen_gemm_bwd_shape_of's */
} moegen_gemm_dglu_args;

/* Buffer contract: reads dy, w, h, prob, counts/offsets; writes exactly the
 * expert rows (below max_rows) of dh; adds into the expert rows of dprob
 * (fp32 atomics, one per row and column tile: the summation order, and so
 * the last bits of dprob, may vary run to run); clobbers the workspace. A
 * memset node (sm_90a) and one kernel, no host sync, graph-capturable. Tall
 * tiles as for moegen_gemm_fwd (gemm.gemm2_dgrad_tall). */
moegen_status moegen_gemm2_dgrad_glu(moegen_module *m, const moegen_gemm_dglu_args *args,
                                     CUstream stream);

/* ---------------------------------------------------------------- grouped GEMM forward, fp8_block */

/* Shapes and workspace of the fp8_block forward ops of GEMM `which` (N, K as
 * in moegen_gemm_fwd_shape) for at most max_rows rows. Pure.
 * NOT_SUPPORTED unless the module has the fp8_block kernels: sm_90a, config
 * recipe fp8_block, hidden and ffn multiples of 128 (the portable path has
 * no FP8 GEMM yet). Layouts: SPEC.md 5b and the FP8 interface (dequant
 * scales, value = fp8 * scale). */
typedef struct moegen_gemm_fwd_fp8_shape {
  int64_t x[2];           /* [max_rows, K]          e4m3 */
  int64_t x_scale[2];     /* [K / 128, scale_ld]    fp32; the least scale_ld in [1] */
  int64_t w[3];           /* [E, N, K]              e4m3 */
  int64_t w_scale[3];     /* [E, N / 128, K / 128]  fp32 */
  int64_t y[2];           /* [max_rows, N]          bf16 (the SwiGLU op: h; act [max_rows, N / 2]) */
  int64_t counts[1];      /* [E]                    int32 (or offsets [E + 1] int32) */
  size_t workspace_bytes; /* MOEGEN_GEMM_WORKSPACE_BYTES (the tile ticket) */
} moegen_gemm_fwd_fp8_shape;

moegen_status moegen_gemm_fwd_fp8_shape_of(const moegen_image *image, moegen_gemm_id which,
                                           int64_t max_rows, moegen_gemm_fwd_fp8_shape *shape);

/* fp8_block grouped GEMM forward arguments (device pointers; x, w, y
 * 16-byte aligned, the scales 16-byte aligned). Rows of expert e as in
 * moegen_gemm_fwd_args. */
typedef struct moegen_gemm_fwd_fp8_args {
  moegen_gemm_id which;   /* MOEGEN_GEMM1 or MOEGEN_GEMM2 */
  int64_t max_rows;       /* as in moegen_gemm_fwd_args; 0 does nothing and every pointer
                           * may be NULL */
  const void *x;          /* in  [max_rows, K] e4m3 row-major, rows grouped by expert */
  const float *x_scale;   /* in  [K / 128, scale_ld] fp32 dequant scales of x's 1x128 blocks:
                           * x[r, k] ~= fp8 * x_scale[k / 128, r] (rows contiguous) */
  int64_t scale_ld;       /* >= max_rows, a multiple of 4, <= INT32_MAX */
  const void *w;          /* in  [E, N, K] e4m3, K contiguous */
  const float *w_scale;   /* in  [E, N / 128, K / 128] fp32 dequant scales of 128x128 blocks */
  void *y;                /* out [max_rows, N] bf16: y_e = dequant(x_e) dequant(w_e)^T, each
                           * 128-wide K block's product promoted into an fp32 sum */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out */
  size_t workspace_bytes; /* >= moegen_gemm_fwd_fp8_shape_of's */
} moegen_gemm_fwd_fp8_args;

/* y_e = dequant(x_e) dequant(w_e)^T for every expert (SPEC.md 5b, fprop).
 * Buffer contract as moegen_gemm_fwd's: reads x, w, their scales and the
 * counts/offsets; writes exactly the expert rows (below max_rows) of y and
 * clobbers the workspace. A memset node and one kernel on `stream` (two TMA
 * descriptors encoded on the host), no host sync, graph-capturable.
 * NOT_SUPPORTED as for the shape function (naming why). */
moegen_status moegen_gemm_fwd_fp8(moegen_module *m, const moegen_gemm_fwd_fp8_args *args,
                                  CUstream stream);

/* gemm1's fp8_block forward with the SwiGLU epilogue of moegen_gemm1_fwd_glu
 * (h = dequant(x_e) dequant(w_e)^T + b_e, act = silu(gate) * up * prob). */
typedef struct moegen_gemm_glu_fp8_args {
  int64_t max_rows;       /* as in moegen_gemm_fwd_args; 0 does nothing and every pointer
                           * may be NULL */
  const void *x;          /* in  [max_rows, H] e4m3, rows grouped by expert */
  const float *x_scale;   /* in  [H / 128, scale_ld] fp32 (as moegen_gemm_fwd_fp8_args) */
  int64_t scale_ld;       /* >= max_rows, a multiple of 4, <= INT32_MAX */
  const void *w;          /* in  [E, 2F, H] e4m3: rows [0, F) gate, [F, 2F) up */
  const float *w_scale;   /* in  [E, 2F / 128, H / 128] fp32 */
  const void *bias;       /* in  [E, 2F] bf16, or NULL (no bias) */
  const float *prob;      /* in  [max_rows] fp32 per-row scale of act, or NULL (1) */
  void *act;              /* out [max_rows, F] bf16 */
  void *h;                /* out [max_rows, 2F] bf16 pre-activation (bias added), or NULL */
  const int32_t *counts;  /* in  [E] int32 device, or NULL */
  const int32_t *offsets; /* in  [E + 1] int32 device, or NULL (exactly one of the two) */
  void *workspace;        /* scratch, 16-byte aligned, contents undefined in/out */
  size_t workspace_bytes; /* >= moegen_gemm_fwd_fp8_shape_of's */
} moegen_gemm_glu_fp8_args;

/* Buffer contract as moegen_gemm1_fwd_glu's (x, w and their scales read in
 * place of the bf16 ones). A memset node and one kernel, no host sync,
 * graph-capturable. NOT_SUPPORTED as for moegen_gemm_fwd_fp8_shape_of. */
moegen_status moegen_gemm1_fwd_glu_fp8(moegen_module *m, const moegen_gemm_glu_fp8_args *args,
                                       CUstream stream);

/* ---------------------------------------------------------------- permutation (SPEC.md 4) */

/* Row layout of a permutation (what moegen_permute_fwd writes and every
 * later permutation op reads):
 *  - rows [R, H]: expert-major, token order kept inside each expert; expert
 *    e owns rows [offsets[e], offsets[e+1]); its first counts[e] rows are
 *    routes (the kept ones, in token order), the rest (fewer than align) are
 *    zero pad rows; rows [offsets[E], R) are zero too.
 *  - row_map [T, K] int32: row_map[t, k] = the row of route (t, k), or -1 if
 *    the route was dropped (capacity) or does not exist. Slot k is the k-th
 *    entry of topk_indices, or for a bytemap the token's k-th selected
 *    expert in ascending id order. (TE's index-map row_id_map is its
 *    transpose [K, T].)
 *  - R = moegen_permute_shape.rows[0], a host bound: T*K + E*(align - 1),
 *    or less with a capacity (E * roundup(capacity, align)).
 * offsets feed moegen_gemm_fwd_args.offsets directly. */

/* Shapes and workspace of moegen_permute_fwd for T tokens. Pure. align: 1
 * (no padding) or a power of two <= 128; capacity: 0 (none) or > 0. */
typedef struct moegen_permute_shape {
  int64_t rows[2];           /* [R, H]  x dtype */
  int64_t permuted_probs[1]; /* [R]     fp32 */
  int64_t row_map[2];        /* [T, K]  int32 */
  int64_t offsets[1];        /* [E + 1] int32 */
  int64_t counts[1];         /* [E]     int32 */
  size_t workspace_bytes;    /* per-tile histograms: max(1, ceil(T / tile_tokens)) * E * 4 */
  int64_t rows_fp8[2];       /* [R, H]  e4m3 (recipe fp8_block; else [0, 0]) */
  int64_t row_scales[2];     /* [H/128, scale_ld] fp32 (fp8_block; else [0, 0]) */
  int64_t scale_ld;          /* the smallest scale_ld: R rounded up to a multiple of 4 (fp8_block) */
} moegen_permute_shape;

moegen_status moegen_permute_shape_of(const moegen_image *image, int64_t num_tokens, int align,
                                      int capacity, moegen_permute_shape *shape);

/* Permute forward arguments (device pointers, 16-byte aligned). The routing
 * is exactly one of topk_indices and routing_map (at T = 0 neither is
 * needed). */
typedef struct moegen_permute_args {
  int64_t num_tokens;          /* T >= 0; T*K + E*align <= INT32_MAX. T = 0 reads and writes
                                * no [T, ...] tensor (x, the routing, probs, row_map may be
                                * NULL) and still launches the kernels: offsets and counts (0,
                                * or from expert_counts), num_dropped, and the R = E*(align-1)
                                * (capacity: at most) zero pad rows of rows / permuted_probs
                                * are written; offsets, counts and the workspace are required */
  moegen_dtype dtype;          /* of x and rows */
  const void *x;               /* in  [T, H] tokens, or NULL when rows is NULL */
  const int32_t *topk_indices; /* in  [T, K] int32 distinct expert ids per token (ids
                                * outside [0, E) are no route), or NULL */
  const uint8_t *routing_map;  /* in  [T, E] bytemap (nonzero = routed; at most K per token
                                * are used, the lowest ids), or NULL */
  const float *probs;          /* in  [T, K] fp32 with topk_indices, [T, E] fp32 with
                                * routing_map; or NULL */
  const int32_t *expert_counts; /* in [E] int32: routes per expert of this routing (the
                                * router's fused counts), or NULL (counted here). Unchecked:
                                * a wrong count drops routes but never writes past R */
  int align;                   /* 1 or a power of two <= 128 (16, 32, 128: FP8 recipes) */
  int capacity;                /* routes kept per expert, earliest tokens first; 0 = all */
  void *rows;                  /* out [R, H] permuted rows, every row below R written; or
                                * NULL (index outputs only) */
  float *permuted_probs;       /* out [R] fp32 probs of the rows (0 on pad rows), or NULL */
  int32_t *row_map;            /* out [T, K] (see above) */
  int32_t *offsets;            /* out [E + 1] padded row offsets (offsets[0] = 0) */
  int32_t *counts;             /* out [E] kept routes per expert (tokens_per_expert) */
  int32_t *num_dropped;        /* out [1] routes dropped by the capacity, or NULL */
  void *workspace;             /* scratch of moegen_permute_shape_of's size, 16-byte aligned */
  size_t workspace_bytes;
  /* recipe fp8_block: the rows quantized as they are written (the bytes and
   * scales moegen_quant_rows gives for rows; one read of x for both). */
  uint8_t *rows_fp8;           /* out [R, H] e4m3, every row below R written (pad rows 0), or
                                * NULL; needs dtype bf16 and an fp8_block module (else
                                * NOT_SUPPORTED) */
  float *row_scales;           /* out [H/128, scale_ld] fp32 dequant scales: row_scales[j *
                                * scale_ld + r] of rows_fp8[r, 128j ..] (1 on pad rows; columns
                                * r >= R left as they are); required with rows_fp8 */
  int64_t scale_ld;            /* with rows_fp8: >= R, a multiple of 4, <= INT32_MAX */
} moegen_permute_args;

/* moe_permute (SPEC.md 4a, 4c, 4e) without a host sync: counts, offsets and
 * rows are computed on the device, padding to `align` and capacity dropping
 * included. Deterministic (no atomics decide a row). Buffer contract: reads
 * x, the routing, probs, expert_counts; writes every element of each non-NULL
 * output; clobbers the workspace. Three kernels on `stream` (histograms,
 * ranks, rows); graph-capturable. */
moegen_status moegen_permute_fwd(moegen_module *m, const moegen_permute_args *args,
                                 CUstream stream);

/* Combine arguments (moegen_unpermute_fwd; also the permute backward). */
typedef struct moegen_unpermute_args {
  int64_t num_tokens;          /* T >= 0; T = 0 does nothing (no GPU work) and every pointer
                                * may be NULL */
  moegen_dtype dtype;          /* of rows and out */
  const void *rows;            /* in  [R, H] (any R the row map points into) */
  const int32_t *row_map;      /* in  [T, K] from moegen_permute_fwd */
  const float *merging_probs;  /* in  [T, K] fp32 slot-aligned weights, or NULL (1) */
  void *out;                   /* out [T, H] */
} moegen_unpermute_args;

/* moe_unpermute (SPEC.md 4b/4e): out[t] = sum_k w[t,k] rows[row_map[t,k]]
 * over the routes with a row (k ascending, fp32 fma, one rounding to dtype);
 * pad rows are never read. Buffer contract: reads rows, row_map, probs;
 * writes all of out. One kernel; graph-capturable. */
moegen_status moegen_unpermute_fwd(moegen_module *m, const moegen_unpermute_args *args,
                                   CUstream stream);

/* Permute backward arguments. */
typedef struct moegen_permute_bwd_args {
  int64_t num_tokens;          /* T >= 0; T = 0 does nothing (no GPU work) and every pointer
                                * may be NULL */
  moegen_dtype dtype;          /* of grad_rows and grad_x */
  const void *grad_rows;       /* in  [R, H] grad of the permuted rows */
  const int32_t *row_map;      /* in  [T, K] */
  void *grad_x;                /* out [T, H] sum_k grad_rows[row_map[t,k]] (fp32), or NULL */
  const float *grad_permuted_probs; /* in [R] fp32, or NULL (no probs grad) */
  const uint8_t *routing_map;  /* in  [T, E] the forward's bytemap, or NULL (indices) */
  float *grad_probs;           /* out [T, K] fp32 (indices) or [T, E] (bytemap, 0 off the
                                * routes): grad_permuted_probs at the route's row, 0 for
                                * dropped routes; or NULL */
} moegen_permute_bwd_args;

/* Backward of moegen_permute_fwd (SPEC.md 4a/4e): the combine without probs
 * plus the probs-grad gather. Buffer contract: reads the inputs; writes all
 * of grad_x and grad_probs. One or two kernels; graph-capturable. */
moegen_status moegen_permute_bwd(moegen_module *m, const moegen_permute_bwd_args *args,
                                 CUstream stream);

/* Unpermute backward arguments. */
typedef struct moegen_unpermute_bwd_args {
  int64_t num_tokens;          /* T >= 0. T = 0: the [T, ...] tensors (grad_out, row_map,
                                * merging_probs, grad_probs) may be NULL and rows is not read;
                                * with R > 0 (pad rows) every row of grad_rows is zeroed
                                * (offsets, counts, grad_rows required), with R = 0 nothing
                                * is done (every pointer may be NULL) */
  int64_t num_rows;            /* R: rows of grad_rows (moegen_permute_shape.rows[0]) */
  moegen_dtype dtype;          /* of grad_out, rows, grad_rows */
  const void *grad_out;        /* in  [T, H] */
  const int32_t *row_map;      /* in  [T, K] */
  const int32_t *offsets;      /* in  [E + 1] from moegen_permute_fwd */
  const int32_t *counts;       /* in  [E] from moegen_permute_fwd */
  const float *merging_probs;  /* in  [T, K] fp32 as given to the forward, or NULL */
  const void *rows;            /* in  [R, H] the forward's rows (required with grad_probs) */
  void *grad_rows;             /* out [R, H]: w[t,k] grad_out[t] at route rows (a bit copy
                                * without probs), zeros on every other row below R */
  float *grad_probs;           /* out [T, K] fp32 dot(grad_out[t], rows[row]) (fp32), 0 for
                                * routes without a row; or NULL */
} moegen_unpermute_bwd_args;

/* Backward of moegen_unpermute_fwd (SPEC.md 4b/4e). Buffer contract: reads
 * the inputs; writes every row of grad_rows below R and all of grad_probs.
 * One kernel; graph-capturable. */
moegen_status moegen_unpermute_bwd(moegen_module *m, const moegen_unpermute_bwd_args *args,
                                   CUstream stream);

/* Chunk sort arguments (moe_sort_chunks_by_index, SPEC.md 4f). */
typedef struct moegen_sort_chunks_args {
  int64_t num_rows;            /* N >= 0 rows of in and out (>= sum of split_sizes); N = 0
                                * does nothing (no GPU work) and every pointer may be NULL */
  moegen_dtype dtype;          /* of in and out */
  int num_chunks;              /* S, 0 <= S <= moegen_permute_plan.max_chunks */
  const int32_t *split_sizes;  /* in  [S] int32 device: rows per chunk, input order */
  const int32_t *sorted_index; /* in  [S] int32 device: a permutation of [0, S) */
  const void *in;              /* in  [N, H] */
  void *out;                   /* out [N, H] */
  const float *probs;          /* in  [N] fp32, or NULL */
  float *out_probs;            /* out [N] fp32, or NULL (needs probs) */
  int32_t *row_map;            /* out [N] int32 destination row of each input row (forward
                                * only), or NULL */
  int backward;                /* 0: out[dst(p)] = in[p]; 1: out[p] = in[dst(p)] */
} moegen_sort_chunks_args;

/* The output is the chunks in the order sorted_index[0], sorted_index[1],
 * ...; rows past the chunks map to themselves. Buffer contract: reads the
 * inputs; writes all N rows of out (and out_probs, row_map). One kernel;
 * graph-capturable. Values are not checked (a non-permutation leaves rows
 * unwritten but never writes outside [0, N)). */
moegen_status moegen_sort_chunks(moegen_module *m, const moegen_sort_chunks_args *args,
                                 CUstream stream);

/* ---------------------------------------------------------------- expert parallelism (NCCL) */

/* Expert parallelism (EP) over an NCCL communicator the caller creates:
 * E experts split evenly over its `ranks` ranks (E % ranks == 0), rank r
 * owning experts [r*El, (r+1)*El), El = E / ranks. Each rank permutes its
 * own tokens over all E experts (moegen_permute_fwd, align 1); dispatch
 * sends each rank the rows of its experts and regroups what arrives by
 * local expert (the local grouped GEMMs' layout); combine sends the
 * results back into the permuted rows they left from, where
 * moegen_unpermute_fwd sums them. Backward: the dy rows take the dispatch
 * way, the dx rows the combine way (the same two ops). The bookkeeping
 * (who sends what where, capacity slots) is runtime/ep_plan.h's.
 *
 * moegen links no NCCL: libnccl.so.2 ($MOEGEN_LIBNCCL overrides the name)
 * is dlopened at the first EP call; without it every EP op returns
 * MOEGEN_ERR_NOT_SUPPORTED naming the library. No MPI: the communicator
 * (nccl.h's ncclComm_t is `struct ncclComm *`) is the caller's, made on the
 * device current on the calling thread; rank and ranks must be its own.
 *
 * Modes (moegen_ep_mode, moegen/types.h):
 *  - MOEGEN_EP_EXACT: the per-(rank, expert) row counts go to every rank by
 *    ncclSend/ncclRecv on the device, then dispatch SYNCHRONIZES `stream`
 *    once and copies them to the host ([E+1] + [ranks, El+1] int32: NCCL
 *    takes host sizes), then one ncclGroupStart/End of a send and a receive
 *    per peer. Not capturable in a CUDA graph (the host sync).
 *  - MOEGEN_EP_CAPACITY: fixed El * capacity rows per rank pair, the
 *    routes beyond `capacity` per (source rank, expert) dropped by the
 *    source's moegen_permute_fwd (its capacity rule: earliest tokens kept,
 *    counted in num_dropped). NOT_SUPPORTED in this version: its send
 *    slices start at device-computed offsets, which needs a layout kernel
 *    the generator does not emit yet (the CPU simulation test_ep_sim checks
 *    its bookkeeping).
 * Streams: every op runs on the one `stream` given (NCCL's kernels
 * included); a caller overlapping other work orders it with its own
 * events around the call. */
struct ncclComm;

/* MOEGEN_OK if libnccl.so.2 loads with every entry point EP needs, else
 * MOEGEN_ERR_NOT_SUPPORTED with the reason (naming the library) in
 * why[why_size]. Needs no GPU. */
moegen_status moegen_ep_available(char *why, size_t why_size);

/* Shapes of one rank's dispatch / combine for up to max_tokens tokens on
 * every rank (dtype bf16 or fp16 rows of H = the module's hidden size).
 * Pure: touches no GPU, needs no NCCL. INVALID_ARGUMENT if ranks < 1,
 * E % ranks != 0, max_tokens < 0, or ranks * (El + 1) chunks exceed
 * moegen_permute_plan.max_chunks. */
typedef struct moegen_ep_shape {
  int local_experts;         /* El = E / ranks */
  int64_t recv_rows[2];      /* [N, H]   bound of the rows a rank receives: ranks *
                              * max_tokens * K (EXACT) */
  int64_t recv_offsets[2];   /* [ranks, El + 1] int32: each source's offsets of my experts */
  int64_t local_offsets[1];  /* [El + 1] int32: GEMM offsets of the regrouped rows */
  int64_t host_sizes[1];     /* [3 * ranks + 1] int64 HOST: the exchange's sizes, dispatch
                              * -> combine */
  size_t state_bytes;        /* device state dispatch -> combine (chunk tables, staging) */
} moegen_ep_shape;

moegen_status moegen_ep_shape_of(const moegen_image *image, int ranks, int64_t max_tokens,
                                 moegen_ep_mode mode, moegen_ep_shape *shape);

/* What dispatch and combine share (device pointers unless marked HOST). */
typedef struct moegen_ep_args {
  struct ncclComm *comm;       /* the caller's communicator (ncclComm_t) */
  int rank, ranks;             /* this rank and the communicator's size */
  moegen_ep_mode mode;         /* MOEGEN_EP_EXACT (CAPACITY: NOT_SUPPORTED, see above) */
  int64_t max_tokens;          /* the bound the shape was taken for */
  moegen_dtype dtype;          /* of every row buffer: bf16 or fp16 */
  int64_t num_rows;            /* rows of this rank's permuted buffer (permute_shape.rows[0]) */
  const int32_t *offsets;      /* in  [E + 1] this rank's moegen_permute_fwd offsets */
  /* dispatch */
  const void *rows;            /* in  [num_rows, H] this rank's permuted rows */
  const float *probs;          /* in  [num_rows] fp32 their route weights, or NULL */
  void *recv_rows;             /* out [N, H] received rows grouped by local expert */
  float *recv_probs;           /* out [N] fp32 (NULL iff probs is NULL) */
  int32_t *recv_offsets;       /* out [ranks, El + 1] */
  int32_t *local_offsets;      /* out [El + 1]: feeds moegen_gemm_*_args.offsets of a module
                                * whose GEMMs have El experts (at ranks = 1 the layer's own;
                                * for ranks > 1 the local GEMM module is not settled yet) */
  int reuse;                   /* dispatch: 1 = the routing of the last dispatch that wrote
                                * host_sizes and state (the backward's dy rows): no counts
                                * exchange, no host sync (graph-capturable); recv_offsets and
                                * local_offsets are not written */
  /* combine */
  const void *results;         /* in  [N, H] rows grouped by local expert (the GEMM output) */
  const float *results_probs;  /* in  [N] fp32 grouped as results (the backward's route-weight
                                * grads), or NULL */
  void *home_rows;             /* out [num_rows, H] each route's result at its permuted row;
                                * rows of no route are left as they are */
  float *home_probs;           /* out [num_rows] fp32 likewise (NULL iff results_probs is) */
  /* both */
  int64_t *host_sizes;         /* HOST [3 * ranks + 1]: written by dispatch, read by combine;
                                * host_sizes[3 * ranks] = N */
  void *state;                 /* state_bytes, 256-byte aligned: written by dispatch, read
                                * and clobbered (staging) by combine */
  size_t state_bytes;
} moegen_ep_args;

/* Dispatch: this rank's permuted rows (and probs) to the ranks owning their
 * experts; the rows received, regrouped by local expert (source rank order
 * inside an expert), with local_offsets. Buffer contract: reads rows,
 * probs, offsets; writes recv_rows (first N rows), recv_probs,
 * recv_offsets, local_offsets, host_sizes, state. EXACT: NCCL sends and
 * receives, one stream sync and two small device-to-host copies (see
 * above), three small host-to-device copies (the chunk tables,
 * local_offsets), one chunk sort; with reuse = 1 only the rows' NCCL group
 * and the chunk sort (no sync). Every rank of the communicator must call
 * it with the same mode and reuse. */
moegen_status moegen_ep_dispatch(moegen_module *m, const moegen_ep_args *args, CUstream stream);

/* Combine: the results of the rows this rank received back to their home
 * ranks, each into home_rows (and home_probs) at the row it left from
 * (dispatch's state and host_sizes give the layout). Buffer contract: reads
 * results, results_probs, state, host_sizes; writes the routes' rows of
 * home_rows and home_probs; clobbers state's staging. One chunk sort
 * (backward) and one or two NCCL groups; no host sync. */
moegen_status moegen_ep_combine(moegen_module *m, const moegen_ep_args *args, CUstream stream);

/* ---------------------------------------------------------------- the MoE layer */

/* Shapes of the layer ops for up to max_tokens tokens (all bf16 but the
 * logits, which are the config's logits dtype). The forward keeps what the
 * backward needs in `saved`; both use `workspace` as scratch. Pure. */
typedef struct moegen_layer_shape {
  int64_t x[2];           /* [T, H]     bf16 input tokens (and dx) */
  int64_t logits[2];      /* [T, E]     router logits (and dlogits) */
  int64_t w1[3];          /* [E, 2F, H] bf16 gate (rows [0, F)) and up ([F, 2F)) (and dw1) */
  int64_t w2[3];          /* [E, H, F]  bf16 down projection (and dw2) */
  int64_t y[2];           /* [T, H]     bf16 output (and dy) */
  int64_t rows;           /* permuted rows: max_tokens * K */
  size_t saved_bytes;     /* forward -> backward state, 256-byte aligned */
  size_t workspace_bytes; /* scratch of either op, 256-byte aligned */
} moegen_layer_shape;

moegen_status moegen_layer_shape_of(const moegen_image *image, int64_t max_tokens,
                                    moegen_layer_shape *shape);

/* Layer forward arguments (device pointers). */
typedef struct moegen_layer_fwd_args {
  int64_t num_tokens;        /* T, 0 <= T <= max_tokens; 0 does nothing (no GPU work) and
                              * every pointer, saved and workspace too, may be NULL */
  int64_t max_tokens;        /* the bound saved and workspace were sized for */
  const void *x;             /* in  [T, H] bf16 */
  const void *logits;        /* in  [T, E] logits dtype */
  const float *expert_bias;  /* in  [E] fp32; required iff the config has expert_bias */
  const void *w1;            /* in  [E, 2F, H] bf16 */
  const void *w2;            /* in  [E, H, F] bf16 */
  void *y;                   /* out [T, H] bf16: sum_k w[t,k] (silu(g) * u) w2_e^T */
  void *saved;               /* out saved_bytes: state for moegen_layer_bwd */
  size_t saved_bytes;
  void *workspace;           /* scratch, workspace_bytes */
  size_t workspace_bytes;
} moegen_layer_fwd_args;

/* MoE layer forward: router (the config's score function, groups, bias,
 * scaling) -> permute (expert-major rows, counts and offsets on the device)
 * -> GEMM1 with the SwiGLU epilogue, each row scaled by its route weight ->
 * GEMM2 -> unpermute (sum over the token's routes). Shared experts are the
 * caller's. Buffer contract: reads the inputs; writes y and saved; clobbers
 * workspace. Nine launches on `stream` (and on sm_90a two memset nodes: the
 * GEMMs' tile tickets), no host sync, graph-capturable. */
moegen_status moegen_layer_fwd(moegen_module *m, const moegen_layer_fwd_args *args,
                               CUstream stream);

/* Layer backward arguments (device pointers). */
typedef struct moegen_layer_bwd_args {
  int64_t num_tokens;        /* T of the forward that wrote saved. T = 0 reads nothing (dy, logits,
                              * saved, workspace, w1, w2 may be NULL; dx, dlogits are empty)
                              * and zeroes dw1 and dw2 (accumulate = 0: required; memset
                              * nodes) or leaves them as they are (accumulate = 1) */
  int64_t max_tokens;        /* as in the forward */
  const void *dy;            /* in  [T, H] bf16 gradient of y */
  const void *w1;            /* in  [E, 2F, H] bf16, as in the forward */
  const void *w2;            /* in  [E, H, F] bf16, as in the forward */
  const void *logits;        /* in  [T, E] logits dtype, the forward's (unchanged), where the
                              * config has router_bwd = recompute; else NULL */
  const void *saved;         /* in  the forward's saved */
  size_t saved_bytes;
  void *dx;                  /* out [T, H] bf16 */
  void *dlogits;             /* out [T, E] logits dtype */
  void *dw1;                 /* out [E, 2F, H]: bf16 (accumulate = 0) or fp32 += (1) */
  void *dw2;                 /* out [E, H, F]: as dw1 */
  int accumulate;            /* 0: write bf16 weight grads; 1: add into fp32 main_grad */
  void *workspace;           /* scratch, workspace_bytes */
  size_t workspace_bytes;
} moegen_layer_bwd_args;

/* MoE layer backward: grads for x, the logits and both weight stacks (the
 * expert bias gets none, as in TE). Buffer contract: reads dy, w1, w2,
 * saved (and logits: router_bwd = recompute, whose saved holds no router
 * intermediate, 4 * T * E bytes fewer); writes dx, dlogits, dw1, dw2 (or adds into them); clobbers
 * workspace. No host sync, graph-capturable. The route-weight gradient is
 * summed with fp32 atomics, so dlogits' last bits may vary run to run. */
moegen_status moegen_layer_bwd(moegen_module *m, const moegen_layer_bwd_args *args,
                               CUstream stream);

/* ---------------------------------------------------------------- FP8 quantization
 * Modules of the FP8 recipes (recipe fp8_block or fp8_tensorwise; SPEC.md
 * 5b; the layouts of the FP8 GEMMs, handoff fp8-interface). Every op:
 * bf16 in; fp8 bytes (E4M3: 448 = 0x7e, E5M2: 57344 = 0x7b) and fp32
 * DEQUANT scales out (value ~= fp8 * scale); quant scale s = FP8_MAX / amax
 * of the block or tensor (1 where amax = 0, FLT_MAX where that overflows),
 * rounded down to a power of two for fp8_block with fp8_scale = pow2;
 * values x * s rounded to nearest even and saturated to +-FP8_MAX; no host
 * sync, graph-capturable. A module of another recipe returns NOT_SUPPORTED. */

/* Sizes of moegen_quant_weight's outputs for `experts` matrices [n, k]. Pure. */
typedef struct moegen_quant_weight_shape {
  int64_t data[3];     /* [E, n, k] fp8 */
  int64_t scales[3];   /* fp8_block [E, n/128, k/128] fp32; fp8_tensorwise [1, 1, 1] (scale_inv) */
  int64_t data_t[3];   /* [E, k, n] fp8, the transposed copy */
  int64_t scales_t[3]; /* fp8_block [E, k/128, n/128]; fp8_tensorwise [0, 0, 0] (scales serve it) */
  int64_t amax[1];     /* fp8_tensorwise [1] fp32; fp8_block [0] */
} moegen_quant_weight_shape;

moegen_status moegen_quant_weight_shape_of(const moegen_image *image, int64_t experts, int64_t n,
                                           int64_t k, moegen_quant_weight_shape *shape);

/* Weight quantization arguments (device pointers, 16-byte aligned). */
typedef struct moegen_quant_weight_args {
  int64_t experts;  /* E >= 0 matrices, <= 65535; 0 does nothing (no GPU work), every pointer
                     * may be NULL */
  int64_t n, k;     /* each matrix [n, k] (gemm1's w1: n = 2F, k = H; w2: n = H, k = F);
                     * 1..2^25; fp8_block: multiples of 128 */
  const void *w;    /* in  [E, n, k] bf16 */
  uint8_t *data;    /* out [E, n, k] e4m3 */
  float *scales;    /* out fp8_block [E, n/128, k/128] (a scale per 128 x 128 block);
                     * fp8_tensorwise [1] (the tensor's) */
  uint8_t *data_t;  /* out [E, k, n] e4m3, the transposed copy dgrad reads, or NULL */
  float *scales_t;  /* out fp8_block [E, k/128, n/128], the same blocks' scales (with data_t);
                     * fp8_tensorwise: unused (scales[0] serves both copies) */
  float *amax;      /* out [] fp32 fp8_tensorwise: max |w| over the whole tensor; fp8_block:
                     * unused */
} moegen_quant_weight_args;

/* Quantizes a stack of weights, once per optimizer step or at load: every
 * element read once, both copies written in one pass (fp8_block: one
 * kernel; fp8_tensorwise: a memset of amax, the amax kernel, then the
 * quantize kernel reading amax on the device). Buffer contract: reads w;
 * writes every element of data, scales, data_t, scales_t and amax it uses. */
moegen_status moegen_quant_weight(moegen_module *m, const moegen_quant_weight_args *args,
                                  CUstream stream);

/* Sizes of moegen_quant_rows' outputs for x [rows, cols]. Pure. */
typedef struct moegen_quant_rows_shape {
  int64_t data[2];   /* [rows, cols] e4m3 */
  int64_t scales[2]; /* [cols/128, scale_ld] fp32 */
  int64_t scale_ld;  /* the smallest scale_ld: rows rounded up to a multiple of 4 */
} moegen_quant_rows_shape;

moegen_status moegen_quant_rows_shape_of(const moegen_image *image, int64_t rows, int64_t cols,
                                         moegen_quant_rows_shape *shape);

/* 1 x 128 row quantization arguments (device pointers, 16-byte aligned). */
typedef struct moegen_quant_rows_args {
  int64_t rows;      /* M >= 0, <= INT32_MAX; 0 does nothing (no GPU work), every pointer may
                      * be NULL */
  int64_t cols;      /* K > 0, a multiple of 128, rows * cols < 2^62 */
  const void *x;     /* in  [M, K] bf16 */
  uint8_t *data;     /* out [M, K] e4m3 */
  float *scales;     /* out [K/128, scale_ld] fp32: scales[j * scale_ld + r] of x[r, 128j ..] */
  int64_t scale_ld;  /* >= M, a multiple of 4 (16-byte rows for TMA), <= INT32_MAX */
} moegen_quant_rows_args;

/* fp8_block's activation / gradient quantization: an E4M3 scale per 128
 * consecutive values of a row (TE's rowwise 1x128 layout). A standalone
 * pass, one kernel: for tests, and the fallback where the quantization is
 * not fused into the kernel that writes the tensor: moegen_permute_fwd has
 * it (rows_fp8); the SwiGLU epilogue and the backward's dY readers do not
 * yet. Buffer contract: reads x; writes
 * every element of data and scales[j * scale_ld + r] for r < M (the
 * padding columns r >= M are left as they are). */
moegen_status moegen_quant_rows(moegen_module *m, const moegen_quant_rows_args *args,
                                CUstream stream);

/* fp8_tensorwise quantization arguments (device pointers, 16-byte aligned). */
typedef struct moegen_quant_tensor_args {
  int64_t n;                /* elements >= 0; 0 does nothing (no GPU work, amax and scale_inv
                             * not written), every pointer may be NULL */
  const void *x;            /* in  [n] bf16 (any shape, contiguous) */
  uint8_t *data;            /* out [n] in `format` */
  moegen_fp8_format format; /* e4m3, or e5m2 (the hybrid format's gradients: the
                             * module's plan quant.grad_format says which) */
  float *amax;              /* out [] fp32 max |x| */
  float *scale_inv;         /* out [] fp32 the dequant scale */
} moegen_quant_tensor_args;

/* fp8_tensorwise's per-call quantization (TE current scaling): a memset of
 * amax, the amax reduction, then the quantize kernel that reads amax on the
 * device (two kernels, no host sync). Buffer contract: reads x; writes
 * every element of data, amax and scale_inv. */
moegen_status moegen_quant_tensor(moegen_module *m, const moegen_quant_tensor_args *args,
                                  CUstream stream);

#ifdef __cplusplus
}
#endif
#endif
