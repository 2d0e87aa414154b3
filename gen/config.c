/* gen/config.c -- the configuration fields: defaults, the key table, Lua
 * config files, `key=value` overrides, validation and Lua output.
 *
 * Every config key has one descriptor (keys[] below): its name, its value
 * type, where it lives in moegen_config and a one-line meaning. Lua files
 * and --set overrides both turn a raw value into a `value` and hand it to
 * store(), so both accept and reject exactly the same things with the same
 * messages. Lua files run as a text chunk in an environment that holds only
 * `math` (without random), under a memory cap and an instruction cap.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "float_literal.h"
#include "moegen/config.h"
#include "read_file.h"

#define ORIGIN_COMMAND_LINE "<command line>"
#define LUA_MEMORY_LIMIT (16u << 20)   /* bytes a config chunk's state may hold */
#define LUA_HOOK_STEP 1000             /* VM instructions between two hook calls */
#define LUA_INSTRUCTION_LIMIT 10000000 /* VM instructions a config chunk may run */

/* ---------------------------------------------------------------- the key table */

typedef enum key_type { KT_INT, KT_NUM, KT_BOOL, KT_STR, KT_ENUM } key_type;

/* Enum names from moegen/types.h: one array each (index = value), and
 * "|a|b|c" (the type text is it from the second character). */
#define NAME_OF(e, name, value) [value] = #name,
#define NAME_OF_DTYPE(e, name, value, bytes) [value] = #name,
#define ALT_OF(e, name, value) "|" #name
#define ALT_OF_DTYPE(e, name, value, bytes) "|" #name
static const char *const score_names[] = {MOEGEN_SCORES(NAME_OF)};
static const char *const dtype_names[] = {MOEGEN_DTYPES(NAME_OF_DTYPE)};
static const char *const recipe_names[] = {MOEGEN_RECIPES(NAME_OF)};
static const char *const grad_format_names[] = {MOEGEN_FP8_GRAD_FORMATS(NAME_OF)};
static const char *const scale_names[] = {MOEGEN_FP8_SCALES(NAME_OF)};
static const char *const router_bwd_names[] = {MOEGEN_ROUTER_BWDS(NAME_OF)};
static const char score_alternatives[] = MOEGEN_SCORES(ALT_OF);
static const char dtype_alternatives[] = MOEGEN_DTYPES(ALT_OF_DTYPE);
static const char recipe_alternatives[] = MOEGEN_RECIPES(ALT_OF);
static const char grad_format_alternatives[] = MOEGEN_FP8_GRAD_FORMATS(ALT_OF);
static const char scale_alternatives[] = MOEGEN_FP8_SCALES(ALT_OF);
static const char router_bwd_alternatives[] = MOEGEN_ROUTER_BWDS(ALT_OF);
#define COUNT_OF(a) (sizeof a / sizeof a[0])

/* An enum-valued key: its names and what one is called in messages. */
typedef struct enum_desc {
  const char *const *names;
  size_t count;
  const char *alternatives; /* "|a|b|c" */
  const char *noun;         /* "unknown NOUN \"x\"" */
} enum_desc;

static const enum_desc score_enum = {score_names, COUNT_OF(score_names), score_alternatives,
                                     "score function"};
static const enum_desc dtype_enum = {dtype_names, COUNT_OF(dtype_names), dtype_alternatives,
                                     "dtype"};
static const enum_desc recipe_enum = {recipe_names, COUNT_OF(recipe_names), recipe_alternatives,
                                      "recipe"};
static const enum_desc grad_format_enum = {grad_format_names, COUNT_OF(grad_format_names),
                                           grad_format_alternatives, "gradient format"};
static const enum_desc scale_enum = {scale_names, COUNT_OF(scale_names), scale_alternatives,
                                     "scale format"};
static const enum_desc router_bwd_enum = {router_bwd_names, COUNT_OF(router_bwd_names),
                                          router_bwd_alternatives, "router backward mode"};

_Static_assert(sizeof(moegen_score) == sizeof(int) && sizeof(moegen_dtype) == sizeof(int) &&
                   sizeof(moegen_recipe) == sizeof(int) &&
                   sizeof(moegen_fp8_grad_format) == sizeof(int) &&
                   sizeof(moegen_fp8_scale) == sizeof(int) &&
                   sizeof(moegen_router_bwd_mode) == sizeof(int),
               "enum fields are stored as ints");

typedef struct key_desc {
  const char *key;  /* config key (Lua table key, --set key) */
  key_type type;
  size_t offset;    /* of the member in moegen_config */
  const char *help; /* one-line meaning, for --help */
  const enum_desc *values; /* KT_ENUM: its names; else NULL */
} key_desc;

