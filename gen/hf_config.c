/* gen/hf_config.c -- Hugging Face config.json -> moegen_config
 * (moegen_config_load_hf).
 *
 * The model family comes from model_type (or, without it, from
 * architectures). A family fixes the routing facts its config.json does not
 * spell out (SPEC.md section 7: score function, groups, bias, scaling) and
 * names the keys that hold the sizes; the keys a file has then override
 * those facts. Keys the file lacks leave the config as it was (a size no
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
  const char *keys[3]; /* the first one the file has wins; others must agree */
  moegen_field field;
  size_t offset;       /* of the member in moegen_config */
  bool real;           /* double (else int) */
} hf_number;

#define INT_KEY(f, m, ...) {{__VA_ARGS__}, f, offsetof(moegen_config, m), false}
#define REAL_KEY(f, m, ...) {{__VA_ARGS__}, f, offsetof(moegen_config, m), true}

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
    {{NULL}, 0, 0, false}};

static const hf_number qwen3_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "moe_intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    {{NULL}, 0, 0, false}};

/* Mixtral and Llama-4 (text_config): intermediate_size is the expert FFN. */
static const hf_number mixtral_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_local_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    {{NULL}, 0, 0, false}};

static const hf_number gpt_oss_numbers[] = {
    INT_KEY(MOEGEN_F_EXPERTS, experts, "num_local_experts"),
    INT_KEY(MOEGEN_F_TOPK, topk, "num_experts_per_tok", "experts_per_token"),
    INT_KEY(MOEGEN_F_HIDDEN, hidden, "hidden_size"),
    INT_KEY(MOEGEN_F_FFN, ffn, "intermediate_size"),
    REAL_KEY(MOEGEN_F_AUX_LOSS_COEFF, aux_loss_coeff, "router_aux_loss_coef"),
    {{NULL}, 0, 0, false}};

typedef struct hf_family {
  const char *model_types[3];   /* model_type values of the family */
  const char *architectures[3]; /* architectures entries, when model_type is missing */
  const hf_number *numbers;
  moegen_score score;           /* unless scoring_func says otherwise */
  bool expert_bias;             /* unless topk_method says otherwise */
  int shared_experts;           /* unless a key says otherwise */
  int norm_topk_prob;           /* default of norm_topk_prob; -1: not read, top-K renormalized */
  bool deepseek_keys;           /* reads scoring_func and topk_method */
  bool text_config;             /* keys live under text_config when the file has one */
} hf_family;

/* Defaults are those of the transformers config classes (DeepseekV3Config:
 * sigmoid, noaux_tc, norm_topk_prob true; Qwen3MoeConfig: norm_topk_prob
 * false). Llama-4 has one shared expert and routes by sigmoid of the top-1
 * logit; Mixtral and gpt-oss take the softmax over the top-K logits. */
static const hf_family families[] = {
    {{"deepseek_v3", "kimi_k2"}, {"DeepseekV3ForCausalLM"}, deepseek_numbers,
     MOEGEN_SCORE_SIGMOID, true, 0, 1, true, false},
    {{"qwen3_moe"}, {"Qwen3MoeForCausalLM"}, qwen3_numbers, MOEGEN_SCORE_SOFTMAX, false, 0, 0,
     false, false},
    {{"mixtral"}, {"MixtralForCausalLM"}, mixtral_numbers, MOEGEN_SCORE_SOFTMAX, false, 0, -1,
     false, false},
    {{"gpt_oss"}, {"GptOssForCausalLM"}, gpt_oss_numbers, MOEGEN_SCORE_SOFTMAX, false, 0, -1,
     false, false},
    {{"llama4", "llama4_text"}, {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"},
     mixtral_numbers, MOEGEN_SCORE_SIGMOID, false, 1, -1, false, true},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* One load in progress. */
typedef struct hf_load {
  moegen_config *cfg;
  const char *path;
  const char *text;         /* the file as read, for key lines */
  json_t *root;
  json_t *keys;             /* the object the family's keys live in */
  const hf_family *family;
  const char *family_key;   /* "model_type" or "architectures" */
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
  json_t *v = NULL;
  for (size_t i = 0; i < 3 && num->keys[i]; i++) {
    json_t *x = json_object_get(h->keys, num->keys[i]);
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

/* ---------------------------------------------------------------- family */

static const hf_family *family_of(const char *s, bool architecture) {
  for (size_t i = 0; s && i < N_FAMILIES; i++)
    for (size_t j = 0; j < 3; j++) {
      const char *name = architecture ? families[i].architectures[j] : families[i].model_types[j];
      if (name && strcmp(name, s) == 0) return &families[i];
    }
  return NULL;
}

/* Finds the family from model_type, or else from architectures. */
static int detect_family(hf_load *h) {
  const char *type;
  int rc = get_string(h, h->root, "model_type", &type);
  if (rc) return rc;
  h->family_key = "model_type";
  if (type) {
    h->family = family_of(type, false);
    if (h->family) return 0;
    return hf_fail(h, EX_DATAERR, "model_type",
                   "unsupported model type \"%.80s\" (supported: deepseek_v3, kimi_k2, qwen3_moe, "
                   "mixtral, gpt_oss, llama4, llama4_text)",
                   type);
  }
  const json_t *archs = json_object_get(h->root, "architectures");
  for (size_t i = 0; !h->family && i < json_array_size(archs); i++)
    h->family = family_of(json_string_value(json_array_get(archs, i)), true);
  if (h->family) {
    h->family_key = "architectures";
    return 0;
  }
  return hf_fail(h, EX_DATAERR, "model_type",
                 "missing, and architectures names no supported model");
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

/* DeepSeek keys: scoring_func (score), topk_method (noaux_tc = expert bias). */
static int apply_deepseek_keys(hf_load *h) {
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
  if (!rc && h->family->deepseek_keys) rc = apply_deepseek_keys(h);
  if (!rc && h->family->norm_topk_prob >= 0) rc = apply_norm_topk_prob(h);
  if (!rc) rc = apply_torch_dtype(h);
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
