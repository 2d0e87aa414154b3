/* bench/bench.h -- what every moegen-bench stage shares: the peers.py model
 * table, per-call timing with the L2 flushed, JSON output.
 *
 * A stage is one function `void bench_STAGE(const bench_model *md, int T,
 * void *flush)` in bench/stage_*.c, listed in moegen_bench.c's stage table.
 * It checks its op against the CPU reference first, then prints one JSON line
 * per stage name it times, or an "error" line. */
#ifndef MOEGEN_BENCH_H
#define MOEGEN_BENCH_H

#include <stdio.h>

#include "../tests/gpu/gpu.h"
#include "../tests/gpu/layer_model.h"
#include "moegen/moegen.h"

/* The shapes of peers.py's MODELS (same score functions and options). */
typedef layer_model bench_model;

#define BENCH_FLUSH_BYTES (256u << 20)

/* One call of the op being timed, launched on stream s. */
typedef moegen_status (*bench_op_fn)(void *ctx, CUstream s);

/* Median ms of one call of op (200 calls after 20 warm-ups, fewer for calls
 * over 10 ms: moegen_bench.c), the L2 flushed by a BENCH_FLUSH_BYTES memset
 * before each call. */
float bench_time_op(bench_op_fn op, void *ctx, void *flush);

/* The model's config with logits in bf16 (as peers.py feeds them) and the
 * router_bwd mode of --router-bwd (default saved). */
moegen_config bench_config_of(const bench_model *md);
/* Its fp8_block variant into *c (the *_fp8 stages); 0 where H or F is not a
 * multiple of MOEGEN_FP8_BLOCK (the recipe's validation would refuse it). */
int bench_config_fp8(const bench_model *md, moegen_config *c);

/* ", \"router_bwd\": \"saved\"" (or "recompute"): the JSON member of the stages
 * that run the router backward. */
const char *bench_router_bwd_json(void);

/* JIT-compiles and loads md's module; on failure prints an error line for
 * `stage` and returns NULL. */
moegen_module *bench_module(const bench_model *md, const char *stage, int T);
/* The same for config c (a variant of bench_config_of(md)). */
moegen_module *bench_module_of(const moegen_config *c, const bench_model *md, const char *stage, int T);

/* Prints {"stage", "peer": "moegen", "model", "tokens", "error"}. */
void bench_error(const char *stage, const bench_model *md, int T, const char *why);
void bench_error_peer(const char *stage, const char *peer, const bench_model *md, int T,
                      const char *why);

/* Prints a timing line; `extra` is more JSON members (", \"gbps\": 1.0") or "". */
void bench_result(const char *stage, const bench_model *md, int T, float ms, const char *extra);
/* The same for another peer's timing (the GEMM stages' "cublaslt"). */
void bench_peer_result(const char *stage, const char *peer, const bench_model *md, int T, float ms,
                       const char *extra);

/* The stages (bench/stage_*.c). */
void bench_router(const bench_model *md, int T, void *flush);
void bench_router_fwd_bwd(const bench_model *md, int T, void *flush);
void bench_aux_loss(const bench_model *md, int T, void *flush);
void bench_gemm1(const bench_model *md, int T, void *flush);
void bench_gemm2(const bench_model *md, int T, void *flush);
void bench_gemm1_fp8(const bench_model *md, int T, void *flush);
void bench_gemm2_fp8(const bench_model *md, int T, void *flush);
void bench_gemm1_dgrad(const bench_model *md, int T, void *flush);
void bench_gemm1_wgrad(const bench_model *md, int T, void *flush);
void bench_permute(const bench_model *md, int T, void *flush);
void bench_unpermute(const bench_model *md, int T, void *flush);
void bench_layer_fwd(const bench_model *md, int T, void *flush);
void bench_layer_fwd_bwd(const bench_model *md, int T, void *flush);

#endif
