/* gen/render.c -- config -> rendered module sources (moegen_render). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "moegen/moegen.h"
#include "render.h"

static const char *compile_mode_name(moegen_compile_mode m) {
  return m == MOEGEN_COMPILE_NVCC ? "nvcc" : m == MOEGEN_COMPILE_NVRTC ? "nvrtc" : "jit";
}

/* The kernel templates of a module and their compile units, rendered in
 * this order after module.cu.lt (header comment + prelude) into NAME.cu,
 * each inside the #if of its unit (and of the units in `also`, a bit per
 * unit, that use its device code; the template puts its kernels in the
 * right unit with `unit.NAME`). A template renders to nothing when the
 * config or arch does not call for its kernels. */
static const struct {
  const char *name;
  moegen_unit unit;
  unsigned also;
} kernel_templates[] = {
    {"router.cu.lt", MOEGEN_UNIT_ROUTER, 0},
    {"router_bwd.cu.lt", MOEGEN_UNIT_ROUTER_TRAIN, 0},
    {"aux_loss.cu.lt", MOEGEN_UNIT_ROUTER_TRAIN, 0},
    {"grouped_gemm_sm90.cu.lt", MOEGEN_UNIT_GEMM, 1u << MOEGEN_UNIT_GEMM_TRAIN},
    {"grouped_gemm_bwd_sm90.cu.lt", MOEGEN_UNIT_GEMM, 1u << MOEGEN_UNIT_GEMM_TRAIN}, /* uses ggemm:: */
    {"grouped_gemm_mma.cu.lt", MOEGEN_UNIT_GEMM, 1u << MOEGEN_UNIT_GEMM_TRAIN}, /* every other arch */
    {"permute.cu.lt", MOEGEN_UNIT_PERMUTE, 0},
};

/* Whether s holds anything but white space. */
static int has_code(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\n' && *s != '\t') return 1;
  return 0;
}

/* Appends a rendered kernel template to *cu inside the #if of the units in
 * `units` (a bit per unit; takes part). */
static int append_part(char **cu, char *part, unsigned units, moegen_error *err) {
  char open[256];
  static const char close[] = "#endif\n";
  int n = snprintf(open, sizeof open, "#if !defined(MOEGEN_UNIT)");
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++)
    if (units >> u & 1u) n += snprintf(open + n, sizeof open - (size_t)n, " || MOEGEN_UNIT == %d", u);
  n += snprintf(open + n, sizeof open - (size_t)n, " //");
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++)
    if (units >> u & 1u)
      n += snprintf(open + n, sizeof open - (size_t)n, " %s", moegen_unit_name((moegen_unit)u));
  snprintf(open + n, sizeof open - (size_t)n, "\n");
  size_t n0 = strlen(*cu), n1 = strlen(open), n2 = strlen(part);
  char *s = malloc(n0 + n1 + n2 + sizeof close);
  if (s) {
    memcpy(s, *cu, n0);
    memcpy(s + n0, open, n1);
    memcpy(s + n0 + n1, part, n2);
    memcpy(s + n0 + n1 + n2, close, sizeof close);
  }
  free(*cu);
  free(part);
  *cu = s;
  if (s) return 0;
  err->code = EX_OSERR;
  snprintf(err->msg, sizeof err->msg, "out of memory");
  return err->code;
}

/* Renders embedded template `name` into *out. */
static int render_file(moegen_sandbox *sb, const char *name, char **out, moegen_error *err) {
  const moegen_embedded_file *f = moegen_embedded_find(name);
  if (!f) {
    err->code = EX_SOFTWARE;
    snprintf(err->msg, sizeof err->msg, "templates/%s: not embedded in this moegen build", name);
    return err->code;
  }
  return moegen_sandbox_render(sb, name, f->data, out, err);
}

/* A copy of text with every "*" + "/" broken up, so it can sit in a C comment. */
static char *comment_safe(const char *text) {
  size_t n = strlen(text);
  char *s = malloc(2 * n + 1), *q = s;
  if (!s) return NULL;
  for (const char *p = text; *p; p++) {
    *q++ = *p;
    if (p[0] == '*' && p[1] == '/') *q++ = ' ';
  }
  *q = 0;
  return s;
}

/* One int field of a plan struct and its key in the Lua plan table. */
typedef struct plan_field {
  const char *key;
  size_t off;
} plan_field;

/* Reads plan.<table>.<key> of every field into the struct at p. */
static int read_fields(moegen_sandbox *sb, const char *table, const plan_field *fields, size_t n,
                       void *p, moegen_error *err) {
  for (size_t i = 0; i < n; i++) {
    char path[128];
    long v;
    snprintf(path, sizeof path, "plan.%s.%s", table, fields[i].key);
    int rc = moegen_sandbox_get_int(sb, path, &v, err);
    if (rc) return rc;
    *(int *)((char *)p + fields[i].off) = (int)v;
  }
  return 0;
}

#define READ_FIELDS(sb, table, fields, p, err) \
  read_fields(sb, table, fields, sizeof fields / sizeof fields[0], p, err)

