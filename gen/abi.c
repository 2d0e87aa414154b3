/* gen/abi.c -- what the generator derives from moegen/abi.def (see abi.h). */
#include "abi.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

_Static_assert(sizeof(moegen_dtype) == sizeof(int), "plan fields are ints");

/* What a rendered layout check of struct `host` says (abi.layout_check
 * writes it, moegen_abi_check_source looks for it). */
#define LAYOUT_MARK "mirrors %s (moegen/abi.def)"

/* ---------------------------------------------------------------- plan fields */

enum { MAX_FIELDS = 256 };

typedef struct field_list {
  moegen_abi_field f[MAX_FIELDS];
  size_t n;
} field_list;

static void add_field(field_list *l, const char *prefix, const char *name, size_t offset) {
  if (l->n == MAX_FIELDS) abort(); /* abi.def outgrew MAX_FIELDS: raise it */
  moegen_abi_field *f = &l->f[l->n++];
  snprintf(f->path, sizeof f->path, "%s.%s", prefix, name);
  f->offset = offset;
}

/* visit_TYPE(l, prefix, base): adds the fields of the plan struct TYPE that
 * sits at offset base of moegen_image under path prefix. */
#define VISIT_INT(name) add_field(l, prefix, #name, base + offsetof(cur_t, name));
#define VISIT_SUB(type, name)                                        \
  {                                                                  \
    char sub[sizeof l->f[0].path];                                   \
    snprintf(sub, sizeof sub, "%s.%s", prefix, #name);               \
    visit_##type(l, sub, base + offsetof(cur_t, name));              \
  }
#define VISITOR(type, FIELDS)                                                   \
  static void visit_##type(field_list *l, const char *prefix, size_t base) {   \
    typedef type cur_t;                                                         \
    FIELDS(VISIT_INT, VISIT_INT, VISIT_SUB)                                     \
  }
MOEGEN_PLAN_STRUCTS(VISITOR)

static field_list g_fields;
static pthread_once_t g_fields_once = PTHREAD_ONCE_INIT;

static void build_fields(void) {
  field_list *l = &g_fields;
#define VISIT_MEMBER(type, member) visit_##type(l, #member, offsetof(moegen_image, member));
  MOEGEN_IMAGE_PLANS(VISIT_MEMBER)
}

const moegen_abi_field *moegen_abi_fields(size_t *count) {
  pthread_once(&g_fields_once, build_fields);
  *count = g_fields.n;
  return g_fields.f;
}

int moegen_abi_get(const moegen_image *image, const moegen_abi_field *f) {
  int v;
  memcpy(&v, (const char *)image + f->offset, sizeof v);
  return v;
}

static void set_field(moegen_image *image, const moegen_abi_field *f, int v) {
  memcpy((char *)image + f->offset, &v, sizeof v);
}

/* The field at `plan`.`name`, or NULL. */
static const moegen_abi_field *find_field(const char *plan, const char *name) {
  size_t n;
  const moegen_abi_field *f = moegen_abi_fields(&n);
  char path[sizeof f->path];
  snprintf(path, sizeof path, "%s.%s", plan, name);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(f[i].path, path)) return &f[i];
  return NULL;
}

int moegen_abi_read_plan(moegen_sandbox *sb, moegen_image *image, moegen_error *err) {
  size_t n;
  const moegen_abi_field *f = moegen_abi_fields(&n);
  for (size_t i = 0; i < n; i++) {
    char path[sizeof f->path + 8];
    long v;
    snprintf(path, sizeof path, "plan.%s", f[i].path);
    int rc = moegen_sandbox_get_int(sb, path, &v, err);
    if (rc) return rc;
    if (v < INT_MIN || v > INT_MAX) { /* not cut short: the image's fields are ints */
      snprintf(err->msg, sizeof err->msg, "%s = %ld does not fit an int image field", path, v);
      return err->code = EX_SOFTWARE;
    }
    set_field(image, &f[i], (int)v);
  }
  return 0;
}

/* ---------------------------------------------------------------- kernels */

