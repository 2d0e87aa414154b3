/* gen/hf_config.c -- Hugging Face config.json -> moegen_config
 * (moegen_config_load_hf).
 *
 * The model family comes from model_type (or, without it, from
 * architectures); a file naming neither is an error, as moegen guesses no
 * key names or routing. A family fixes the routing facts its config.json
 * does not spell out (SPEC.md section 7: score function, groups, bias,
 * scaling), as the transformers modeling code computes them, and names the
 * keys that hold the sizes; the keys a file has then override those facts.
 * A family's rules refuse (EX_CONFIG, saying why) what moegen's router
 * cannot compute exactly: whole families (phimoe, ernie4_5_moe) and some
 * key values (deepseek_v2's norm_topk_prob true, group scores that differ
 * from TE's). Keys the file lacks leave the config as it was (a size no
 * earlier source set then has the file as its origin); keys moegen
 * does not know are ignored. Origins point at the line of each key (the
 * first line of the text that holds "key"), facts at the model_type line.
 *
 * A key twice in one object is an error (jansson would silently keep the
 * last one): which value the model's own loader sees is not moegen's guess.
 *
 * Python's json module writes NaN, Infinity and -Infinity as bare tokens,
 * which jansson rejects: before parsing they become strings that start
 * with a \u0001 byte (no file spells those), which read back as numbers.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "read_file.h"
#include "moegen/config.h"

#define NONFINITE_MARK '\x01'

/* A config.json key (with aliases) that holds an integer or real field. */
typedef struct hf_number {
  const char *object;  /* the sub-object that holds the key (DBRX's ffn_config), or NULL */
  const char *keys[3]; /* the first one the file has wins; others must agree */
  moegen_field field;
  size_t offset;       /* of the member in moegen_config */
  bool real;           /* double (else int) */
} hf_number;

#define INT_KEY(f, m, ...) {NULL, {__VA_ARGS__}, f, offsetof(moegen_config, m), false}
#define REAL_KEY(f, m, ...) {NULL, {__VA_ARGS__}, f, offsetof(moegen_config, m), true}
#define INT_KEY_IN(o, f, m, ...) {o, {__VA_ARGS__}, f, offsetof(moegen_config, m), false}
#define REAL_KEY_IN(o, f, m, ...) {o, {__VA_ARGS__}, f, offsetof(moegen_config, m), true}
#define END_KEYS {NULL, {NULL}, 0, 0, false}

/* DeepSeek-V2/V3, Kimi-K2 and GLM-4.5. */
static const hf_number deepseek_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "n_routed_experts", "num_routed_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "moe_intermediate_size"),
    INT_KEY(MOEGEN_F_GROUPS, groups, "n_group"),
    INT_KEY(MOEGEN_F_GROUP_TOPK, group_topk, "topk_group"),
    REAL_KEY(MOEGEN_F_SCALING, scaling, "routed_scaling_factor"),
    INT_KEY(MOEGEN_F_SHARED_EXPERTS, shared_experts, "n_shared_experts", "num_shared_experts"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "aux_loss_alpha"),
    END_KEYS};

/* Qwen2-MoE and Qwen3-MoE. */
static const hf_number qwen_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "moe_intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    END_KEYS};

/* OLMoE: num_experts, and intermediate_size is the expert FFN. */
static const hf_number olmoe_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    END_KEYS};

/* Mixtral, GraniteMoE and Llama-4 (text_config): intermediate_size is the expert FFN. */
static const hf_number mixtral_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_local_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    END_KEYS};

static const hf_number gpt_oss_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_local_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok", "experts_per_token"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    END_KEYS};

/* DBRX: the MoE keys live in ffn_config (DbrxFFNConfig), d_model is H. */
static const hf_number dbrx_numbers[] = {
    INT_KEY_IN("ffn_config", MOEGEN_F_EXPERTS, experts, "moe_num_experts"),
    INT_KEY_IN("ffn_config", MOEGEN_F_TOPK, topk, "moe_top_k"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "d_model"),
    INT_KEY_IN("ffn_config", MOEGEN_F_FFN, ffn, "ffn_hidden_size"),
    REAL_KEY_IN("ffn_config", MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "moe_loss_weight"),
    END_KEYS};

typedef struct hf_family hf_family;

/* One load in progress. */
typedef struct hf_load {
  moegen_config *cfg;
  const char *path;
  const char *text;         /* the file as read, for key lines */
  json_t *root;
  json_t *keys;             /* the object the family's keys live in */
  const hf_family *family;
  const char *family_key;   /* "model_type" or "architectures" */
  const char *family_name;  /* the model_type value or architectures entry that named it */
  moegen_error *err;
} hf_load;

