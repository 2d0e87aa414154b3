/* moegen/config.h -- the validated MoE configuration every generator stage reads.
 *
 * A configuration comes from a built-in preset, a Hugging Face config.json,
 * a Lua table file and `key=value` overrides, applied in that order onto the
 * defaults (the CLI's order). Every field remembers where it was last set (file and line), so a
 * validation failure can say `FILE:LINE: field: reason`.
 *
 * Error convention: functions return 0 on success or a sysexits(3) code
 * (EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_CONFIG, ...) and fill `err->msg` with
 * the full `FILE:LINE: field: reason` text (no "moegen: " prefix, no newline).
 */
#ifndef MOEGEN_CONFIG_H
#define MOEGEN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "moegen/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Field ids, in the order of the config keys (see moegen_config_key_name). */
typedef enum moegen_field {
  MOEGEN_F_NAME, MOEGEN_F_EXPERTS, MOEGEN_F_TOPK, MOEGEN_F_HIDDEN, MOEGEN_F_FFN,
  MOEGEN_F_SCORE, MOEGEN_F_PRE_SOFTMAX, MOEGEN_F_GROUPS, MOEGEN_F_GROUP_TOPK,
  MOEGEN_F_EXPERT_BIAS, MOEGEN_F_SCALING, MOEGEN_F_LOGITS_DTYPE, MOEGEN_F_DTYPE,
  MOEGEN_F_SHARED_EXPERTS, MOEGEN_F_AUX_LOSS_COEFF, MOEGEN_F_QUANTILE_BALANCING,
  MOEGEN_F_ROUTER_BWD, MOEGEN_F_RECIPE, MOEGEN_F_FP8_GRAD_FORMAT, MOEGEN_F_FP8_SCALE,
  MOEGEN_F_COUNT
} moegen_field;

/* Where a field's value came from: a file and 1-based line (0: the file as
 * a whole, e.g. a size a Hugging Face config.json lacks), or a pseudo file
 * such as "<preset deepseek-v3>", "<default>" or "<command line>" (line =
 * argument position; messages say "command-line argument N"). */
#define MOEGEN_ORIGIN_DEFAULT "<default>" /* the origin file of a field no source set */

typedef struct moegen_origin {
  char file[256];
  int line;
} moegen_origin;

typedef struct moegen_config {
  char name[64];             /* model name, informational ("deepseek-v3") */
  int experts;               /* E: routed experts, 1..MOEGEN_MAX_EXPERTS */
  int topk;                  /* K: experts per token, 1..min(E, MOEGEN_MAX_TOPK) */
  int hidden;                /* H: hidden size (model dim) */
  int ffn;                   /* F: per-expert FFN (intermediate) size */
  moegen_score score;        /* score function */
  bool pre_softmax;          /* softmax over all E before top-k (softmax only) */
  int groups;                /* expert groups; 0 = no group-limited routing */
  int group_topk;            /* groups kept per token; 0 when groups == 0 */
  bool expert_bias;          /* fp32 [E] bias added for selection (sigmoid/sqrtsoftplus) */
  double scaling;            /* routed scaling factor applied to probs (1.0 = none) */
  moegen_dtype logits_dtype; /* router logits (and probs) dtype */
  moegen_dtype dtype;        /* activations and weights (bf16 or fp16) */
  int shared_experts;        /* informational: shared experts left to the caller */
  double aux_loss_coeff;     /* informational: aux loss coefficient */
  bool quantile_balancing;   /* QB routing (SPEC 3): sigmoid + bias, top-(K+1) cutoff, histogram */
  moegen_router_bwd_mode router_bwd; /* saved (default, TE's): the forward saves the fp32
                              * intermediate; recompute: the backward recomputes it from the logits */
  moegen_recipe recipe;      /* precision recipe (SPEC 5b); fp8_block needs H, F multiples of 128 */
  moegen_fp8_grad_format fp8_grad_format; /* fp8_tensorwise only (else the default, hybrid) */
  moegen_fp8_scale fp8_scale;             /* fp8_block only (else the default, pow2) */
  moegen_origin origin[MOEGEN_F_COUNT]; /* where each field was last set */
} moegen_config;

typedef struct moegen_error {
  int code;       /* sysexits code; 0 = none */
  char msg[1024]; /* "FILE:LINE: field: reason" */
} moegen_error;

/* Fills `c` with the defaults (softmax, K=1, no groups, scaling 1, bf16, E=0...).
 * The defaults alone do not validate: experts/topk/hidden/ffn must be set. */
void moegen_config_defaults(moegen_config *c);

