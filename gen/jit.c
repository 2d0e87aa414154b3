/* gen/jit.c -- moegen_jit: render in-process; NVRTC compiles at first use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "abi.h"
#include "moegen/moegen.h"
#include "shared.h"

/* The heap image a JIT module owns: the image plus the strings it points to. */
typedef struct jit_image {
  moegen_image image;
  char name[64];
  char arch[16];
  char *source;
  char *config_lua;
} jit_image;

static void free_jit_image(moegen_image *img) {
  jit_image *j = (jit_image *)img;
  free(j->source);
  free(j->config_lua);
  free(j);
}

/* "sm_XY" of the current context's device, or the error. */
static moegen_status device_arch(char *arch, size_t size, moegen_error *err) {
  char why[512];
  moegen_status st = moegen_current_arch(arch, size, why, sizeof why);
  if (st != MOEGEN_OK) {
    err->code = EX_UNAVAILABLE;
    snprintf(err->msg, sizeof err->msg, "jit: %s", why);
  }
  return st;
}

/* Renders cfg for arch (NULL: the current device's) into a heap image. */
static moegen_status render_image(const moegen_config *cfg, const char *arch, jit_image **out,
                                  moegen_error *err) {
  *out = NULL;
  err->code = 0;
  err->msg[0] = 0;
  if (moegen_config_validate(cfg, err) != 0) return MOEGEN_ERR_INVALID_ARGUMENT;
  jit_image *j = calloc(1, sizeof *j);
  if (!j) {
    err->code = EX_OSERR;
    snprintf(err->msg, sizeof err->msg, "jit: out of memory");
    return MOEGEN_ERR_OUT_OF_MEMORY;
  }
  moegen_status st = MOEGEN_OK;
  if (arch) snprintf(j->arch, sizeof j->arch, "%s", arch);
  else st = device_arch(j->arch, sizeof j->arch, err);
  snprintf(j->name, sizeof j->name, "%s", cfg->name[0] ? cfg->name : "jit");
  for (char *p = j->name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
  moegen_gen_options opt = {.name = j->name, .arch = j->arch, .compile = MOEGEN_COMPILE_JIT,
                            .command_line = "moegen_jit()"};
  moegen_sources src;
  if (st == MOEGEN_OK && moegen_render(cfg, &opt, &src, err) != 0) st = MOEGEN_ERR_INVALID_ARGUMENT;
  if (st != MOEGEN_OK) {
    free(j);
    return st;
  }
  j->source = src.cu;
  j->config_lua = src.config_lua;
  src.cu = src.config_lua = NULL;
  j->image = src.image; /* the plans, units and ABI version the AOT text prints */
  j->image.name = j->name;
  j->image.arch = j->arch;
  j->image.config_lua = j->config_lua;
  j->image.source = j->source;
  j->image.source_size = strlen(j->source);
  j->image.source_path = "<jit>";
  moegen_sources_free(&src);
  *out = j;
  return MOEGEN_OK;
}

moegen_status moegen_jit(const moegen_config *cfg, const char *arch, moegen_module **out,
                         moegen_error *err) {
  *out = NULL;
  jit_image *j;
  moegen_status st = render_image(cfg, arch, &j, err);
  if (st != MOEGEN_OK) return st;
  return moegen_module_create_owned(&j->image, free_jit_image, out);
}

moegen_status moegen_jit_warm(const moegen_config *cfg, const char *arch, int *compiled,
                              moegen_error *err) {
  if (compiled) *compiled = 0;
  if (!arch) {
    err->code = EX_USAGE;
    snprintf(err->msg, sizeof err->msg, "jit_warm: an arch is required (no device is asked)");
    return MOEGEN_ERR_INVALID_ARGUMENT;
  }
  char dir[4096];
  moegen_cache_dir(dir, sizeof dir);
  if (!dir[0]) {
    const char *off = getenv("MOEGEN_CACHE");
    err->code = EX_USAGE;
    snprintf(err->msg, sizeof err->msg, "jit_warm: %s",
             off && !strcmp(off, "0") ? "the JIT cache is disabled (MOEGEN_CACHE=0)"
                                      : "no cache directory (MOEGEN_CACHE_DIR, XDG_CACHE_HOME "
                                        "and HOME are unset)");
    return MOEGEN_ERR_INVALID_ARGUMENT;
  }
  jit_image *j;
  moegen_status st = render_image(cfg, arch, &j, err);
  moegen_kernel_job *jobs = calloc(moegen_abi_kernel_count, sizeof *jobs);
  size_t n = 0;
  if (st == MOEGEN_OK && !jobs) {
    st = MOEGEN_ERR_OUT_OF_MEMORY;
    err->code = EX_OSERR;
    snprintf(err->msg, sizeof err->msg, "jit_warm: out of memory");
  }
  for (size_t i = moegen_abi_kernel_count; st == MOEGEN_OK && i-- > 0;) {
    const moegen_abi_kernel *k = &moegen_abi_kernels[i];
    int threads, smem;
    moegen_abi_kernel_shape(&j->image, k, &threads, &smem);
    if (threads > 0) jobs[n++] = (moegen_kernel_job){.kernel = (int)i, .unit = k->unit, .kernel_name = k->name};
  }
  moegen_jit_source src;
  if (st == MOEGEN_OK) {
    moegen_jit_source_init(&src, j->name, j->arch, j->source, j->image.source_size);
    moegen_kernel_jobs_run(&src, jobs, n);
  }
  for (size_t i = 0; st == MOEGEN_OK && i < n; i++) {
    const moegen_kernel_job *job = &jobs[i];
    st = job->st;
    if (st != MOEGEN_OK) {
      err->code = st == MOEGEN_ERR_NO_NVRTC ? EX_UNAVAILABLE : EX_SOFTWARE;
      snprintf(err->msg, sizeof err->msg, "jit_warm: %s (%s unit) of %s for %s: %s%s%s",
               job->kernel_name, moegen_unit_name(job->unit), j->name, j->arch,
               moegen_status_string(st), job->log ? "\n" : "", job->log ? job->log : "");
    } else if (job->outcome == MOEGEN_CACHE_UNSTORED) {
      st = MOEGEN_ERR_INVALID_ARGUMENT;
      err->code = EX_CANTCREAT;
      snprintf(err->msg, sizeof err->msg, "jit_warm: %s (%s unit) of %s: not stored in %s: %s",
               job->kernel_name, moegen_unit_name(job->unit), j->name, dir,
               job->log ? job->log : "?");
    } else if (job->outcome == MOEGEN_CACHE_STORED && compiled) {
      ++*compiled;
    }
  }
  for (size_t i = 0; i < n; i++) {
    free(jobs[i].cubin);
    free(jobs[i].log);
  }
  free(jobs);
  if (j) free_jit_image(&j->image);
  return st;
}