/* ---------------------------------------------------------------- text */


/* 1-based line of the first "key" (quoted) in text, or 0. */
static int json_key_line(const char *text, const char *key) {
  size_t n = strlen(key);
  for (const char *p = strchr(text, '"'); p; p = strchr(p + 1, '"')) {
    if (strncmp(p + 1, key, n) != 0 || p[n + 1] != '"') continue;
    int line = 1;
    for (const char *q = text; q < p; q++) line += *q == '\n';
    return line;
  }
  return 0;
}

static bool is_word_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* The bare NaN / Infinity / -Infinity token at text[i], or NULL. */
static const char *nonfinite_token(const char *text, size_t n, size_t i) {
  static const char *const tokens[] = {"-Infinity", "Infinity", "NaN"};
  if (i > 0 && is_word_char(text[i - 1])) return NULL;
  for (size_t t = 0; t < 3; t++) {
    size_t len = strlen(tokens[t]);
    if (n - i >= len && memcmp(text + i, tokens[t], len) == 0 &&
        (i + len == n || !is_word_char(text[i + len])))
      return tokens[t];
  }
  return NULL;
}

/* Copy of the JSON text with each bare NaN/Infinity/-Infinity outside
 * strings turned into the string "\u0001TOKEN". Lines stay where they were. */
static char *mark_nonfinite(const char *text, size_t n, size_t *out_n) {
  char *out = malloc(4 * n + 1); /* "NaN" (3 bytes) grows the most: to 11 */
  size_t o = 0;
  bool in_string = false;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    const char *tok = in_string ? NULL : nonfinite_token(text, n, i);
    if (tok) {
      o += (size_t)sprintf(out + o, "\"\\u0001%s\"", tok);
      i += strlen(tok) - 1;
      continue;
    }
    out[o++] = text[i];
    if (in_string && text[i] == '\\' && i + 1 < n)
      out[o++] = text[++i];
    else if (text[i] == '"')
      in_string = !in_string;
  }
  out[o] = 0;
  *out_n = o;
  return out;
}

/* ---------------------------------------------------------------- values */

/* Fills err with "FILE:LINE: key: reason" (LINE of the key) and returns code. */
static int hf_fail(hf_load *h, int code, const char *key, const char *fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  int line = json_key_line(h->text, key);
  h->err->code = code;
  if (line > 0)
    snprintf(h->err->msg, sizeof h->err->msg, "%s:%d: %s: %s", h->path, line, key, reason);
  else
    snprintf(h->err->msg, sizeof h->err->msg, "%s: %s: %s", h->path, key, reason);
  return code;
}

/* Records the file and the line of `key` as field f's origin. */
static void set_origin(hf_load *h, moegen_field f, const char *key) {
  snprintf(h->cfg->origin[f].file, sizeof h->cfg->origin[f].file, "%s", h->path);
  h->cfg->origin[f].line = json_key_line(h->text, key);
}

/* A JSON number, or a marked NaN/Infinity string, as a double. */
static bool number_of(const json_t *v, double *d) {
  const char *s = json_string_value(v);
  if (json_is_number(v))
    *d = json_number_value(v);
  else if (s && s[0] == NONFINITE_MARK && strcmp(s + 1, "NaN") == 0)
    *d = NAN;
  else if (s && s[0] == NONFINITE_MARK && strcmp(s + 1, "Infinity") == 0)
    *d = INFINITY;
  else if (s && s[0] == NONFINITE_MARK && strcmp(s + 1, "-Infinity") == 0)
    *d = -INFINITY;
  else
    return false;
  return true;
}

/* What a JSON value is, for "expected X, got Y" messages. */
static const char *json_kind(const json_t *v) {
  const char *s = json_string_value(v);
  if (s && s[0] == NONFINITE_MARK) return s + 1;
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real";
  case JSON_NULL: return "null";
  default: return "a boolean";
  }
}

/* String value of `key` in obj into *s (NULL when absent); error if not a string. */
static int get_string(hf_load *h, const json_t *obj, const char *key, const char **s) {
  const json_t *v = json_object_get(obj, key);
  *s = json_string_value(v);
  if (v && (!*s || *s[0] == NONFINITE_MARK))
    return hf_fail(h, EX_DATAERR, key, "expected a string, got %s", json_kind(v));
  return 0;
}

/* Whether field f is one of the sizes every model has (E, K, H, F). */
static bool is_size(moegen_field f) {
  return f == MOEGEN_F_EXPERTS || f == MOEGEN_F_TOPK || f == MOEGEN_F_HIDDEN || f == MOEGEN_F_FFN;
}