#define KEY(f, t, member, help) [f] = {#member, t, offsetof(moegen_config, member), help, NULL}
#define ENUM_KEY(f, e, member, help) \
  [f] = {#member, KT_ENUM, offsetof(moegen_config, member), help, &e}
static const key_desc keys[MOEGEN_F_COUNT] = {
    KEY(MOEGEN_F_NAME, KT_STR, name, "model name, informational: UTF-8, at most 63 bytes, no control characters"),
    KEY(MOEGEN_F_EXPERTS, KT_INT, experts, "E, routed experts (1..2048)"),
    KEY(MOEGEN_F_TOPK, KT_INT, topk, "K, experts per token (1..min(E, 32))"),
    KEY(MOEGEN_F_HIDDEN, KT_INT, hidden, "H, hidden size (model dim), 1..16777216"),
    KEY(MOEGEN_F_FFN, KT_INT, ffn, "F, per-expert FFN (intermediate) size, 1..16777216"),
    ENUM_KEY(MOEGEN_F_SCORE, score_enum, score, "router score function"),
    KEY(MOEGEN_F_PRE_SOFTMAX, KT_BOOL, pre_softmax,
        "softmax over all E before top-K, no renormalization (softmax only)"),
    KEY(MOEGEN_F_GROUPS, KT_INT, groups, "expert groups; 0 = no group-limited routing"),
    KEY(MOEGEN_F_GROUP_TOPK, KT_INT, group_topk, "groups kept per token; 0 when groups = 0"),
    KEY(MOEGEN_F_EXPERT_BIAS, KT_BOOL, expert_bias,
        "fp32 [E] bias added to the scores for selection (sigmoid/sqrtsoftplus only)"),
    KEY(MOEGEN_F_SCALING, KT_NUM, scaling, "routed scaling factor on the probs; the kernels use it as a float, so it must "
        "round to a normal one (1.17549435e-38 to 3.40282347e+38)"),
    ENUM_KEY(MOEGEN_F_LOGITS_DTYPE, dtype_enum, logits_dtype, "router logits and probs dtype"),
    ENUM_KEY(MOEGEN_F_DTYPE, dtype_enum, dtype, "activations and weights dtype; bf16 or fp16 only"),
    KEY(MOEGEN_F_SHARED_EXPERTS, KT_INT, shared_experts,
        "shared experts, >= 0 (informational: the caller runs them)"),
    KEY(MOEGEN_F_AUX_LOSS_COEFF, KT_NUM, aux_loss_coeff,
        "aux loss coefficient, finite, >= 0 (informational)"),
    KEY(MOEGEN_F_QUANTILE_BALANCING, KT_BOOL, quantile_balancing,
        "quantile balancing: cutoff = (K+1)-th biased score, per-expert histogram (sigmoid + "
        "expert_bias, no groups, topk < experts)"),
    ENUM_KEY(MOEGEN_F_ROUTER_BWD, router_bwd_enum, router_bwd,
             "router backward state: saved (TE's: the forward writes an fp32 [T, E] intermediate) "
             "or recompute (the backward recomputes it from the logits; the forward saves none)"),
    ENUM_KEY(MOEGEN_F_RECIPE, recipe_enum, recipe,
             "precision recipe of the expert path: bf16; fp8_tensorwise (one scale per tensor "
             "from its amax each call, TE current scaling); fp8_block (E4M3, fp32 scales per "
             "1x128 row tile and 128x128 weight block, DeepSeek-V3; hidden and ffn multiples of "
             "128); the FP8 recipes need dtype bf16"),
    ENUM_KEY(MOEGEN_F_FP8_GRAD_FORMAT, grad_format_enum, fp8_grad_format,
             "fp8_tensorwise's gradients: hybrid = E5M2 (E4M3 forward tensors), e4m3 = E4M3 "
             "everywhere; other recipes take only the default, hybrid (fp8_block is E4M3 "
             "throughout)"),
    ENUM_KEY(MOEGEN_F_FP8_SCALE, scale_enum, fp8_scale,
             "fp8_block's scales: pow2 = FP8_MAX / amax rounded down to a power of two, fp32 = "
             "as computed; other recipes take only the default, pow2 (fp8_tensorwise's scale "
             "is always fp32, TE current scaling)"),
};

static const char *const type_text[] = {
    [KT_INT] = "integer", [KT_NUM] = "number", [KT_BOOL] = "true|false", [KT_STR] = "string"};

const char *moegen_config_key_name(moegen_field f) {
  return (unsigned)f < MOEGEN_F_COUNT ? keys[f].key : NULL;
}

const char *moegen_config_key_type(moegen_field f) {
  if ((unsigned)f >= MOEGEN_F_COUNT) return NULL;
  return keys[f].values ? keys[f].values->alternatives + 1 : type_text[keys[f].type];
}

const char *moegen_config_key_help(moegen_field f) {
  return (unsigned)f < MOEGEN_F_COUNT ? keys[f].help : NULL;
}

static const char *enum_name(const enum_desc *e, int v) {
  return v >= 0 && (size_t)v < e->count ? e->names[v] : "?";
}

const char *moegen_score_name(moegen_score s) { return enum_name(&score_enum, (int)s); }
const char *moegen_dtype_name(moegen_dtype d) { return enum_name(&dtype_enum, (int)d); }
const char *moegen_recipe_name(moegen_recipe r) { return enum_name(&recipe_enum, (int)r); }
const char *moegen_fp8_grad_format_name(moegen_fp8_grad_format g) {
  return enum_name(&grad_format_enum, (int)g);
}
const char *moegen_fp8_scale_name(moegen_fp8_scale s) { return enum_name(&scale_enum, (int)s); }
const char *moegen_router_bwd_name(moegen_router_bwd_mode b) {
  return enum_name(&router_bwd_enum, (int)b);
}

/* Field whose key is the `len` bytes at `key`, or -1. */
static int find_key(const char *key, size_t len) {
  for (int f = 0; f < MOEGEN_F_COUNT; f++)
    if (strlen(keys[f].key) == len && memcmp(keys[f].key, key, len) == 0) return f;
  return -1;
}

/* ---------------------------------------------------------------- errors and origins */

static void set_origin(moegen_origin *o, const char *file, int line) {
  snprintf(o->file, sizeof o->file, "%s", file);
  o->line = line;
}

/* Fills err with "FILE:LINE: what: reason" ("FILE: what: reason" when line
 * is 0; "command-line argument N: what: reason" for the command line, whose
 * "line" is the argument's position; no "what: " when what is NULL) and
 * returns code. */
static int fail_at(moegen_error *err, int code, const char *file, int line, const char *what,
                   const char *fmt, ...) {
  char where[320], reason[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  if (line > 0 && strcmp(file, ORIGIN_COMMAND_LINE) == 0)
    snprintf(where, sizeof where, "command-line argument %d", line);
  else if (line > 0)
    snprintf(where, sizeof where, "%s:%d", file, line);
  else
    snprintf(where, sizeof where, "%s", file);
  err->code = code;
  if (what)
    snprintf(err->msg, sizeof err->msg, "%s: %s: %s", where, what, reason);
  else
    snprintf(err->msg, sizeof err->msg, "%s: %s", where, reason);
  return code;
}

void moegen_config_defaults(moegen_config *c) {
  memset(c, 0, sizeof *c);
  c->topk = 1;
  c->score = MOEGEN_SCORE_SOFTMAX;
  c->scaling = 1.0;
  c->logits_dtype = MOEGEN_DTYPE_BF16;
  c->dtype = MOEGEN_DTYPE_BF16;
  c->recipe = MOEGEN_RECIPE_BF16;
  c->fp8_grad_format = MOEGEN_FP8_GRAD_HYBRID;
  c->fp8_scale = MOEGEN_FP8_SCALE_POW2;
  for (int f = 0; f < MOEGEN_F_COUNT; f++) set_origin(&c->origin[f], MOEGEN_ORIGIN_DEFAULT, 0);
}

/* ---------------------------------------------------------------- values */

/* A raw value from a Lua table or a --set text, before its type check. */
typedef enum value_kind { V_INT, V_FLOAT, V_BOOL, V_STRING, V_OTHER } value_kind;

typedef struct value {
  value_kind kind;
  long long i;   /* V_INT */
  double d;      /* V_FLOAT */
  bool b;        /* V_BOOL */
  const char *s; /* V_STRING: the text; V_OTHER: its type name */
  size_t len;    /* V_STRING: bytes of s (may hold NULs from Lua) */
} value;

/* Writes a short description of v ("\"many\"", "2.5", "a table") into buf. */
static void describe(const value *v, char *buf, size_t size) {
  switch (v->kind) {
  case V_INT: snprintf(buf, size, "%lld", v->i); break;
  case V_FLOAT: snprintf(buf, size, "%g", v->d); break;
  case V_BOOL: snprintf(buf, size, "%s", v->b ? "true" : "false"); break;
  case V_STRING: snprintf(buf, size, "\"%.40s%s\"", v->s, v->len > 40 ? "..." : ""); break;
  case V_OTHER: snprintf(buf, size, "a %s", v->s); break;
  }
}

/* Offset of the first byte of s[0..len) that does not start a valid UTF-8
 * sequence (overlong forms, surrogates and code points above U+10FFFF are
 * not valid), or len when all of it is UTF-8. */
static size_t utf8_error_offset(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    unsigned cp = s[i], min;
    size_t n;
    if (cp < 0x80) {
      i++;
      continue;
    } else if ((cp & 0xe0) == 0xc0) {
      n = 2, cp &= 0x1f, min = 0x80;
    } else if ((cp & 0xf0) == 0xe0) {
      n = 3, cp &= 0x0f, min = 0x800;
    } else if ((cp & 0xf8) == 0xf0) {
      n = 4, cp &= 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (len - i < n) return i;
    for (size_t k = 1; k < n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n;
  }
  return len;
}

/* Why the len bytes at s cannot be a config name, into why (n bytes), as a
 * sysexits code; 0 if they can. EX_DATAERR: not UTF-8 (the name goes into
 * NAME.json; the message does not echo the bad bytes). EX_CONFIG: longer
 * than 63 bytes, or a control character (the message shows at most 40
 * bytes, whole characters). */
static int name_problem(const char *s, size_t len, char *why, size_t n) {
  size_t bad = utf8_error_offset((const unsigned char *)s, len);
  if (bad < len) {
    snprintf(why, n, "not valid UTF-8 (byte 0x%02x at offset %zu)", (unsigned char)s[bad], bad);
    return EX_DATAERR;
  }
  size_t shown = len > 40 ? 40 : len; /* whole characters only */
  while (shown < len && shown > 0 && ((unsigned char)s[shown] & 0xc0) == 0x80) shown--;
  const char *problem = NULL;
  if (len >= sizeof((moegen_config *)0)->name) problem = "longer than 63 characters";
  for (size_t i = 0; !problem && i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) problem = "contains a control character";
  if (!problem) return 0;
  snprintf(why, n, "\"%.*s%s\": %s", (int)shown, s, shown < len ? "..." : "", problem);
  return EX_CONFIG;
}

/* Index of the `len` bytes at s in names[n], or -1. */
static int find_name(const char *const *names, size_t n, const char *s, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return (int)i;
  return -1;
}

/* Whether v is an integer (or an integral float) that fits an int. */
static bool int_of(const value *v, int *out) {
  if (v->kind == V_FLOAT && v->d == floor(v->d) && fabs(v->d) <= 2147483647.0)
    *out = (int)v->d;
  else if (v->kind == V_INT && v->i >= -2147483647LL - 1 && v->i <= 2147483647LL)
    *out = (int)v->i;
  else
    return false;
  return true;
}

/* What a value of each key type must be, for "expected X" messages. */
static const char *const expected_text[] = {
    [KT_INT] = "an integer", [KT_NUM] = "a number", [KT_BOOL] = "a boolean (true or false)",
    [KT_STR] = "a string", [KT_ENUM] = "a string"};

/* Checks v against field f's type and stores it; on failure returns a
 * sysexits code with the reason (without the key) in why. */
static int convert(moegen_config *c, moegen_field f, const value *v, char *why, size_t n) {
  char *p = (char *)c + keys[f].offset;
  char got[64];
  int i = -1, code;
  describe(v, got, sizeof got);
  switch (keys[f].type) {
  case KT_INT:
    if (!int_of(v, (int *)p)) break;
    return 0;
  case KT_NUM:
    if (v->kind != V_INT && v->kind != V_FLOAT) break;
    *(double *)p = v->kind == V_INT ? (double)v->i : v->d;
    return 0;
  case KT_BOOL:
    if (v->kind != V_BOOL) break;
    *(bool *)p = v->b;
    return 0;
  case KT_STR:
    if (v->kind != V_STRING) break;
    if ((code = name_problem(v->s, v->len, why, n)) != 0) return code;
    memcpy(p, v->s, v->len);
    p[v->len] = 0;
    return 0;
  case KT_ENUM:
    if (v->kind != V_STRING) break;
    if ((i = find_name(keys[f].values->names, keys[f].values->count, v->s, v->len)) >= 0) {
      *(int *)p = i;
      return 0;
    }
    snprintf(why, n, "unknown %s %s (expected %s)", keys[f].values->noun, got,
             keys[f].values->alternatives + 1);
    return EX_CONFIG;
  }
  snprintf(why, n, "expected %s, got %s", expected_text[keys[f].type], got);
  return EX_DATAERR;
}

/* Stores v into field f and records FILE:LINE as its origin, or fills err. */
static int store(moegen_config *c, moegen_field f, const value *v, const char *file, int line,
                 moegen_error *err) {
  char why[256];
  int rc = convert(c, f, v, why, sizeof why);
  if (rc) return fail_at(err, rc, file, line, keys[f].key, "%s", why);
  set_origin(&c->origin[f], file, line);
  return 0;
}

/* ---------------------------------------------------------------- key=value */

/* The value that the text s stands for in a field of type t: true/false for
 * booleans, a number for numeric fields when all of s parses, else s itself
 * (which store() then accepts or rejects). */
static value value_of_text(key_type t, const char *s) {
  value v = {.kind = V_STRING, .s = s, .len = strlen(s)};
  char *end;
  if (t == KT_BOOL && (strcmp(s, "true") == 0 || strcmp(s, "false") == 0)) {
    v.kind = V_BOOL;
    v.b = s[0] == 't';
  } else if ((t == KT_INT || t == KT_NUM) && *s && !strchr(" \t\n", *s)) {
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (*end == 0 && errno == 0) return (value){.kind = V_INT, .i = i};
    double d = strtod(s, &end);
    if (*end == 0) return (value){.kind = V_FLOAT, .d = d};
  }
  return v;
}

int moegen_config_set(moegen_config *c, const char *assignment, int argpos, moegen_error *err) {
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment)
    return fail_at(err, EX_USAGE, ORIGIN_COMMAND_LINE, argpos, NULL,
                   "expected key=value, got \"%s\"%s", assignment,
                   eq ? " (the key is empty)" : "");
  int f = find_key(assignment, (size_t)(eq - assignment));
  if (f < 0)
    return fail_at(err, EX_USAGE, ORIGIN_COMMAND_LINE, argpos, NULL,
                   "%.*s: unknown config key", (int)(eq - assignment), assignment);
  value v = value_of_text(keys[f].type, eq + 1);
  return store(c, (moegen_field)f, &v, ORIGIN_COMMAND_LINE, argpos, err);
}

/* ---------------------------------------------------------------- Lua files: limits */

typedef struct lua_budget {
  size_t memory;     /* bytes the state holds */
  long hook_calls;   /* count-hook calls so far (LUA_HOOK_STEP instructions each) */
} lua_budget;

/* lua_Alloc: realloc that refuses to grow the state past LUA_MEMORY_LIMIT. */
static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  lua_budget *b = ud;
  size_t old = ptr ? osize : 0; /* with ptr NULL, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    b->memory -= old;
    return NULL;
  }
  if (nsize > old && nsize - old > LUA_MEMORY_LIMIT - b->memory) return NULL;
  void *block = realloc(ptr, nsize);
  if (block) b->memory = b->memory - old + nsize;
  return block;
}

/* Count hook: raises ":LINE: instruction limit exceeded" once the chunk has
 * run LUA_INSTRUCTION_LIMIT instructions. */
static void budget_hook(lua_State *L, lua_Debug *ar) {
  void *ud;
  lua_getallocf(L, &ud);
  if (++((lua_budget *)ud)->hook_calls < LUA_INSTRUCTION_LIMIT / LUA_HOOK_STEP) return;
  lua_getinfo(L, "l", ar);
  lua_pushfstring(L, ":%d: instruction limit exceeded (%d instructions; runaway loop?)",
                  ar->currentline, LUA_INSTRUCTION_LIMIT);
  lua_error(L);
}

/* ---------------------------------------------------------------- Lua files: key lines */

static bool is_ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* Skips the quoted string starting at p (a quote); counts its newlines. */
static const char *skip_string(const char *p, int *line) {
  char quote = *p++;
  for (; *p && *p != quote && *p != '\n'; p++) {
    if (*p == '\\' && p[1]) {
      if (p[1] == '\n') ++*line;
      p++;
    }
  }
  return *p == quote ? p + 1 : p;
}

/* Whether the identifier `key` appears at p, assigned to (`key =`). */
static bool assigns_key(const char *text, const char *p, const char *key, size_t n) {
  if ((p > text && is_ident_char(p[-1])) || strncmp(p, key, n) != 0 || is_ident_char(p[n]))
    return false;
  for (p += n; *p == ' ' || *p == '\t'; p++) continue;
  return p[0] == '=' && p[1] != '=';
}

/* 1-based line of the last `key =` in Lua text outside strings and short
 * comments, or 0. The last, because in a table constructor the last
 * assignment of a key wins, and a `local key = ...` comes before the table.
 * Good enough for configs written by hand. */
static int lua_key_line(const char *text, const char *key) {
  size_t n = strlen(key);
  int line = 1, found = 0;
  for (const char *p = text; *p;) {
    if (*p == '\n') {
      line++;
      p++;
    } else if (p[0] == '-' && p[1] == '-') {
      while (*p && *p != '\n') p++;
    } else if (*p == '"' || *p == '\'') {
      p = skip_string(p, &line);
    } else {
      if (assigns_key(text, p, key, n)) found = line;
      p++;
    }
  }
  return found;
}

/* ---------------------------------------------------------------- Lua files: running */

typedef struct lua_job {
  moegen_config *cfg; /* receives the keys */
  const char *text;   /* the file's contents, NUL-terminated */
  size_t size;
  const char *path;
  moegen_error *err;
  int rc;             /* 0 or a sysexits code with err filled */
} lua_job;

/* Records the chunk's failure (status, message on top of the stack). Lua
 * positions come out as ":LINE: msg" (the chunk name is empty), so the path
 * goes in front. */
static void chunk_error(lua_State *L, lua_job *j, int status) {
  const char *msg = lua_tostring(L, -1);
  j->rc = EX_DATAERR;
  if (status == LUA_ERRMEM)
    fail_at(j->err, j->rc, j->path, 0, NULL, "memory limit exceeded (%u MiB)",
            LUA_MEMORY_LIMIT >> 20);
  else if (!msg)
    fail_at(j->err, j->rc, j->path, 0, NULL, "error object is a %s value", luaL_typename(L, -1));
  else if (msg[0] == ':')
    snprintf(j->err->msg, sizeof j->err->msg, "%s%s", j->path, msg);
  else
    fail_at(j->err, j->rc, j->path, 0, NULL, "%s", msg);
  j->err->code = j->rc;
}

/* Pushes the chunk's environment: a table holding only `math` (a copy of
 * the math library without random and randomseed, which would make a
 * config nondeterministic). */
static void push_env(lua_State *L) {
  lua_newtable(L);
  luaL_requiref(L, "math", luaopen_math, 0);
  lua_newtable(L);
  for (lua_pushnil(L); lua_next(L, -3);) {
    const char *name = lua_tostring(L, -2);
    if (strcmp(name, "random") != 0 && strcmp(name, "randomseed") != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    } else {
      lua_pop(L, 1);
    }
  }
  lua_remove(L, -2);
  lua_setfield(L, -2, "math");
}

/* The value at stack index idx as a raw config value. */
static value value_of_lua(lua_State *L, int idx) {
  value v = {.kind = V_OTHER, .s = luaL_typename(L, idx)};
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) return (value){.kind = V_INT, .i = lua_tointeger(L, idx)};
    return (value){.kind = V_FLOAT, .d = lua_tonumber(L, idx)};
  case LUA_TBOOLEAN: return (value){.kind = V_BOOL, .b = lua_toboolean(L, idx)};
  case LUA_TSTRING: v.kind = V_STRING; v.s = lua_tolstring(L, idx, &v.len); break;
  }
  return v;
}

