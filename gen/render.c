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
 * each inside its unit's #if. A template renders to nothing when the config
 * or arch does not call for its kernels. */
static const struct {
  const char *name;
  moegen_unit unit;
} kernel_templates[] = {
    {"router.cu.lt", MOEGEN_UNIT_ROUTER},
    {"router_bwd.cu.lt", MOEGEN_UNIT_ROUTER_TRAIN},
    {"aux_loss.cu.lt", MOEGEN_UNIT_ROUTER_TRAIN},
    {"grouped_gemm_sm90.cu.lt", MOEGEN_UNIT_GEMM},
};

/* Whether s holds anything but white space. */
static int has_code(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\n' && *s != '\t') return 1;
  return 0;
}

/* Appends a rendered kernel template to *cu inside its unit's #if (takes part). */
static int append_part(char **cu, char *part, moegen_unit u, moegen_error *err) {
  char open[128];
  static const char close[] = "#endif\n";
  snprintf(open, sizeof open, "#if !defined(MOEGEN_UNIT) || MOEGEN_UNIT == %d // %s unit\n", (int)u,
           moegen_unit_name(u));
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

/* Reads plan.router into the runtime's plan struct. */
static int read_router_plan(moegen_sandbox *sb, const moegen_config *cfg, moegen_router_plan *p,
                            moegen_error *err) {
  static const struct { const char *path; size_t off; } fields[] = {
      {"plan.router.experts", offsetof(moegen_router_plan, experts)},
      {"plan.router.topk", offsetof(moegen_router_plan, topk)},
      {"plan.router.threads", offsetof(moegen_router_plan, threads)},
      {"plan.router.tokens_per_block", offsetof(moegen_router_plan, tokens_per_block)},
      {"plan.router.smem_bytes", offsetof(moegen_router_plan, smem_bytes)},
      {"plan.router.logits_dtype_id", offsetof(moegen_router_plan, logits_dtype)},
  };
  memset(p, 0, sizeof *p);
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    long v;
    int rc = moegen_sandbox_get_int(sb, fields[i].path, &v, err);
    if (rc) return rc;
    *(int *)((char *)p + fields[i].off) = (int)v;
  }
  p->has_bias = cfg->expert_bias ? 1 : 0;
  p->qb = cfg->quantile_balancing ? 1 : 0;
  return 0;
}

/* Reads plan.router_bwd into the runtime's plan struct. */
static int read_router_bwd_plan(moegen_sandbox *sb, moegen_router_bwd_plan *p, moegen_error *err) {
  static const struct { const char *path; size_t off; } fields[] = {
      {"plan.router_bwd.experts", offsetof(moegen_router_bwd_plan, experts)},
      {"plan.router_bwd.topk", offsetof(moegen_router_bwd_plan, topk)},
      {"plan.router_bwd.threads", offsetof(moegen_router_bwd_plan, threads)},
      {"plan.router_bwd.tokens_per_block", offsetof(moegen_router_bwd_plan, tokens_per_block)},
      {"plan.router_bwd.logits_dtype_id", offsetof(moegen_router_bwd_plan, grad_dtype)},
  };
  memset(p, 0, sizeof *p);
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    long v;
    int rc = moegen_sandbox_get_int(sb, fields[i].path, &v, err);
    if (rc) return rc;
    *(int *)((char *)p + fields[i].off) = (int)v;
  }
  return 0;
}

/* Reads plan.aux into the runtime's plan struct. */
static int read_aux_plan(moegen_sandbox *sb, moegen_aux_plan *p, moegen_error *err) {
  static const struct { const char *path; size_t off; } fields[] = {
      {"plan.aux.experts", offsetof(moegen_aux_plan, experts)},
      {"plan.aux.topk", offsetof(moegen_aux_plan, topk)},
      {"plan.aux.threads", offsetof(moegen_aux_plan, threads)},
      {"plan.aux.tokens_per_block", offsetof(moegen_aux_plan, tokens_per_block)},
      {"plan.aux.logits_dtype_id", offsetof(moegen_aux_plan, logits_dtype)},
      {"plan.aux.loss_threads", offsetof(moegen_aux_plan, loss_threads)},
      {"plan.aux.loss_unroll", offsetof(moegen_aux_plan, loss_unroll)},
      {"plan.aux.loss_max_blocks", offsetof(moegen_aux_plan, loss_max_blocks)},
  };
  memset(p, 0, sizeof *p);
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    long v;
    int rc = moegen_sandbox_get_int(sb, fields[i].path, &v, err);
    if (rc) return rc;
    *(int *)((char *)p + fields[i].off) = (int)v;
  }
  return 0;
}

/* Reads plan.gemm into the runtime's plan struct. */
static int read_gemm_plan(moegen_sandbox *sb, moegen_gemm_plan *p, moegen_error *err) {
  static const struct { const char *field; size_t off; } fields[] = {
      {"n", offsetof(moegen_gemm_kernel_plan, n)},
      {"k", offsetof(moegen_gemm_kernel_plan, k)},
      {"bm", offsetof(moegen_gemm_kernel_plan, bm)},
      {"bn", offsetof(moegen_gemm_kernel_plan, bn)},
      {"bk", offsetof(moegen_gemm_kernel_plan, bk)},
      {"stages", offsetof(moegen_gemm_kernel_plan, stages)},
      {"threads", offsetof(moegen_gemm_kernel_plan, threads)},
      {"smem_bytes", offsetof(moegen_gemm_kernel_plan, smem_bytes)},
  };
  memset(p, 0, sizeof *p);
  long v;
  int rc = moegen_sandbox_get_int(sb, "plan.gemm.experts", &v, err);
  p->experts = (int)v;
  if (!rc) rc = moegen_sandbox_get_int(sb, "plan.gemm.supported", &v, err);
  p->supported = (int)v;
  for (int g = 0; !rc && g < 2; g++) {
    moegen_gemm_kernel_plan *k = g ? &p->gemm2 : &p->gemm1;
    for (size_t i = 0; !rc && i < sizeof fields / sizeof fields[0]; i++) {
      char path[64];
      snprintf(path, sizeof path, "plan.gemm.gemm%d.%s", g + 1, fields[i].field);
      rc = moegen_sandbox_get_int(sb, path, &v, err);
      *(int *)((char *)k + fields[i].off) = (int)v;
    }
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
    out->units |= 1u << kernel_templates[i].unit;
    rc = append_part(&out->cu, part, kernel_templates[i].unit, err);
  }
  if (!rc) rc = render_file(sb, "host.h.lt", &out->h, err);
  if (!rc) rc = render_file(sb, "host.c.lt", &out->c, err);
  if (!rc) rc = read_router_plan(sb, cfg, &out->router, err);
  if (!rc) rc = read_router_bwd_plan(sb, &out->router_bwd, err);
  if (!rc) rc = read_aux_plan(sb, &out->aux, err);
  if (!rc) rc = read_gemm_plan(sb, &out->gemm, err);
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