/* Applies one number key (the first alias the file has). A size the file
 * lacks keeps its value, and its origin becomes the file (line 0) unless
 * an earlier source set it: validation then blames the file. */
static int apply_number(hf_load *h, const hf_number *num) {
  const char *key = NULL;
  json_t *v = NULL, *obj = num->object ? json_object_get(h->keys, num->object) : h->keys;
  if (obj && !json_is_object(obj))
    return hf_fail(h, EX_DATAERR, num->object, "expected an object, got %s", json_kind(obj));
  for (size_t i = 0; i < 3 && num->keys[i]; i++) {
    json_t *x = json_object_get(obj, num->keys[i]);
    if (x && !v) {
      v = x;
      key = num->keys[i];
    } else if (x && !json_equal(x, v)) {
      return hf_fail(h, EX_DATAERR, num->keys[i], "disagrees with %s", key);
    }
  }
  moegen_origin *origin = &h->cfg->origin[num->field];
  if (!v && is_size(num->field) && strcmp(origin->file, MOEGEN_ORIGIN_DEFAULT) == 0) {
    snprintf(origin->file, sizeof origin->file, "%s", h->path);
    origin->line = 0;
  }
  if (!v) return 0;
  char *p = (char *)h->cfg + num->offset;
  if (num->real && !number_of(v, (double *)p))
    return hf_fail(h, EX_DATAERR, key, "expected a number, got %s", json_kind(v));
  if (!num->real) {
    json_int_t i = json_integer_value(v);
    if (!json_is_integer(v) || i < -2147483647 - 1 || i > 2147483647)
      return hf_fail(h, EX_DATAERR, key, "expected an integer, got %s",
                     json_is_integer(v) ? "one out of range" : json_kind(v));
    *(int *)p = (int)i;
  }
  set_origin(h, num->field, key);
  return 0;
}

/* ---------------------------------------------------------------- family rules */

/* Integer value of `key` in obj into *v and whether the key is there. */
static int get_int(hf_load *h, const json_t *obj, const char *key, json_int_t *v, bool *present) {
  const json_t *x = json_object_get(obj, key);
  *present = x != NULL;
  *v = json_integer_value(x);
  if (x && !json_is_integer(x))
    return hf_fail(h, EX_DATAERR, key, "expected an integer, got %s", json_kind(x));
  return 0;
}

/* DeepSeek-V3 and Kimi-K2 keys: scoring_func (score), topk_method
 * (noaux_tc = expert bias). */
static int deepseek_v3_keys(hf_load *h) {
  const char *s;
  int rc = get_string(h, h->keys, "scoring_func", &s);
  if (rc == 0 && s) {
    int i = 0;
    while (i < 3 && strcmp(moegen_score_name((moegen_score)i), s) != 0) i++;
    if (i == 3)
      return hf_fail(h, EX_CONFIG, "scoring_func",
                     "unsupported score function \"%.80s\" (expected sigmoid, softmax or "
                     "sqrtsoftplus)",
                     s);
    h->cfg->score = (moegen_score)i;
    set_origin(h, MOEGEN_F_SCORE, "scoring_func");
  }
  if (rc == 0) rc = get_string(h, h->keys, "topk_method", &s);
  if (rc == 0 && s) {
    h->cfg->expert_bias = strcmp(s, "noaux_tc") == 0;
    set_origin(h, MOEGEN_F_EXPERT_BIAS, "topk_method");
  }
  return rc;
}

/* Whether group-limited routing can change the selection: more than one
 * group, and not every group kept. */
static bool groups_matter(const moegen_config *c) {
  return c->groups > 1 && c->group_topk > 0 && c->group_topk < c->groups;
}

/* The DeepseekV3 and Glm4Moe routers score a group by the sum of its 2 best
 * (biased) scores; moegen, like TE, by the sum of its best K/group_topk
 * (SPEC.md section 7). Groups that matter must make the two agree. */
static int top2_group_rule(hf_load *h) {
  const moegen_config *c = h->cfg;
  if (!groups_matter(c) || c->topk == 2 * c->group_topk) return 0;
  return hf_fail(h, EX_CONFIG, "topk_group",
                 "%d with n_group %d and num_experts_per_tok %d is not supported: %s scores an "
                 "expert group by the sum of its 2 best scores, moegen (like TE) by the sum of "
                 "its best num_experts_per_tok/topk_group; they select the same experts only "
                 "when num_experts_per_tok = 2 * topk_group",
                 c->group_topk, c->groups, c->topk, h->family_name);
}