/* Checks that every key of the table on top is a config key. Of several
 * unknown keys, reports the one on the first line (table order is not
 * stable). */
static int check_keys(lua_State *L, lua_job *j) {
  const char *bad = NULL;
  int bad_line = 0;
  for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      return fail_at(j->err, EX_DATAERR, j->path, 0, NULL,
                     "the returned table has a %s key; config keys are names",
                     luaL_typename(L, -2));
    size_t len;
    const char *key = lua_tolstring(L, -2, &len);
    if (find_key(key, len) >= 0) continue;
    int line = lua_key_line(j->text, key);
    if (!bad || (line > 0 && (bad_line == 0 || line < bad_line)) ||
        (line == bad_line && strcmp(key, bad) < 0)) {
      bad = key;
      bad_line = line;
    }
  }
  if (bad) return fail_at(j->err, EX_DATAERR, j->path, bad_line, bad, "unknown config key");
  return 0;
}

/* Stores every config key of the table on top into j->cfg. */
static int apply_table(lua_State *L, lua_job *j) {
  int rc = check_keys(L, j);
  for (int f = 0; rc == 0 && f < MOEGEN_F_COUNT; f++) {
    if (lua_getfield(L, -1, keys[f].key) != LUA_TNIL) {
      value v = value_of_lua(L, -1);
      rc = store(j->cfg, (moegen_field)f, &v, j->path, lua_key_line(j->text, keys[f].key), j->err);
    }
    lua_pop(L, 1);
  }
  return rc;
}