/* Applies a Lua config file: a text chunk that returns a table of config
 * keys, run in a sandbox whose environment holds only `math` (without
 * random), under memory and instruction caps. Unknown keys, wrong types and
 * malformed files are errors (EX_DATAERR, also for a name that is not UTF-8;
 * EX_CONFIG for an unknown enum value name (score, dtype, recipe, ...) or a name over 63 bytes or
 * with a control character; EX_NOINPUT if the file cannot be read). On
 * error `c` is unchanged. */
int moegen_config_load_lua(moegen_config *c, const char *path, moegen_error *err);

/* Applies a Hugging Face config.json of a family moegen_hf_model_type lists
 * as loaded (found by model_type, or by architectures when the file has no
 * model_type; a file with neither is an error, EX_DATAERR). A family whose
 * routing moegen cannot compute exactly (phimoe, ernie4_5_moe), or a
 * file's routing keys it cannot compute (e.g. deepseek_v2's
 * group_limited_greedy unless num_experts_per_tok = topk_group), is refused
 * with EX_CONFIG and the reason. A quantization_config sets the recipe:
 * DeepSeek-V3's (quant_method "fp8", fmt "e4m3", weight_block_size
 * [128, 128], dynamic activation scales) is fp8_block; any other is refused
 * (EX_CONFIG, naming the key). Bare NaN/Infinity are tolerated.
 * Unknown HF keys are ignored; known keys of the wrong type are errors
 * (EX_DATAERR, like malformed JSON, a key twice in one object and an
 * unsupported model_type; EX_NOINPUT if the file cannot be read). On error
 * `c` is unchanged. */
int moegen_config_load_hf(moegen_config *c, const char *path, moegen_error *err);

/* Writes the model_type values moegen_config_load_hf loads (refused: those
 * it refuses) into buf as "a, b, ..."; returns the length it needs (like
 * snprintf). */
size_t moegen_hf_model_types(char *buf, size_t size, bool refused);

/* Applies a built-in preset by name (see moegen_preset_names). EX_USAGE if unknown. */
int moegen_config_preset(moegen_config *c, const char *name, moegen_error *err);

/* NULL-terminated list of preset names. */
const char *const *moegen_preset_names(void);

/* Applies one `key=value` override; `argpos` is the argument's position on
 * the command line (recorded as the origin line). Booleans are true/false.
 * EX_USAGE without '=' or for an unknown key, EX_DATAERR for a value of the
 * wrong type or a name that is not UTF-8, EX_CONFIG for an unknown
 * enum value name (score, dtype, recipe, ...) or a long name. */
int moegen_config_set(moegen_config *c, const char *assignment, int argpos, moegen_error *err);

/* Checks every field and every cross-field rule (K <= E, E % groups == 0,
 * bias only with sigmoid/sqrtsoftplus, fp8_block only with hidden and ffn
 * multiples of 128, the FP8 recipes only with dtype bf16, a sub-key of a
 * recipe other than its default only with that recipe: fp8_grad_format
 * with fp8_tensorwise, fp8_scale with fp8_block, ...). Errors cite the origin of the
 * offending field. Returns 0 or EX_CONFIG / EX_DATAERR. */
int moegen_config_validate(const moegen_config *c, moegen_error *err);

/* Writes the config as a Lua table (loadable by moegen_config_load_lua) into
 * buf; returns the length it needs (like snprintf). Deterministic. */
size_t moegen_config_to_lua(const moegen_config *c, char *buf, size_t size);

/* Config key name of a field ("experts", "topk", ...); NULL if f is out of range. */
const char *moegen_config_key_name(moegen_field f);

/* The values a config key takes ("integer", "number", "true|false", "string",
 * "sigmoid|softmax|sqrtsoftplus", "fp32|bf16|fp16", "bf16|fp8_tensorwise|fp8_block",
 * ...) and its one-line meaning,
 * for help texts; NULL if f is out of range. */
const char *moegen_config_key_type(moegen_field f);
const char *moegen_config_key_help(moegen_field f);

/* Text names for enums ("softmax", "bf16", "fp8_block", ...); "?" for a
 * value that is none of the enum's. */
const char *moegen_score_name(moegen_score s);
const char *moegen_dtype_name(moegen_dtype d);
const char *moegen_router_bwd_name(moegen_router_bwd_mode b);
const char *moegen_recipe_name(moegen_recipe r);
const char *moegen_fp8_grad_format_name(moegen_fp8_grad_format g);
const char *moegen_fp8_scale_name(moegen_fp8_scale s);

#ifdef __cplusplus
}
#endif
#endif