static int deepseek_v3_rules(hf_load *h) {
  int rc = deepseek_v3_keys(h);
  return rc ? rc : top2_group_rule(h);
}

/* transformers' DeepseekV2Moe: softmax over all experts, the top-K of it
 * (group_limited_greedy: among the topk_group groups with the best single
 * score), times routed_scaling_factor, never renormalized. */
static int deepseek_v2_rules(hf_load *h) {
  moegen_config *c = h->cfg;
  const char *score, *method;
  const json_t *norm = json_object_get(h->keys, "norm_topk_prob");
  int rc = get_string(h, h->keys, "scoring_func", &score);
  if (!rc) rc = get_string(h, h->keys, "topk_method", &method);
  if (rc) return rc;
  if (score && strcmp(score, "softmax") != 0)
    return hf_fail(h, EX_CONFIG, "scoring_func",
                   "\"%.80s\" is not supported for %s, which routes by softmax", score,
                   h->family_name);
  if (norm && !json_is_boolean(norm))
    return hf_fail(h, EX_DATAERR, "norm_topk_prob", "expected a boolean, got %s", json_kind(norm));
  if (json_is_true(norm))
    return hf_fail(h, EX_CONFIG, "norm_topk_prob",
                   "true is not supported for %s: transformers' DeepseekV2Moe ignores it (no "
                   "renormalization, then routed_scaling_factor), the model's own code "
                   "renormalizes and then skips routed_scaling_factor; moegen does not pick one",
                   h->family_name);
  c->pre_softmax = true;
  set_origin(h, MOEGEN_F_PRE_SOFTMAX, norm ? "norm_topk_prob" : h->family_key);
  if (!method || strcmp(method, "greedy") == 0) { /* greedy ignores n_group and topk_group */
    c->groups = c->group_topk = 0;
    set_origin(h, MOEGEN_F_GROUPS, method ? "topk_method" : h->family_key);
    set_origin(h, MOEGEN_F_GROUP_TOPK, method ? "topk_method" : h->family_key);
    return 0;
  }
  if (strcmp(method, "group_limited_greedy") != 0)
    return hf_fail(h, EX_CONFIG, "topk_method",
                   "\"%.80s\" is not supported for %s (expected greedy or group_limited_greedy)",
                   method, h->family_name);
  if (groups_matter(c) && c->topk != c->group_topk)
    return hf_fail(h, EX_CONFIG, "topk_method",
                   "group_limited_greedy with num_experts_per_tok %d and topk_group %d is not "
                   "supported: %s scores an expert group by its best score, moegen (like TE) by "
                   "the sum of its best num_experts_per_tok/topk_group = %d; they select the "
                   "same experts only when num_experts_per_tok = topk_group",
                   c->topk, c->group_topk, h->family_name, c->topk / c->group_topk);
  return 0;
}

/* Qwen2-MoE has one shared expert when shared_expert_intermediate_size > 0
 * (Qwen2MoeConfig's default is 5632). moegen runs no shared expert for any
 * family (shared_experts is informational), so that expert's own FFN size
 * and its sigmoid gate (shared_expert_gate) are the caller's, as the size
 * of DeepSeek's shared experts is. */
static int qwen2_moe_rules(hf_load *h) {
  json_int_t size;
  bool present;
  int rc = get_int(h, h->keys, "shared_expert_intermediate_size", &size, &present);
  if (rc || !present) return rc;
  if (size < 0)
    return hf_fail(h, EX_DATAERR, "shared_expert_intermediate_size", "must be >= 0, got %lld",
                   (long long)size);
  h->cfg->shared_experts = size > 0;
  set_origin(h, MOEGEN_F_SHARED_EXPERTS, "shared_expert_intermediate_size");
  return 0;
}

/* transformers' DbrxRouter: softmax over all experts, the top-K of it, then
 * divided by its p-norm, p = ffn_config.moe_normalize_expert_weights
 * (DbrxFFNConfig's default 1: the sum, which renormalizes; null: left as
 * is). moegen computes no other norm. */
static int dbrx_rules(hf_load *h) {
  static const char key[] = "moe_normalize_expert_weights";
  const json_t *v = json_object_get(json_object_get(h->keys, "ffn_config"), key);
  double p;
  if (!v) return 0;
  if (json_is_null(v))
    h->cfg->pre_softmax = true;
  else if (!number_of(v, &p))
    return hf_fail(h, EX_DATAERR, key, "expected a number or null, got %s", json_kind(v));
  else if (p != 1)
    return hf_fail(h, EX_CONFIG, key,
                   "%g is not supported: DBRX divides the top-K weights by their %g-norm; moegen "
                   "renormalizes by their sum (1) or not at all (null)",
                   p, p);
  set_origin(h, MOEGEN_F_PRE_SOFTMAX, key);
  return 0;
}

