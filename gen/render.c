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
  return 0;
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