/* lua_CFunction run in protected mode: loads and runs the chunk of the job
 * (argument 1, a light userdata), then applies the table it returns. */
static int run_job(lua_State *L) {
  lua_job *j = lua_touserdata(L, 1);
  int status = luaL_loadbufferx(L, j->text, j->size, "=", "t");
  if (status == LUA_OK) {
    push_env(L);
    lua_setupvalue(L, -2, 1);
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, LUA_HOOK_STEP);
    status = lua_pcall(L, 0, 1, 0);
    lua_sethook(L, NULL, 0, 0);
  }
  if (status != LUA_OK) {
    chunk_error(L, j, status);
  } else if (!lua_istable(L, -1)) {
    j->rc = fail_at(j->err, EX_DATAERR, j->path, 0, NULL,
                    "the chunk must return a table of config keys, not a %s value",
                    luaL_typename(L, -1));
  } else {
    j->rc = apply_table(L, j);
  }
  return 0;
}

int moegen_config_load_lua(moegen_config *c, const char *path, moegen_error *err) {
  size_t size;
  char *text = moegen_read_file(path, &size);
  if (!text) return fail_at(err, EX_NOINPUT, path, 0, NULL, "cannot read: %s", strerror(errno));
  lua_budget budget = {0, 0};
  lua_State *L = lua_newstate(budget_alloc, &budget);
  moegen_config tmp = *c;
  lua_job job = {&tmp, text, size, path, err, 0};
  if (!L) {
    job.rc = fail_at(err, EX_OSERR, path, 0, NULL, "cannot create a Lua state");
  } else {
    lua_pushcfunction(L, run_job);
    lua_pushlightuserdata(L, &job);
    int status = lua_pcall(L, 1, 0, 0);
    if (status != LUA_OK) chunk_error(L, &job, status);
    lua_close(L);
  }
  free(text);
  if (job.rc == 0) *c = tmp;
  return job.rc;
}