/* ---------------------------------------------------------------- family */

struct hf_family {
  const char *model_types[3];   /* model_type values of the family */
  const char *architectures[3]; /* architectures entries, when model_type is missing */
  const hf_number *numbers;
  moegen_score score;           /* unless scoring_func says otherwise (deepseek_v3) */
  bool expert_bias;             /* unless topk_method says otherwise (deepseek_v3) */
  int shared_experts;           /* unless a key says otherwise */
  int norm_topk_prob;           /* default of norm_topk_prob; -1: not read by apply_norm_topk_prob */
  int (*rules)(hf_load *h);     /* the family's own keys and limits, after the numbers; or NULL */
  bool text_config;             /* keys live under text_config when the file has one */
  const char *refusal;          /* why moegen cannot compute the family's routing, or NULL */
};

/* Routing as in the transformers modeling code, defaults those of its
 * config classes (DeepseekV3Config and Glm4MoeConfig: sigmoid, bias,
 * norm_topk_prob true; Qwen2MoeConfig, Qwen3MoeConfig and OlmoeConfig:
 * softmax, norm_topk_prob false). Llama-4 has one shared expert and routes
 * by sigmoid of the top-1 logit; Mixtral, GraniteMoE and gpt-oss take the
 * softmax over the top-K logits. */