#define SMEM_FIELD_smem_bytes "smem_bytes"
#define SMEM_FIELD_none NULL
#define KERNEL_ROW(ID, name, UNIT, plan, threads, smem, sig) \
  {"moegen_" #name, MOEGEN_UNIT_##UNIT, #plan, #threads, SMEM_FIELD_##smem, #sig},
const moegen_abi_kernel moegen_abi_kernels[] = {MOEGEN_KERNELS(KERNEL_ROW)};
const size_t moegen_abi_kernel_count = sizeof moegen_abi_kernels / sizeof moegen_abi_kernels[0];

void moegen_abi_kernel_shape(const moegen_image *image, const moegen_abi_kernel *k, int *threads,
                             int *smem) {
  const moegen_abi_field *t = find_field(k->plan, k->threads);
  const moegen_abi_field *s = k->smem ? find_field(k->plan, k->smem) : NULL;
  *threads = image->units >> k->unit & 1u ? moegen_abi_get(image, t) : 0;
  *smem = s && *threads ? moegen_abi_get(image, s) : 0;
}

int moegen_abi_present(const moegen_image *image, const char *name) {
  for (size_t i = 0; i < moegen_abi_kernel_count; i++) {
    int threads, smem;
    if (strcmp(moegen_abi_kernels[i].name, name)) continue;
    moegen_abi_kernel_shape(image, &moegen_abi_kernels[i], &threads, &smem);
    return threads > 0;
  }
  return 0;
}

/* ---------------------------------------------------------------- signatures */

enum { PK_VALUE, PK_OPERAND, PK_VALUE_SM90, PK_OPERAND_SM90 };

typedef struct abi_param {
  const char *type, *name;
  int kind;
} abi_param;

#define SIG_P(type, name) {#type, #name, PK_VALUE},
#define SIG_O(name) {"moegen_gemm_operand", #name, PK_OPERAND},
#define SIG_P90(type, name) {#type, #name, PK_VALUE_SM90},
#define SIG_O90(name) {"moegen_gemm_operand", #name, PK_OPERAND_SM90},
#define SIG_ARRAY(sig, params) static const abi_param sig_##sig[] = {params};
MOEGEN_SIGNATURES(SIG_ARRAY, SIG_P, SIG_O, SIG_P90, SIG_O90)

typedef struct abi_signature {
  const char *name;
  const abi_param *params;
  size_t count;
} abi_signature;

#define SIG_ROW(sig, params) {#sig, sig_##sig, sizeof sig_##sig / sizeof sig_##sig[0]},
static const abi_signature signatures[] = {MOEGEN_SIGNATURES(SIG_ROW, SIG_P, SIG_O, SIG_P90, SIG_O90)};

static const abi_signature *find_signature(const char *name) {
  for (size_t i = 0; i < sizeof signatures / sizeof signatures[0]; i++)
    if (!strcmp(signatures[i].name, name)) return &signatures[i];
  return NULL;
}

/* The kind of a parameter type as the kernel sees it: a pointer, one of
 * the scalars, or a by-value aggregate (a struct or a tensor map). */
static const char *type_class(const char *type) {
  if (strchr(type, '*')) return "pointer";
  char t[128];
  size_t n = 0;
  for (const char *p = type; *p && n + 1 < sizeof t;) { /* drop qualifiers and spaces */
    while (*p == ' ') p++;
    const char *w = p;
    while (*p && *p != ' ') p++;
    size_t len = (size_t)(p - w);
    if (len == 0) break;
    if ((len == 5 && !strncmp(w, "const", 5)) || (len == 17 && !strncmp(w, "__grid_constant__", 17)))
      continue;
    if (n && n + 1 < sizeof t) t[n++] = ' ';
    for (; w < p && n + 1 < sizeof t; w++) t[n++] = *w;
  }
  t[n] = 0;
  if (!strcmp(t, "int") || !strcmp(t, "int32_t")) return "int";
  if (!strcmp(t, "long long") || !strcmp(t, "int64_t")) return "int64";
  if (!strcmp(t, "float")) return "float";
  return "aggregate";
}

/* The parameters kernel sig declares on this path: names and classes. */
typedef struct expected_param {
  char name[40];
  const char *cls;
} expected_param;

static size_t expected_params(const abi_signature *sig, int portable, expected_param *out) {
  size_t n = 0;
  for (size_t i = 0; i < sig->count; i++) {
    const abi_param *p = &sig->params[i];
    int operand = p->kind == PK_OPERAND || p->kind == PK_OPERAND_SM90;
    if (portable && (p->kind == PK_VALUE_SM90 || p->kind == PK_OPERAND_SM90)) continue;
    snprintf(out[n].name, sizeof out[n].name, "%s%s", operand && !portable ? "m" : "", p->name);
    out[n].cls = operand ? (portable ? "pointer" : "aggregate") : type_class(p->type);
    n++;
  }
  return n;
}

/* A copy of s without its comments (string literals kept). */
static char *strip_comments(const char *s) {
  char *out = malloc(strlen(s) + 1), *q = out;
  if (!out) return NULL;
  while (*s) {
    if (s[0] == '/' && s[1] == '/') {
      while (*s && *s != '\n') s++;
    } else if (s[0] == '/' && s[1] == '*') {
      const char *e = strstr(s + 2, "*/");
      s = e ? e + 2 : s + strlen(s);
      *q++ = ' ';
    } else if (*s == '"') {
      *q++ = *s++;
      while (*s && *s != '"') {
        if (*s == '\\' && s[1]) *q++ = *s++;
        *q++ = *s++;
      }
      if (*s) *q++ = *s++;
    } else {
      *q++ = *s++;
    }
  }
  *q = 0;
  return out;
}

static const char *skip_space(const char *p) {
  while (isspace((unsigned char)*p)) p++;
  return p;
}

/* Past the parenthesized group at p ('(' expected); NULL if unbalanced. */
static const char *skip_parens(const char *p) {
  int depth = 0;
  for (; *p; p++) {
    if (*p == '(') depth++;
    if (*p == ')' && --depth == 0) return p + 1;
  }
  return NULL;
}

typedef struct declared_param {
  char name[40];
  char type[128];
} declared_param;

enum { MAX_PARAMS = 24 };

/* Splits the parameter list [p, end) into types and names. */
static size_t split_params(const char *p, const char *end, declared_param *out) {
  size_t n = 0;
  while (p < end && n < MAX_PARAMS) {
    const char *comma = p;
    int depth = 0;
    while (comma < end && !(depth == 0 && *comma == ',')) {
      if (*comma == '(' || *comma == '<') depth++;
      if (*comma == ')' || *comma == '>') depth--;
      comma++;
    }
    const char *e = comma;
    while (e > p && isspace((unsigned char)e[-1])) e--;
    const char *name = e;
    while (name > p && (isalnum((unsigned char)name[-1]) || name[-1] == '_')) name--;
    const char *b = skip_space(p);
    snprintf(out[n].name, sizeof out[n].name, "%.*s", (int)(e - name), name);
    snprintf(out[n].type, sizeof out[n].type, "%.*s", (int)(name > b ? name - b : 0), b);
    n++;
    p = comma < end ? comma + 1 : end;
  }
  return n;
}

static int fail(moegen_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(moegen_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  err->code = EX_SOFTWARE;
  return err->code;
}

/* Appends "a, b, c" of the names to buf. */
static void list_names(char *buf, size_t size, const char *const *names, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && used + 1 < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
}

/* Checks one rendered kernel against its table row. */
static int check_kernel(const moegen_abi_kernel *k, const declared_param *got, size_t ngot,
                        int portable, moegen_error *err) {
  const abi_signature *sig = find_signature(k->signature);
  expected_param want[MAX_PARAMS];
  size_t nwant = expected_params(sig, portable, want);
  size_t i = 0;
  while (i < nwant && i < ngot && !strcmp(want[i].name, got[i].name) &&
         !strcmp(want[i].cls, type_class(got[i].type)))
    i++;
  if (i == nwant && i == ngot) return 0;
  const char *a[MAX_PARAMS], *b[MAX_PARAMS];
  char wants[512], gots[512];
  for (size_t j = 0; j < nwant; j++) a[j] = want[j].name;
  for (size_t j = 0; j < ngot; j++) b[j] = got[j].name;
  list_names(wants, sizeof wants, a, nwant);
  list_names(gots, sizeof gots, b, ngot);
  char at[160];
  if (i < ngot && i < nwant)
    snprintf(at, sizeof at, "parameter %zu is %s (%s) where the table has %s (%s)", i + 1,
             got[i].name, type_class(got[i].type), want[i].name, want[i].cls);
  else if (i < nwant)
    snprintf(at, sizeof at, "parameter %zu, %s (%s), is missing", i + 1, want[i].name, want[i].cls);
  else
    snprintf(at, sizeof at, "parameter %zu, %s, is not in the table", i + 1, got[i].name);
  return fail(err, "%s: the rendered kernel declares (%s) but moegen/abi.def's %s signature is "
              "(%s)%s: %s", k->name, gots, k->signature, wants,
              portable ? " on the portable path" : "", at);
}

/* Fails unless the source checks the layout of each struct kernel k takes
 * by value (abi.layout_check's static_asserts). */
static int check_layouts(const moegen_abi_kernel *k, const char *text, moegen_error *err) {
  const abi_signature *sig = find_signature(k->signature);
  for (size_t i = 0; i < sig->count; i++) {
    if (strcmp(type_class(sig->params[i].type), "aggregate") || sig->params[i].kind != PK_VALUE) continue;
    char mark[160];
    snprintf(mark, sizeof mark, LAYOUT_MARK, sig->params[i].type);
    if (!strstr(text, mark))
      return fail(err, "%s: its parameter %s is a %s, but the source has no "
                  "abi.layout_check(..., \"%s\") after the template's struct", k->name,
                  sig->params[i].name, sig->params[i].type, sig->params[i].type);
  }
  return 0;
}

/* Fails unless the kernel whose extern "C" is at `at` sits in its own
 * abi.want guard: the nearest "#if MOEGEN_WANT(" above it names row id,
 * with no #endif between (so a per-kernel compile holds exactly it). */
static int check_guard(const char *text, const char *at, size_t id, const char *kname,
                       moegen_error *err) {
  static const char open[] = "#if MOEGEN_WANT(";
  const char *guard = NULL;
  for (const char *g = strstr(text, open); g && g < at; g = strstr(g + 1, open)) guard = g;
  long got = guard ? strtol(guard + sizeof open - 1, NULL, 10) : -1;
  const char *end = guard ? strstr(guard, "#endif") : NULL;
  if (guard && got == (long)id && !(end && end < at)) return 0;
  if (!guard || (end && end < at))
    return fail(err, "%s: its definition is not inside <%%= abi.want(...) %%> ... #endif", kname);
  return fail(err, "%s: it sits in MOEGEN_WANT(%ld), which is %s; its own id is %zu", kname, got,
              (size_t)got < moegen_abi_kernel_count ? moegen_abi_kernels[got].name : "no kernel", id);
}

int moegen_abi_check_source(const char *cu, const moegen_image *image, moegen_error *err) {
  static const char marker[] = "extern \"C\" __global__";
  char *text = strip_comments(cu);
  if (!text) return fail(err, "out of memory");
  int rc = 0;
  unsigned char seen[sizeof moegen_abi_kernels / sizeof moegen_abi_kernels[0]] = {0};
  for (const char *p = strstr(text, marker); p && !rc; p = strstr(p, marker)) {
    const char *at = p;
    p = skip_space(p + sizeof marker - 1);
    if (!strncmp(p, "void", 4)) p = skip_space(p + 4);
    if (!strncmp(p, "__launch_bounds__", 17)) {
      p = skip_parens(skip_space(p + 17));
      if (!p) break;
      p = skip_space(p);
    }
    const char *name = p;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    char kname[64];
    snprintf(kname, sizeof kname, "%.*s", (int)(p - name), name);
    p = skip_space(p);
    const char *close = *p == '(' ? skip_parens(p) : NULL;
    if (!close) {
      rc = fail(err, "%s: cannot read the rendered kernel's parameter list", kname);
      break;
    }
    size_t i = 0;
    while (i < moegen_abi_kernel_count && strcmp(moegen_abi_kernels[i].name, kname)) i++;
    if (i == moegen_abi_kernel_count) {
      rc = fail(err, "%s: a rendered extern \"C\" kernel that moegen/abi.def does not list", kname);
      break;
    }
    int threads, smem;
    moegen_abi_kernel_shape(image, &moegen_abi_kernels[i], &threads, &smem);
    if (threads == 0) {
      rc = fail(err, "%s: rendered, but plan.%s.%s = 0 says the module lacks it", kname,
                moegen_abi_kernels[i].plan, moegen_abi_kernels[i].threads);
      break;
    }
    if (seen[i]++) {
      rc = fail(err, "%s: rendered twice", kname);
      break;
    }
    rc = check_guard(text, at, i, kname, err);
    if (rc) break;
    declared_param got[MAX_PARAMS];
    size_t ngot = split_params(p + 1, close - 1, got);
    rc = check_kernel(&moegen_abi_kernels[i], got, ngot, image->gemm.portable, err);
    if (!rc) rc = check_layouts(&moegen_abi_kernels[i], text, err);
    p = close;
  }
  for (size_t i = 0; !rc && i < moegen_abi_kernel_count; i++) {
    int threads, smem;
    moegen_abi_kernel_shape(image, &moegen_abi_kernels[i], &threads, &smem);
    if (threads > 0 && !seen[i])
      rc = fail(err, "%s: plan.%s.%s = %d but no template rendered the kernel",
                moegen_abi_kernels[i].name, moegen_abi_kernels[i].plan, moegen_abi_kernels[i].threads,
                threads);
  }
  free(text);
  return rc;
}

/* ---------------------------------------------------------------- text output */

typedef struct text {
  char *s;
  size_t n, cap;
  int oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->n + (size_t)need + 1 > t->cap) {
    size_t cap = (t->cap ? 2 * t->cap : 4096) + (size_t)need;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->oom = 1;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n += (size_t)need;
}

static char *finish(text *t) {
  if (!t->oom && t->s) return t->s;
  free(t->s);
  return NULL;
}

/* The host layouts of the structs passed by value (abi.def). */
#define LAYOUT_FIELD(type, name) type name;
#define LAYOUT_STRUCT(type, FIELDS) typedef struct type { FIELDS(LAYOUT_FIELD) } type;
MOEGEN_PARAM_STRUCTS(LAYOUT_STRUCT)

/* abi.layout_check(device, host): static_asserts that the template's struct
 * `device` has abi.structs[host]'s size, and its fields, by name, in the
 * same order and of the same sizes (a structured binding of a value-
 * initialized struct, compared member by member in a constexpr lambda:
 * NVRTC has no offsetof). abi.want(name): the line that opens kernel
 * name's definition, "#if MOEGEN_WANT(id) // name" (prelude.cuh; id = its
 * row here), closed by an #endif after the kernel's body. */
static const char layout_check_lua[] =
    "function abi.layout_check(device, host)\n"
    "  local s = abi.structs[host]\n"
    "  if not s then error(\"abi.layout_check: \" .. tostring(host) .. \" is no struct of moegen/abi.def\", 2) end\n"
    "  local names, tests = {}, {}\n"
    "  for i, f in ipairs(s.fields) do\n"
    "    names[i] = f[1]\n"
    "    tests[i] = string.format('(const void *)&f%d == (const void *)&s.%s && sizeof(s.%s) == %d', i - 1, f[1], f[1], f[2])\n"
    "  end\n"
    "  local bind = {}\n"
    "  for i = 1, #names do bind[i] = 'f' .. (i - 1) end\n"
    "  return string.format('static_assert(sizeof(%s) == %d, \"%s " LAYOUT_MARK "\");\\n' ..\n"
    "    'static_assert([] {\\n  %s s{};\\n  auto &[%s] = s;\\n  return %s;\\n}(), \"%s: fields %s in this order and size\");',\n"
    "    device, s.size, device, host, device, table.concat(bind, ', '), table.concat(tests, ' &&\\n         '), device, table.concat(names, ', '))\n"
    "end\n"
    "function abi.want(name)\n"
    "  local k = abi.kernels[tostring(name):gsub('^moegen_', '')]\n"
    "  if not k then error(\"abi.want: \" .. tostring(name) .. \" is no kernel of moegen/abi.def\", 2) end\n"
    "  return string.format('#if MOEGEN_WANT(%d) // %s', k.id, k.name)\n"
    "end\n"
    "return abi\n";

int moegen_abi_export(moegen_sandbox *sb, moegen_error *err) {
  text t = {0};
  /* The moegen/types.h lists as Lua tables: " name = value," each. */
#define LUA_DTYPE(e, name, value, bytes) " " #name " = " #value ","
#define LUA_DTYPE_BYTES(e, name, value, bytes) " " #name " = " #bytes ","
#define LUA_NAMED(e, name, value) " " #name " = " #value "," /* the (e, name, value) lists */
#define LUA_FP8(e, name, value, max) " " #name " = " #value ","
#define LUA_FP8_MAX(e, name, value, max) " " #name " = " #max ","
  static const char *const tables[][2] = {
      {"dtype", MOEGEN_DTYPES(LUA_DTYPE)},           {"dtype_bytes", MOEGEN_DTYPES(LUA_DTYPE_BYTES)},
      {"score", MOEGEN_SCORES(LUA_NAMED)},           {"index_dtype", MOEGEN_INDEX_DTYPES(LUA_NAMED)},
      {"count_dtype", MOEGEN_COUNT_DTYPES(LUA_NAMED)}, {"router_bwd", MOEGEN_ROUTER_BWDS(LUA_NAMED)},
      {"limits", MOEGEN_LIMITS(LUA_NAMED)},
      {"recipe", MOEGEN_RECIPES(LUA_NAMED)},         {"fp8_grad_format", MOEGEN_FP8_GRAD_FORMATS(LUA_NAMED)},
      {"fp8_scale", MOEGEN_FP8_SCALES(LUA_NAMED)},   {"fp8_format", MOEGEN_FP8_FORMATS(LUA_FP8)},
      {"fp8_max", MOEGEN_FP8_FORMATS(LUA_FP8_MAX)}};
  put(&t, "local abi = {\n");
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
    put(&t, "  %s = {%s },\n", tables[i][0], tables[i][1]);
  put(&t, "  kernels = {\n");
  for (size_t i = 0; i < moegen_abi_kernel_count; i++) {
    const moegen_abi_kernel *k = &moegen_abi_kernels[i];
    const abi_signature *sig = find_signature(k->signature);
    put(&t, "    %s = { id = %zu, name = \"%s\", unit = %d, plan = \"%s\", params = {",
        k->name + 7, i, k->name, (int)k->unit, k->plan);
    for (size_t j = 0; j < sig->count; j++) {
      const abi_param *p = &sig->params[j];
      put(&t, " { name = \"%s\", operand = %s, sm90_only = %s },", p->name,
          p->kind == PK_OPERAND || p->kind == PK_OPERAND_SM90 ? "true" : "false",
          p->kind == PK_VALUE_SM90 || p->kind == PK_OPERAND_SM90 ? "true" : "false");
    }
    put(&t, " } },\n");
  }
  put(&t, "  },\n  structs = {\n");
#define LUA_FIELD(type, name) put(&t, " { \"%s\", %zu },", #name, sizeof(((cur_t *)0)->name));
#define LUA_STRUCT(type, FIELDS)                                                          \
  {                                                                                       \
    typedef type cur_t;                                                                   \
    put(&t, "    %s = { size = %zu, fields = {", #type, sizeof(cur_t));                   \
    FIELDS(LUA_FIELD)                                                                     \
    put(&t, " } },\n");                                                                   \
  }
  MOEGEN_PARAM_STRUCTS(LUA_STRUCT)
  put(&t, "  },\n}\n%s", layout_check_lua);
  char *code = finish(&t);
  if (!code) return fail(err, "out of memory");
  int rc = moegen_sandbox_run(sb, "abi (moegen/abi.def)", code, "abi", err);
  free(code);
  return rc;
}

char *moegen_abi_image_c(const moegen_image *image, const moegen_gen_options *opt) {
  const char *n = opt->name;
  int jit = opt->compile == MOEGEN_COMPILE_JIT;
  text t = {0};
  put(&t, "/* The image: what moegen_module_create needs (moegen/abi.def lists its plan fields). */\n");
  put(&t, "const moegen_image %s_image = {\n", n);
  put(&t, "  .abi_version = %d, /* MOEGEN_RT_ABI_VERSION of the generator */\n", image->abi_version);
  put(&t, "  .name = \"%s\",\n  .arch = \"%s\",\n  .config_lua = %s_config_lua,\n", n, opt->arch, n);
  put(&t, "  .units = 0x%x,\n", image->units);
  if (jit) put(&t, "  .cubins = NULL,\n  .cubin_sizes = NULL,\n");
  else put(&t, "  .cubins = %s_cubins,\n  .cubin_sizes = %s_cubin_sizes,\n", n, n);
  put(&t, "  .source = %s_source,\n  .source_size = sizeof %s_source - 1,\n", n, n);
  put(&t, "  .source_path = \"%s.cu\",\n", n);
  size_t count;
  const moegen_abi_field *f = moegen_abi_fields(&count);
  for (size_t i = 0; i < count; i++) put(&t, "  .%s = %d,\n", f[i].path, moegen_abi_get(image, &f[i]));
  put(&t, "};\n");
  return finish(&t);
}

int moegen_abi_image_diff(const moegen_image *a, const moegen_image *b, char *why, size_t size) {
  int diffs = 0;
  if (size) why[0] = 0;
  if (a->abi_version != b->abi_version && !diffs++)
    snprintf(why, size, "abi_version: %d vs %d", a->abi_version, b->abi_version);
  if (a->units != b->units && !diffs++) snprintf(why, size, "units: 0x%x vs 0x%x", a->units, b->units);
  size_t count;
  const moegen_abi_field *f = moegen_abi_fields(&count);
  for (size_t i = 0; i < count; i++) {
    int x = moegen_abi_get(a, &f[i]), y = moegen_abi_get(b, &f[i]);
    if (x != y && !diffs++) snprintf(why, size, "%s: %d vs %d", f[i].path, x, y);
  }
  return diffs;
}
