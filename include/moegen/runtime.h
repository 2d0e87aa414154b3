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

#define MOEGEN_RT_ABI_VERSION 1

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

/* Launch plan of the router forward kernel, chosen by templates/plan.lua. */
typedef struct moegen_router_plan {
  int experts;          /* E */
  int topk;             /* K */
  int threads;          /* block size */
  int tokens_per_block; /* tokens one block handles per iteration */
  int smem_bytes;       /* dynamic shared memory per block (the grid is one full wave) */
  int logits_dtype;     /* moegen_dtype of logits and probs */
  int has_bias;         /* 1 if the kernel reads expert_bias */
} moegen_router_plan;

/* Everything the runtime needs to load one generated module. AOT images
 * carry a cubin; JIT images carry only the source, compiled at first use
 * (through the on-disk cache). Images are immutable and may be static. */
typedef struct moegen_image {
  int abi_version;                 /* MOEGEN_RT_ABI_VERSION */
  const char *name;                /* module name ("ds3") */
  const char *arch;                /* "sm_90a", "sm_80", ... */
  const char *config_lua;          /* the config, as a Lua table (for messages) */
  const unsigned char *cubin;      /* AOT cubin, or NULL */
  size_t cubin_size;
  const char *source;              /* the generated .cu text (always present) */
  size_t source_size;
  const char *source_path;         /* where NAME.cu was written, or "<jit>" */
  moegen_router_plan router;
} moegen_image;

/* ---------------------------------------------------------------- modules */

typedef struct moegen_module moegen_module;

/* Log sink for the runtime's only output: one progress line before a cold
 * JIT compile. The default writes the line to stderr; NULL silences it.
 * Process-wide; set it before creating modules. */
typedef void (*moegen_log_fn)(const char *line, void *user);
void moegen_set_log(moegen_log_fn fn, void *user);

/* Creates a module from an image (the image must outlive the module). Loads
 * the driver if needed; no GPU work happens until the first launch or
 * moegen_module_load. On error *out may still be a module whose last error
 * explains it (destroy it), or NULL if allocation failed. */
moegen_status moegen_module_create(const moegen_image *image, moegen_module **out);

/* Compiles (JIT) and loads the module for the current context's device now,
 * so the first op launch does no work beyond the launch. Thread-safe. */
moegen_status moegen_module_load(moegen_module *m);

void moegen_module_destroy(moegen_module *m);

/* The last error message of this module, from any thread (CUDA code and
 * name, NVRTC log, source path), or "" if none. The text is a copy private to
 * the calling thread, valid until that thread's next call of this function. */
const char *moegen_module_last_error(const moegen_module *m);

const moegen_image *moegen_module_image(const moegen_module *m);

/* ---------------------------------------------------------------- router */

/* Element type of a [T, K] expert-index buffer (int16 needs E <= 32767). */
typedef enum moegen_index_dtype {
  MOEGEN_INDEX_INT32 = 0,
  MOEGEN_INDEX_INT16 = 1,
  MOEGEN_INDEX_INT64 = 2
} moegen_index_dtype;

/* Shapes and workspace of moegen_router_fwd for T tokens. Pure: touches no
 * GPU, needs no driver. Shapes are element counts (row-major). */
typedef struct moegen_router_fwd_shape {
  int64_t probs[2];          /* [T, E]  logits dtype */
  int64_t routing_map[2];    /* [T, E]  uint8 0/1 (bytemap) */
  int64_t routing_bitmap[2]; /* [T, ceil(E/8)] uint8, bit e%8 of byte e/8 (LSB-first) */
  int64_t topk_indices[2];   /* [T, K]  index_dtype */
  int64_t topk_weights[2];   /* [T, K]  fp32 */
  int64_t intermediate[2];   /* [T, E]  fp32, saved for backward */
  int64_t expert_counts[1];  /* [E]    int32 */
  size_t workspace_bytes;    /* 0: the router needs no scratch */
} moegen_router_fwd_shape;

moegen_status moegen_router_fwd_shape_of(const moegen_image *image, int64_t num_tokens,
                                         moegen_router_fwd_shape *shape);

/* Router forward arguments (device pointers; any output may be NULL). */
typedef struct moegen_router_fwd_args {
  int64_t num_tokens;     /* T >= 0; T == 0 is a no-op; T*E <= INT32_MAX */
  const void *logits;     /* in  [T, E] logits dtype, contiguous */
  const float *expert_bias; /* in [E] fp32; required iff the config has expert_bias */
  void *probs;            /* out [T, E] logits dtype: scaling*p at selected, 0 elsewhere */
  uint8_t *routing_map;   /* out [T, E] 1 at selected experts, 0 elsewhere */
  uint8_t *routing_bitmap; /* out [T, ceil(E/8)] bit e%8 of byte e/8 set iff e is selected */
  void *topk_indices;     /* out [T, K] index_dtype: selected expert ids, value-descending
                           * order (a caller's buffer is overwritten in place) */
  moegen_index_dtype index_dtype; /* element type of topk_indices (0 = int32) */
  float *topk_weights;    /* out [T, K] scaling*p of topk_indices, fp32 */
  float *intermediate;    /* out [T, E] fp32 saved state for the backward (SPEC 1) */
  int32_t *expert_counts; /* out [E] tokens routed to each expert (overwritten) */
} moegen_router_fwd_args;

/* Fused top-k router forward (TransformerEngine fused_topk_with_score_function
 * semantics, ties by value descending then expert id ascending).
 * Buffer contract: reads logits and expert_bias; writes every element of each
 * non-NULL output; mutates nothing else. Launches on `stream`: one kernel, plus
 * one memset node before it when expert_counts is requested. No host sync. */
moegen_status moegen_router_fwd(moegen_module *m, const moegen_router_fwd_args *args,
                                CUstream stream);

#ifdef __cplusplus
}
#endif
#endif