/* Reads plan.<table> ("router", "router_small") into the runtime's plan
 * struct. */
static int read_router_plan(moegen_sandbox *sb, const moegen_config *cfg, const char *table,
                            moegen_router_plan *p, moegen_error *err) {
  static const plan_field fields[] = {
      {"experts", offsetof(moegen_router_plan, experts)},
      {"topk", offsetof(moegen_router_plan, topk)},
      {"threads", offsetof(moegen_router_plan, threads)},
      {"tokens_per_block", offsetof(moegen_router_plan, tokens_per_block)},
      {"smem_bytes", offsetof(moegen_router_plan, smem_bytes)},
      {"logits_dtype_id", offsetof(moegen_router_plan, logits_dtype)},
      {"max_warps_per_sm", offsetof(moegen_router_plan, max_warps_per_sm)},
  };
  memset(p, 0, sizeof *p);
  p->has_bias = cfg->expert_bias ? 1 : 0;
  p->qb = cfg->quantile_balancing ? 1 : 0;
  return READ_FIELDS(sb, table, fields, p, err);
}

/* Reads plan.router_bwd into the runtime's plan struct. */
static int read_router_bwd_plan(moegen_sandbox *sb, moegen_router_bwd_plan *p, moegen_error *err) {
  static const plan_field fields[] = {
      {"experts", offsetof(moegen_router_bwd_plan, experts)},
      {"topk", offsetof(moegen_router_bwd_plan, topk)},
      {"threads", offsetof(moegen_router_bwd_plan, threads)},
      {"tokens_per_block", offsetof(moegen_router_bwd_plan, tokens_per_block)},
      {"logits_dtype_id", offsetof(moegen_router_bwd_plan, grad_dtype)},
  };
  memset(p, 0, sizeof *p);
  return READ_FIELDS(sb, "router_bwd", fields, p, err);
}

/* Reads plan.aux into the runtime's plan struct. */
static int read_aux_plan(moegen_sandbox *sb, moegen_aux_plan *p, moegen_error *err) {
  static const plan_field fields[] = {
      {"experts", offsetof(moegen_aux_plan, experts)},
      {"topk", offsetof(moegen_aux_plan, topk)},
      {"threads", offsetof(moegen_aux_plan, threads)},
      {"tokens_per_block", offsetof(moegen_aux_plan, tokens_per_block)},
      {"logits_dtype_id", offsetof(moegen_aux_plan, logits_dtype)},
      {"loss_threads", offsetof(moegen_aux_plan, loss_threads)},
      {"loss_unroll", offsetof(moegen_aux_plan, loss_unroll)},
      {"loss_max_blocks", offsetof(moegen_aux_plan, loss_max_blocks)},
  };
  memset(p, 0, sizeof *p);
  return READ_FIELDS(sb, "aux", fields, p, err);
}

/* Reads plan.permute into the runtime's plan struct (experts = 0 when the
 * module has no permute kernels). */
static int read_permute_plan(moegen_sandbox *sb, moegen_permute_plan *p, moegen_error *err) {
  static const plan_field fields[] = {
      {"experts", offsetof(moegen_permute_plan, experts)},
      {"topk", offsetof(moegen_permute_plan, topk)},
      {"hidden", offsetof(moegen_permute_plan, hidden)},
      {"tile_tokens", offsetof(moegen_permute_plan, tile_tokens)},
      {"copy_threads", offsetof(moegen_permute_plan, copy_threads)},
      {"copy_group", offsetof(moegen_permute_plan, copy_group)},
      {"gather_threads", offsetof(moegen_permute_plan, gather_threads)},
      {"gather_group", offsetof(moegen_permute_plan, gather_group)},
      {"zero_chunk", offsetof(moegen_permute_plan, zero_chunk)},
      {"max_chunks", offsetof(moegen_permute_plan, max_chunks)},
  };
  memset(p, 0, sizeof *p);
  long supported;
  int rc = moegen_sandbox_get_int(sb, "plan.permute.supported", &supported, err);
  if (rc || !supported) return rc;
  return READ_FIELDS(sb, "permute", fields, p, err);
}