/* ---------------------------------------------------------------- validation */

/* Fills err with "ORIGIN-OF-f: key: reason" and returns code. */
static int reject(moegen_error *err, int code, const moegen_config *c, moegen_field f,
                  const char *fmt, ...) {
  char reason[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  const moegen_origin *o = &c->origin[f];
  return fail_at(err, code, o->file, o->line, keys[f].key, "%s%s", reason,
                 strcmp(o->file, MOEGEN_ORIGIN_DEFAULT) == 0 ? " (not set)" : "");
}

static int check_name(const moegen_config *c, moegen_error *err) {
  size_t len = strnlen(c->name, sizeof c->name);
  if (len == sizeof c->name)
    return reject(err, EX_DATAERR, c, MOEGEN_F_NAME, "not NUL-terminated");
  char why[128];
  int code = name_problem(c->name, len, why, sizeof why);
  return code ? reject(err, code, c, MOEGEN_F_NAME, "%s", why) : 0;
}

/* Ungrouped, the router spreads E experts over up to a warp's lanes
 * (MOEGEN_MAX_GROUPS of them), at most MOEGEN_MAX_EXPERTS_PER_LANE each. */
_Static_assert(MOEGEN_MAX_EXPERTS <= MOEGEN_MAX_GROUPS * MOEGEN_MAX_EXPERTS_PER_LANE,
               "MOEGEN_MAX_EXPERTS experts do not fit a warp's lanes");

static int check_sizes(const moegen_config *c, moegen_error *err) {
  if (c->experts < 1 || c->experts > MOEGEN_MAX_EXPERTS)
    return reject(err, EX_CONFIG, c, MOEGEN_F_EXPERTS, "must be in 1..%d, got %d",
                  MOEGEN_MAX_EXPERTS, c->experts);
  if (c->topk < 1)
    return reject(err, EX_CONFIG, c, MOEGEN_F_TOPK, "must be at least 1, got %d", c->topk);
  if (c->topk > MOEGEN_MAX_TOPK)
    return reject(err, EX_CONFIG, c, MOEGEN_F_TOPK, "%d exceeds the kernel limit of %d", c->topk,
                  MOEGEN_MAX_TOPK);
  if (c->topk > c->experts)
    return reject(err, EX_CONFIG, c, MOEGEN_F_TOPK, "%d exceeds experts (%d)", c->topk,
                  c->experts);
  if (c->hidden < 1)
    return reject(err, EX_CONFIG, c, MOEGEN_F_HIDDEN, "must be > 0, got %d", c->hidden);
  if (c->hidden > MOEGEN_MAX_DIM)
    return reject(err, EX_CONFIG, c, MOEGEN_F_HIDDEN, "%d exceeds the kernel limit of %d",
                  c->hidden, MOEGEN_MAX_DIM);
  if (c->ffn < 1) return reject(err, EX_CONFIG, c, MOEGEN_F_FFN, "must be > 0, got %d", c->ffn);
  if (c->ffn > MOEGEN_MAX_DIM)
    return reject(err, EX_CONFIG, c, MOEGEN_F_FFN, "%d exceeds the kernel limit of %d", c->ffn,
                  MOEGEN_MAX_DIM);
  return 0;
}

static int check_score(const moegen_config *c, moegen_error *err) {
  if ((unsigned)c->score >= COUNT_OF(score_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_SCORE, "invalid enum value %d", (int)c->score);
  if (c->pre_softmax && c->score != MOEGEN_SCORE_SOFTMAX)
    return reject(err, EX_CONFIG, c, MOEGEN_F_PRE_SOFTMAX,
                  "only valid with score = \"softmax\" (score is \"%s\"; TE ignores it and "
                  "forces it to false); set pre_softmax = false",
                  score_names[c->score]);
  if (c->expert_bias && c->score == MOEGEN_SCORE_SOFTMAX)
    return reject(err, EX_CONFIG, c, MOEGEN_F_EXPERT_BIAS,
                  "only valid with score = \"sigmoid\" or \"sqrtsoftplus\" (score is \"softmax\")");
  return 0;
}

/* Quantile balancing (SPEC 3): TE's constraints. */
static int check_qb(const moegen_config *c, moegen_error *err) {
  if (!c->quantile_balancing) return 0;
  if (c->score != MOEGEN_SCORE_SIGMOID)
    return reject(err, EX_CONFIG, c, MOEGEN_F_QUANTILE_BALANCING,
                  "needs score = \"sigmoid\" (score is \"%s\")", score_names[c->score]);
  if (!c->expert_bias)
    return reject(err, EX_CONFIG, c, MOEGEN_F_QUANTILE_BALANCING, "needs expert_bias = true");
  if (c->groups || c->group_topk)
    return reject(err, EX_CONFIG, c, MOEGEN_F_QUANTILE_BALANCING,
                  "does not take group-limited routing (groups = %d, group_topk = %d)", c->groups,
                  c->group_topk);
  if (c->topk >= c->experts)
    return reject(err, EX_CONFIG, c, MOEGEN_F_QUANTILE_BALANCING,
                  "needs topk < experts (it selects topk + 1; topk = %d, experts = %d)", c->topk,
                  c->experts);
  return 0;
}

/* Whether the router can lay out a group (groups > 1): a warp's lanes
 * (MOEGEN_MAX_GROUPS) are shared by pow2_ceil(groups) group slots, and a
 * group spreads over a power of two of its slot's lanes that divides the
 * group's size, at most MOEGEN_MAX_EXPERTS_PER_LANE experts a lane
 * (templates/plan.lua router_plan; it takes fewer lanes only where each
 * then still holds fewer than 32). */
static int check_group_lanes(const moegen_config *c, moegen_error *err) {
  int size = c->experts / c->groups, slots = 1;
  while (slots < c->groups) slots *= 2;
  int most = MOEGEN_MAX_GROUPS / slots, lanes = most;
  while (size % lanes) lanes /= 2;
  if (size / lanes <= MOEGEN_MAX_EXPERTS_PER_LANE) return 0;
  return reject(err, EX_CONFIG, c, MOEGEN_F_GROUPS,
                "%d experts a group do not fit the router: a group's lanes are the largest power "
                "of two that divides %d and is at most %d (a warp's %d lanes over %d group slots), "
                "so %d lane%s of %d experts, over the %d a lane holds",
                size, size, most, MOEGEN_MAX_GROUPS, slots, lanes, lanes == 1 ? "" : "s",
                size / lanes, MOEGEN_MAX_EXPERTS_PER_LANE);
}

/* Group-limited routing: TE's checks, in TE's order, then the router's layout. */
static int check_groups(const moegen_config *c, moegen_error *err) {
  int E = c->experts, K = c->topk, g = c->groups, gk = c->group_topk;
  if (g < 0) return reject(err, EX_CONFIG, c, MOEGEN_F_GROUPS, "must be >= 0, got %d", g);
  if (gk < 0) return reject(err, EX_CONFIG, c, MOEGEN_F_GROUP_TOPK, "must be >= 0, got %d", gk);
  if (g == 0 && gk == 0) return 0;
  if (g == 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUP_TOPK, "%d needs groups > 0 (groups = 0)", gk);
  if (gk == 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUPS, "%d needs group_topk > 0 (group_topk = 0)",
                  g);
  if (K % gk != 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUP_TOPK,
                  "topk (%d) is not a multiple of group_topk (%d)", K, gk);
  if (gk > g)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUP_TOPK, "%d exceeds groups (%d)", gk, g);
  if (g > MOEGEN_MAX_GROUPS)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUPS,
                  "%d exceeds the %d groups the router kernel supports", g, MOEGEN_MAX_GROUPS);
  if (E % g != 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUPS,
                  "experts (%d) is not a multiple of groups (%d)", E, g);
  if (K / gk > E / g)
    return reject(err, EX_CONFIG, c, MOEGEN_F_GROUP_TOPK,
                  "topk/group_topk = %d experts per kept group exceeds experts/groups = %d",
                  K / gk, E / g);
  return g > 1 ? check_group_lanes(c, err) : 0;
}