static const hf_family families[] = {
    {.model_types = {"deepseek_v2"}, .architectures = {"DeepseekV2ForCausalLM"},
     .numbers = deepseek_numbers, .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = -1,
     .rules = deepseek_v2_rules},
    {.model_types = {"deepseek_v3", "kimi_k2"}, .architectures = {"DeepseekV3ForCausalLM"},
     .numbers = deepseek_numbers, .score = MOEGEN_SCORE_SIGMOID, .expert_bias = true,
     .norm_topk_prob = 1, .rules = deepseek_v3_rules},
    {.model_types = {"glm4_moe"}, .architectures = {"Glm4MoeForCausalLM"},
     .numbers = deepseek_numbers, .score = MOEGEN_SCORE_SIGMOID, .expert_bias = true,
     .shared_experts = 1, .norm_topk_prob = 1, .rules = top2_group_rule},
    {.model_types = {"qwen2_moe"}, .architectures = {"Qwen2MoeForCausalLM"},
     .numbers = qwen_numbers, .score = MOEGEN_SCORE_SOFTMAX, .shared_experts = 1,
     .norm_topk_prob = 0, .rules = qwen2_moe_rules},
    {.model_types = {"qwen3_moe"}, .architectures = {"Qwen3MoeForCausalLM"},
     .numbers = qwen_numbers, .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = 0},
    {.model_types = {"olmoe"}, .architectures = {"OlmoeForCausalLM"}, .numbers = olmoe_numbers,
     .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = 0},
    {.model_types = {"mixtral"}, .architectures = {"MixtralForCausalLM"},
     .numbers = mixtral_numbers, .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = -1},
    {.model_types = {"granitemoe"}, .architectures = {"GraniteMoeForCausalLM"},
     .numbers = mixtral_numbers, .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = -1},
    {.model_types = {"dbrx"}, .architectures = {"DbrxForCausalLM"}, .numbers = dbrx_numbers,
     .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = -1, .rules = dbrx_rules},
    {.model_types = {"gpt_oss"}, .architectures = {"GptOssForCausalLM"},
     .numbers = gpt_oss_numbers, .score = MOEGEN_SCORE_SOFTMAX, .norm_topk_prob = -1},
    {.model_types = {"llama4", "llama4_text"},
     .architectures = {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"},
     .numbers = mixtral_numbers, .score = MOEGEN_SCORE_SIGMOID, .shared_experts = 1,
     .norm_topk_prob = -1, .text_config = true},
    {.model_types = {"phimoe"}, .architectures = {"PhimoeForCausalLM", "PhiMoEForCausalLM"},
     .refusal = "it routes with sparsemixer: each of its 2 picks is weighted by a softmax over "
                "only the logits within 2 * router_jitter_noise (relative) of that pick, which "
                "no score function of moegen's router computes"},
    {.model_types = {"ernie4_5_moe"}, .architectures = {"Ernie4_5_MoeForCausalLM"},
     .refusal = "it selects experts by softmax scores plus e_score_correction_bias; moegen "
                "(like TE) adds an expert bias only to sigmoid or sqrtsoftplus scores"},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

size_t moegen_hf_model_types(char *buf, size_t size, bool refused) {
  size_t len = 0;
  if (size > 0) buf[0] = 0;
  for (size_t f = 0; f < N_FAMILIES; f++)
    for (size_t j = 0; j < 3 && families[f].model_types[j]; j++) {
      if ((families[f].refusal != NULL) != refused) continue;
      int n = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s%s",
                       len ? ", " : "", families[f].model_types[j]);
      len += (size_t)n;
    }
  return len;
}

static const hf_family *family_of(const char *s, bool architecture) {
  for (size_t i = 0; s && i < N_FAMILIES; i++)
    for (size_t j = 0; j < 3; j++) {
      const char *name = architecture ? families[i].architectures[j] : families[i].model_types[j];
      if (name && strcmp(name, s) == 0) return &families[i];
    }
  return NULL;
}

/* Finds the family from model_type, or else from architectures (a
 * transformers class name names its family as exactly); refuses one whose
 * routing moegen cannot compute. A file that names no family is an error:
 * moegen does not guess key names or routing. */
static int detect_family(hf_load *h) {
  const char *type;
  char supported[512];
  const json_t *archs = json_object_get(h->root, "architectures");
  int rc = get_string(h, h->root, "model_type", &type);
  if (rc) return rc;
  moegen_hf_model_types(supported, sizeof supported, false);
  h->family_key = "model_type";
  h->family_name = type;
  h->family = family_of(type, false);
  for (size_t i = 0; !type && !h->family && i < json_array_size(archs); i++) {
    h->family_name = json_string_value(json_array_get(archs, i));
    h->family = family_of(h->family_name, true);
    h->family_key = "architectures";
  }
  if (h->family && h->family->refusal)
    return hf_fail(h, EX_CONFIG, h->family_key, "\"%s\" is not supported: %s", h->family_name,
                   h->family->refusal);
  if (h->family) return 0;
  if (type)
    return hf_fail(h, EX_DATAERR, "model_type", "unsupported model type \"%.80s\" (supported: %s)",
                   type, supported);
  return hf_fail(h, EX_DATAERR, "model_type",
                 "missing, and %s; moegen does not guess a model family (supported model_type "
                 "values: %s; or give the keys in CONFIG.lua or --set)",
                 archs ? "architectures names no supported model" : "there is no architectures",
                 supported);
}

/* Sets the facts of the family (origin: the model_type line). */
static void apply_family_facts(hf_load *h) {
  moegen_config *c = h->cfg;
  static const moegen_field facts[] = {MOEGEN_F_SCORE,       MOEGEN_F_PRE_SOFTMAX, MOEGEN_F_GROUPS,
                                       MOEGEN_F_GROUP_TOPK,  MOEGEN_F_EXPERT_BIAS, MOEGEN_F_SCALING,
                                       MOEGEN_F_SHARED_EXPERTS};
  c->score = h->family->score;
  c->pre_softmax = false;
  c->groups = 0;
  c->group_topk = 0;
  c->expert_bias = h->family->expert_bias;
  c->scaling = 1.0;
  c->shared_experts = h->family->shared_experts;
  for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++)
    set_origin(h, facts[i], h->family_key);
}

/* norm_topk_prob: for softmax, false means softmax over all E without
 * renormalization (pre_softmax); sigmoid always renormalizes when K > 1. */
static int apply_norm_topk_prob(hf_load *h) {
  const json_t *v = json_object_get(h->keys, "norm_topk_prob");
  bool norm = h->family->norm_topk_prob == 1;
  if (v && !json_is_boolean(v))
    return hf_fail(h, EX_DATAERR, "norm_topk_prob", "expected a boolean, got %s", json_kind(v));
  if (v) norm = json_is_true(v);
  if (h->cfg->score == MOEGEN_SCORE_SOFTMAX) {
    h->cfg->pre_softmax = !norm;
    if (v) set_origin(h, MOEGEN_F_PRE_SOFTMAX, "norm_topk_prob");
  } else if (!norm && h->cfg->topk > 1) {
    return hf_fail(h, EX_CONFIG, "norm_topk_prob",
                   "false is not supported with %s scores (TE renormalizes the top-K when K > 1)",
                   moegen_score_name(h->cfg->score));
  }
  return 0;
}

