/* gen/render.c -- config -> rendered module sources (moegen_render). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "abi.h"
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
    {"grouped_gemm_fp8_sm90.cu.lt", MOEGEN_UNIT_GEMM, 0}, /* fp8_block; uses ggemm:: */
    {"grouped_gemm_mma.cu.lt", MOEGEN_UNIT_GEMM, 1u << MOEGEN_UNIT_GEMM_TRAIN}, /* every other arch */
    {"permute.cu.lt", MOEGEN_UNIT_PERMUTE, 0},
    {"permute_fp8.cu.lt", MOEGEN_UNIT_PERMUTE, 0}, /* fp8_block only */
    {"quant.cu.lt", MOEGEN_UNIT_QUANT, 0}, /* FP8 recipes only */
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
  if (!rc) rc = moegen_abi_export(sb, err);
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
    out->image.units |= 1u << kernel_templates[i].unit | kernel_templates[i].also;
    rc = append_part(&out->cu, part, 1u << kernel_templates[i].unit | kernel_templates[i].also, err);
  }
  if (!rc) rc = render_file(sb, "host.h.lt", &out->h, err);
  out->image.abi_version = MOEGEN_RT_ABI_VERSION;
  if (!rc) rc = moegen_abi_read_plan(sb, &out->image, err);
  if (!rc) rc = moegen_abi_check_source(out->cu, &out->image, err);
  if (!rc && !(out->c = moegen_abi_image_c(&out->image, opt))) {
    err->code = rc = EX_OSERR;
    snprintf(err->msg, sizeof err->msg, "out of memory");
  }
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