/* Reads plan.gemm (and each kernel's plan.gemm.NAME) into the runtime's plan struct. */
static int read_gemm_plan(moegen_sandbox *sb, moegen_gemm_plan *p, moegen_error *err) {
  static const plan_field top[] = {
      {"experts", offsetof(moegen_gemm_plan, experts)},
      {"supported", offsetof(moegen_gemm_plan, supported)},
      {"portable", offsetof(moegen_gemm_plan, portable)},
      {"tall_rows_per_expert", offsetof(moegen_gemm_plan, tall_rows_per_expert)},
  };
  static const plan_field fields[] = {
      {"n", offsetof(moegen_gemm_kernel_plan, n)},
      {"k", offsetof(moegen_gemm_kernel_plan, k)},
      {"bm", offsetof(moegen_gemm_kernel_plan, bm)},
      {"bn", offsetof(moegen_gemm_kernel_plan, bn)},
      {"bk", offsetof(moegen_gemm_kernel_plan, bk)},
      {"stages", offsetof(moegen_gemm_kernel_plan, stages)},
      {"threads", offsetof(moegen_gemm_kernel_plan, threads)},
      {"smem_bytes", offsetof(moegen_gemm_kernel_plan, smem_bytes)},
  };
  const struct {
    const char *name;
    moegen_gemm_kernel_plan *k;
  } kernels[] = {{"gemm1", &p->gemm1},           {"gemm2", &p->gemm2},
                 {"gemm1_tall", &p->gemm1_tall}, {"gemm2_tall", &p->gemm2_tall},
                 {"gemm1_dgrad", &p->gemm1_dgrad}, {"gemm2_dgrad", &p->gemm2_dgrad},
                 {"gemm1_wgrad", &p->gemm1_wgrad}, {"gemm2_wgrad", &p->gemm2_wgrad},
                 {"gemm1_glu", &p->gemm1_glu},
                 {"gemm1_dgrad_tall", &p->gemm1_dgrad_tall}, {"gemm2_dgrad_tall", &p->gemm2_dgrad_tall},
                 {"gemm1_glu_tall", &p->gemm1_glu_tall}};
  memset(p, 0, sizeof *p);
  int rc = READ_FIELDS(sb, "gemm", top, p, err);
  for (size_t g = 0; !rc && g < sizeof kernels / sizeof kernels[0]; g++) {
    char table[64];
    snprintf(table, sizeof table, "gemm.%s", kernels[g].name);
    rc = READ_FIELDS(sb, table, fields, kernels[g].k, err);
  }
  return rc;
}

int moegen_render(const moegen_config *cfg, const moegen_gen_options *opt, moegen_sources *out,
                  moegen_error *err) {
  memset(out, 0, sizeof *out);
  size_t n = moegen_config_to_lua(cfg, NULL, 0);
  out->config_lua = malloc(n + 1);
  if (!out->config_lua) {
    err->code = EX_OSERR;
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return err->code;
  }
  moegen_config_to_lua(cfg, out->config_lua, n + 1);
  out->command_line = comment_safe(opt->command_line ? opt->command_line : "(library call)");
  if (!out->command_line) {
    err->code = EX_OSERR;
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return err->code;
  }
  const char *kv[] = {"name", opt->name,
                      "arch", opt->arch,
                      "compile", compile_mode_name(opt->compile),
                      "version", MOEGEN_VERSION,
                      "command_line", out->command_line,
                      "config_lua", out->config_lua,
                      NULL};
  moegen_sandbox *sb = NULL;
  int rc = moegen_sandbox_open(&sb, 0, 0, err);
  if (!rc) rc = moegen_sandbox_set_config(sb, cfg, err);
  if (!rc) rc = moegen_sandbox_set_strings(sb, "opt", kv, err);
  char numbers[MOEGEN_UNIT_COUNT][8];
  const char *units[2 * MOEGEN_UNIT_COUNT + 1];
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++) {
    snprintf(numbers[u], sizeof numbers[u], "%d", u);
    units[2 * u] = moegen_unit_name((moegen_unit)u);
    units[2 * u + 1] = numbers[u];
  }
  units[2 * MOEGEN_UNIT_COUNT] = NULL;
  if (!rc) rc = moegen_sandbox_set_strings(sb, "unit", units, err); /* unit.gemm = "3" */
  if (!rc) {
    const moegen_embedded_file *plan = moegen_embedded_find("plan.lua");
    rc = moegen_sandbox_run(sb, "plan.lua", plan ? plan->data : "", "plan", err);
  }
  if (!rc) rc = render_file(sb, "module.cu.lt", &out->cu, err);
  for (size_t i = 0; !rc && i < sizeof kernel_templates / sizeof kernel_templates[0]; i++) {
    char *part = NULL;
    rc = render_file(sb, kernel_templates[i].name, &part, err);
    if (rc) break;
    if (!has_code(part)) {
      free(part);
      continue;
    }
    out->units |= 1u << kernel_templates[i].unit | kernel_templates[i].also;
    rc = append_part(&out->cu, part, 1u << kernel_templates[i].unit | kernel_templates[i].also, err);
  }
  if (!rc) rc = render_file(sb, "host.h.lt", &out->h, err);
  if (!rc) rc = render_file(sb, "host.c.lt", &out->c, err);
  if (!rc) rc = read_router_plan(sb, cfg, "router", &out->router, err);
  if (!rc) rc = read_router_plan(sb, cfg, "router_small", &out->router_small, err);
  if (!rc) rc = read_router_bwd_plan(sb, &out->router_bwd, err);
  if (!rc) rc = read_aux_plan(sb, &out->aux, err);
  if (!rc) rc = read_gemm_plan(sb, &out->gemm, err);
  if (!rc) rc = read_permute_plan(sb, &out->permute, err);
  moegen_sandbox_close(sb);
  if (rc) moegen_sources_free(out);
  return rc;
}

void moegen_sources_free(moegen_sources *s) {
  free(s->cu);
  free(s->h);
  free(s->c);
  free(s->config_lua);
  free(s->command_line);
  memset(s, 0, sizeof *s);
}