/* torch_dtype (or dtype): bfloat16 -> bf16, float16 -> fp16; others keep dtype. */
static int apply_torch_dtype(hf_load *h) {
  static const char *const keys[] = {"torch_dtype", "dtype"};
  for (size_t i = 0; i < 2; i++) {
    const char *s;
    int rc = get_string(h, h->root, keys[i], &s);
    if (rc) return rc;
    if (!s) continue;
    if (strcmp(s, "bfloat16") == 0 || strcmp(s, "float16") == 0) {
      h->cfg->dtype = s[0] == 'b' ? MOEGEN_DTYPE_BF16 : MOEGEN_DTYPE_FP16;
      set_origin(h, MOEGEN_F_DTYPE, keys[i]);
    }
    return 0;
  }
  return 0;
}

/* quantization_config (at the top level; transformers' HfQuantizer keys):
 * DeepSeek-V3's block FP8 (quant_method "fp8", fmt "e4m3",
 * weight_block_size [128, 128], activation_scheme "dynamic": E4M3 weights
 * with a scale per 128 x 128 block, activations quantized per 1 x 128 tile
 * at run time) is recipe fp8_block. fmt and activation_scheme may be
 * missing (those are transformers' defaults); anything else is refused,
 * naming the key, since moegen would compute another quantization than the
 * checkpoint's. null or no key leaves the recipe as it was. */
static int apply_quantization(hf_load *h) {
  static const char key[] = "quantization_config";
  const json_t *q = json_object_get(h->root, key);
  if (!q || json_is_null(q)) return 0;
  if (!json_is_object(q)) return hf_fail(h, EX_DATAERR, key, "expected an object, got %s", json_kind(q));
  const char *method, *fmt, *scheme;
  int rc = get_string(h, q, "quant_method", &method);
  if (!rc) rc = get_string(h, q, "fmt", &fmt);
  if (!rc) rc = get_string(h, q, "activation_scheme", &scheme);
  if (rc) return rc;
  static const char expected[] =
      "moegen reads DeepSeek-V3's block FP8 only: quant_method \"fp8\", fmt \"e4m3\", "
      "weight_block_size [128, 128], activation_scheme \"dynamic\" (recipe fp8_block)";
  if (!method)
    return hf_fail(h, EX_CONFIG, key, "has no quant_method; %s", expected);
  if (strcmp(method, "fp8") != 0)
    return hf_fail(h, EX_CONFIG, "quant_method", "\"%.80s\" is not supported: %s", method, expected);
  if (fmt && strcmp(fmt, "e4m3") != 0)
    return hf_fail(h, EX_CONFIG, "fmt", "\"%.80s\" is not supported: %s", fmt, expected);
  if (scheme && strcmp(scheme, "dynamic") != 0)
    return hf_fail(h, EX_CONFIG, "activation_scheme",
                   "\"%.80s\" is not supported (fp8_block computes activation scales at run "
                   "time): %s", scheme, expected);
  const json_t *b = json_object_get(q, "weight_block_size");
  if (!b)
    return hf_fail(h, EX_CONFIG, key, "has no weight_block_size (a per-tensor FP8 checkpoint); %s",
                   expected);
  if (!json_is_array(b))
    return hf_fail(h, EX_DATAERR, "weight_block_size", "expected an array, got %s", json_kind(b));
  bool block = json_array_size(b) == 2;
  for (size_t i = 0; i < json_array_size(b); i++) {
    const json_t *x = json_array_get(b, i);
    if (!json_is_integer(x))
      return hf_fail(h, EX_DATAERR, "weight_block_size", "expected an array of integers, got %s",
                     json_kind(x));
    block = block && json_integer_value(x) == MOEGEN_FP8_BLOCK;
  }
  if (!block)
    return hf_fail(h, EX_CONFIG, "weight_block_size", "is not supported: %s", expected);
  h->cfg->recipe = MOEGEN_RECIPE_FP8_BLOCK;
  set_origin(h, MOEGEN_F_RECIPE, key);
  return 0;
}

/* name: the file name without ".json"; for "config.json", the model_type.
 * A longer one is cut to the 63 bytes a name holds, at a UTF-8 character
 * boundary (validation rejects a file name that is not UTF-8). */
static void apply_name(hf_load *h) {
  const char *base = strrchr(h->path, '/') ? strrchr(h->path, '/') + 1 : h->path;
  size_t len = strlen(base);
  if (len > 5 && strcmp(base + len - 5, ".json") == 0) len -= 5;
  if (len == 6 && strncmp(base, "config", 6) == 0) {
    base = h->family->model_types[0];
    len = strlen(base);
  }
  if (len >= sizeof h->cfg->name) len = sizeof h->cfg->name - 1;
  while (len > 0 && ((unsigned char)base[len] & 0xc0) == 0x80) len--;
  snprintf(h->cfg->name, sizeof h->cfg->name, "%.*s", (int)len, base);
  snprintf(h->cfg->origin[MOEGEN_F_NAME].file, sizeof h->cfg->origin[0].file, "%s", h->path);
  h->cfg->origin[MOEGEN_F_NAME].line = 0;
}