static int check_numbers(const moegen_config *c, moegen_error *err) {
  if (!isfinite(c->scaling))
    return reject(err, EX_CONFIG, c, MOEGEN_F_SCALING, "must be finite, got %g", c->scaling);
  if (c->scaling <= 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_SCALING,
                  "must be > 0, got %g (on 0, TE multiplies the probs by 0 while its reference "
                  "does not scale at all; use 1 for no scaling)",
                  c->scaling);
  float kernel_scaling;
  if (!moegen_float_of(c->scaling, &kernel_scaling))
    return reject(err, EX_CONFIG, c, MOEGEN_F_SCALING,
                  "must round to a normal float (%.9g to %.9g; the kernels compute in float), "
                  "got %g",
                  FLT_MIN, FLT_MAX, c->scaling);
  if (c->shared_experts < 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_SHARED_EXPERTS, "must be >= 0, got %d",
                  c->shared_experts);
  if (!isfinite(c->aux_loss_coeff) || c->aux_loss_coeff < 0)
    return reject(err, EX_CONFIG, c, MOEGEN_F_AUX_LOSS_COEFF, "must be finite and >= 0, got %g",
                  c->aux_loss_coeff);
  return 0;
}

static int check_dtypes(const moegen_config *c, moegen_error *err) {
  if ((unsigned)c->logits_dtype >= COUNT_OF(dtype_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_LOGITS_DTYPE, "invalid enum value %d",
                  (int)c->logits_dtype);
  if ((unsigned)c->dtype >= COUNT_OF(dtype_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_DTYPE, "invalid enum value %d", (int)c->dtype);
  if (c->dtype == MOEGEN_DTYPE_FP32)
    return reject(err, EX_CONFIG, c, MOEGEN_F_DTYPE, "must be \"bf16\" or \"fp16\", got \"fp32\"");
  if ((unsigned)c->router_bwd >= COUNT_OF(router_bwd_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_ROUTER_BWD, "invalid enum value %d",
                  (int)c->router_bwd);
  return 0;
}

/* Where field f was set, for a message about another field: " (set at
 * FILE:LINE)", or "" when no source set it. */
static void origin_note(const moegen_config *c, moegen_field f, char *buf, size_t size) {
  const moegen_origin *o = &c->origin[f];
  if (strcmp(o->file, MOEGEN_ORIGIN_DEFAULT) == 0)
    snprintf(buf, size, "%s", "");
  else if (o->line > 0 && strcmp(o->file, ORIGIN_COMMAND_LINE) == 0)
    snprintf(buf, size, " (set by command-line argument %d)", o->line);
  else if (o->line > 0)
    snprintf(buf, size, " (set at %s:%d)", o->file, o->line);
  else
    snprintf(buf, size, " (set by %s)", o->file);
}

/* The precision recipe (SPEC 5b). A sub-key belongs to one recipe
 * (fp8_grad_format to fp8_tensorwise, fp8_scale to fp8_block); with any
 * other it must keep its default, so that a config never says what its
 * kernels do not do (--print-config still lists it, at the default). */
static int check_recipe(const moegen_config *c, moegen_error *err) {
  if ((unsigned)c->recipe >= COUNT_OF(recipe_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_RECIPE, "invalid enum value %d", (int)c->recipe);
  if ((unsigned)c->fp8_grad_format >= COUNT_OF(grad_format_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_FP8_GRAD_FORMAT, "invalid enum value %d",
                  (int)c->fp8_grad_format);
  if ((unsigned)c->fp8_scale >= COUNT_OF(scale_names))
    return reject(err, EX_DATAERR, c, MOEGEN_F_FP8_SCALE, "invalid enum value %d",
                  (int)c->fp8_scale);
  const char *recipe = recipe_names[c->recipe];
  char at[320];
  origin_note(c, MOEGEN_F_RECIPE, at, sizeof at);
  if (c->fp8_grad_format != MOEGEN_FP8_GRAD_HYBRID && c->recipe != MOEGEN_RECIPE_FP8_TENSORWISE)
    return reject(err, EX_CONFIG, c, MOEGEN_F_FP8_GRAD_FORMAT,
                  "\"%s\" only applies to recipe = \"fp8_tensorwise\" (recipe is \"%s\"%s%s); "
                  "leave it at \"hybrid\"",
                  grad_format_names[c->fp8_grad_format], recipe, at,
                  c->recipe == MOEGEN_RECIPE_FP8_BLOCK ? ", which is E4M3 throughout" : "");
  if (c->fp8_scale != MOEGEN_FP8_SCALE_POW2 && c->recipe != MOEGEN_RECIPE_FP8_BLOCK)
    return reject(err, EX_CONFIG, c, MOEGEN_F_FP8_SCALE,
                  "\"%s\" only applies to recipe = \"fp8_block\" (recipe is \"%s\"%s%s); leave "
                  "it at \"pow2\"",
                  scale_names[c->fp8_scale], recipe, at,
                  c->recipe == MOEGEN_RECIPE_FP8_TENSORWISE
                      ? ", whose scale is always FP8_MAX / amax in fp32, as TE's current scaling"
                      : "");
  if (c->recipe == MOEGEN_RECIPE_BF16) return 0;
  if (c->dtype != MOEGEN_DTYPE_BF16)
    return reject(err, EX_CONFIG, c, MOEGEN_F_DTYPE,
                  "must be \"bf16\" with recipe = \"%s\"%s (the FP8 recipes quantize bf16 "
                  "activations and write bf16 outputs), got \"%s\"",
                  recipe, at, dtype_names[c->dtype]);
  if (c->recipe != MOEGEN_RECIPE_FP8_BLOCK) return 0;
  static const moegen_field dims[] = {MOEGEN_F_HIDDEN, MOEGEN_F_FFN};
  for (size_t i = 0; i < COUNT_OF(dims); i++) {
    int v = dims[i] == MOEGEN_F_HIDDEN ? c->hidden : c->ffn;
    if (v % MOEGEN_FP8_BLOCK)
      return reject(err, EX_CONFIG, c, dims[i],
                    "%d is not a multiple of %d, which recipe = \"fp8_block\"%s needs (its "
                    "1x%d row tiles and %dx%d weight blocks)",
                    v, MOEGEN_FP8_BLOCK, at, MOEGEN_FP8_BLOCK, MOEGEN_FP8_BLOCK, MOEGEN_FP8_BLOCK);
  }
  return 0;
}

int moegen_config_validate(const moegen_config *c, moegen_error *err) {
  int rc = check_name(c, err);
  if (!rc) rc = check_sizes(c, err);
  if (!rc) rc = check_score(c, err);
  if (!rc) rc = check_groups(c, err);
  if (!rc) rc = check_qb(c, err);
  if (!rc) rc = check_numbers(c, err);
  if (!rc) rc = check_dtypes(c, err);
  if (!rc) rc = check_recipe(c, err);
  return rc;
}

/* ---------------------------------------------------------------- Lua output */

/* snprintf-style appender: counts every byte, writes what fits. */
typedef struct sink {
  char *buf;
  size_t size, len;
} sink;

static void put(sink *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(s->len < s->size ? s->buf + s->len : NULL,
                    s->len < s->size ? s->size - s->len : 0, fmt, ap);
  va_end(ap);
  if (n > 0) s->len += (size_t)n;
}

/* Writes d as a Lua number that reads back to exactly d: the shortest %g
 * form, with ".0" when that looks like an integer; 1/0, -1/0, 0/0 otherwise. */
static void put_number(sink *s, double d) {
  char text[40];
  if (isnan(d)) {
    put(s, "0/0");
    return;
  }
  if (isinf(d)) {
    put(s, d > 0 ? "1/0" : "-1/0");
    return;
  }
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, d);
    if (strtod(text, NULL) == d) break;
  }
  put(s, "%s%s", text, strpbrk(text, ".e") ? "" : ".0");
}

/* Writes the first len bytes of str as a Lua string literal. */
static void put_string(sink *s, const char *str, size_t len) {
  put(s, "\"");
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)str[i];
    if (ch == '"' || ch == '\\')
      put(s, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      put(s, "\\%03d", ch);
    else
      put(s, "%c", ch);
  }
  put(s, "\"");
}

static void put_enum(sink *s, const char *name) { put_string(s, name, strlen(name)); }

static void put_field(sink *s, const moegen_config *c, moegen_field f) {
  const char *p = (const char *)c + keys[f].offset;
  put(s, "  %s = ", keys[f].key);
  switch (keys[f].type) {
  case KT_INT: put(s, "%d", *(const int *)p); break;
  case KT_NUM: put_number(s, *(const double *)p); break;
  case KT_BOOL: put(s, "%s", *(const bool *)p ? "true" : "false"); break;
  case KT_STR: put_string(s, p, strnlen(p, sizeof c->name)); break;
  case KT_ENUM: put_enum(s, enum_name(keys[f].values, *(const int *)p)); break;
  }
  put(s, ",\n");
}

size_t moegen_config_to_lua(const moegen_config *c, char *buf, size_t size) {
  sink s = {buf, size, 0};
  if (size > 0) buf[0] = 0;
  put(&s, "return {\n");
  for (int f = 0; f < MOEGEN_F_COUNT; f++) put_field(&s, c, (moegen_field)f);
  put(&s, "}\n");
  return s.len;
}
