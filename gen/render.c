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

/* The kernel templates of a module, rendered in this order after
 * module.cu.lt (header comment + prelude) into NAME.cu. Each one renders to
 * nothing when the config or arch does not call for its kernels. */
static const char *const kernel_templates[] = {
    "router.cu.lt",
    "router_bwd.cu.lt",
    "aux_loss.cu.lt",
    "grouped_gemm_sm90.cu.lt",
    NULL,
};

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

/* Concatenates a and b into a new string; frees both. */
static char *concat_free(char *a, char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *s = malloc(na + nb + 1);
  if (s) {
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
  }
  free(a);
  free(b);
  return s;
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
  for (size_t i = 0; !rc && kernel_templates[i]; i++) {
    char *part = NULL;
    rc = render_file(sb, kernel_templates[i], &part, err);
    if (!rc) {
      out->cu = concat_free(out->cu, part);
      if (!out->cu) {
        err->code = EX_OSERR;
        snprintf(err->msg, sizeof err->msg, "out of memory");
        rc = err->code;
      }
    }
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