/* Picks the object holding the keys: text_config for Llama-4, else the root. */
static int find_keys(hf_load *h) {
  json_t *text_config = json_object_get(h->root, "text_config");
  h->keys = h->root;
  if (!h->family->text_config || !text_config) return 0;
  if (!json_is_object(text_config))
    return hf_fail(h, EX_DATAERR, "text_config", "expected an object, got %s",
                   json_kind(text_config));
  h->keys = text_config;
  return 0;
}

/* Applies the parsed file to h->cfg. */
static int apply_root(hf_load *h) {
  int rc = detect_family(h);
  if (!rc) rc = find_keys(h);
  if (rc) return rc;
  apply_family_facts(h);
  for (const hf_number *n = h->family->numbers; !rc && n->keys[0]; n++) rc = apply_number(h, n);
  if (!rc && h->family->rules) rc = h->family->rules(h);
  if (!rc && h->family->norm_topk_prob >= 0) rc = apply_norm_topk_prob(h);
  if (!rc) rc = apply_torch_dtype(h);
  if (!rc) rc = apply_quantization(h);
  if (rc) return rc;
  if (h->cfg->groups == 1 && h->cfg->group_topk == 1) /* one group of all experts: no groups */
    h->cfg->groups = h->cfg->group_topk = 0;
  apply_name(h);
  return 0;
}

/* The key jansson's duplicate-key error quotes ("duplicate object key near
 * '"KEY"'"), as it is spelled in the file, into key; false if the text has
 * no whole key (jansson cuts long texts). */
static bool duplicate_key_of(const json_error_t *jerr, char *key, size_t size) {
  const char *near = strstr(jerr->text, "near '\"");
  size_t len = near ? strlen(near + 7) : 0;
  if (len < 2 || strcmp(near + 7 + len - 2, "\"'") != 0) return false;
  snprintf(key, size, "%.*s", (int)(len - 2), near + 7);
  return true;
}

/* Parses the text into h->root (EX_DATAERR "FILE:LINE: json: ..." on error;
 * a key twice in one object is "FILE:LINE: KEY: duplicate key ..." at the
 * second one). */
static int parse(hf_load *h, size_t size) {
  size_t n;
  char *marked = mark_nonfinite(h->text, size, &n);
  json_error_t jerr;
  h->err->code = EX_DATAERR;
  if (!marked) {
    h->err->code = EX_OSERR;
    snprintf(h->err->msg, sizeof h->err->msg, "%s: out of memory", h->path);
    return h->err->code;
  }
  h->root = json_loadb(marked, n, JSON_REJECT_DUPLICATES, &jerr);
  free(marked);
  char key[JSON_ERROR_TEXT_LENGTH];
  if (!h->root && json_error_code(&jerr) == json_error_duplicate_key &&
      duplicate_key_of(&jerr, key, sizeof key))
    snprintf(h->err->msg, sizeof h->err->msg,
             "%s:%d: %s: duplicate key (a JSON object names each key once)", h->path, jerr.line,
             key);
  else if (!h->root && jerr.line > 0)
    snprintf(h->err->msg, sizeof h->err->msg, "%s:%d: json: %s", h->path, jerr.line, jerr.text);
  else if (!h->root)
    snprintf(h->err->msg, sizeof h->err->msg, "%s: json: %s", h->path, jerr.text);
  else if (!json_is_object(h->root))
    snprintf(h->err->msg, sizeof h->err->msg, "%s:1: json: the top level is not an object",
             h->path);
  else
    return h->err->code = 0;
  return h->err->code;
}

int moegen_config_load_hf(moegen_config *c, const char *path, moegen_error *err) {
  size_t size;
  char *text = moegen_read_file(path, &size);
  if (!text) {
    err->code = EX_NOINPUT;
    snprintf(err->msg, sizeof err->msg, "%s: cannot read: %s", path, strerror(errno));
    return err->code;
  }
  moegen_config tmp = *c;
  hf_load h = {.cfg = &tmp, .path = path, .text = text, .err = err};
  int rc = parse(&h, size);
  if (!rc) rc = apply_root(&h);
  json_decref(h.root);
  free(text);
  if (!rc) *c = tmp;
  return rc;
}
