/* moegen/moegen.h -- the generator library (libmoegen): config -> sources -> cubin.
 *
 * The CLI (`moegen`) and the in-process JIT both go through these calls.
 * Errors follow config.h: 0 or a sysexits code, message in moegen_error.
 */
#ifndef MOEGEN_MOEGEN_H
#define MOEGEN_MOEGEN_H

#include <stddef.h>

#include "moegen/config.h"
#include "moegen/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOEGEN_VERSION "0.1.0"

typedef enum moegen_compile_mode {
  MOEGEN_COMPILE_NVCC = 0,  /* AOT: nvcc -cubin, cubin embedded in NAME.c */
  MOEGEN_COMPILE_NVRTC = 1, /* AOT: NVRTC in-process, cubin embedded in NAME.c */
  MOEGEN_COMPILE_JIT = 2    /* source embedded in NAME.c, compiled at first use */
} moegen_compile_mode;

typedef struct moegen_gen_options {
  const char *name;         /* module name ("ds3"; see moegen_name_problem) */
  const char *arch;         /* "sm_90a" (default), "sm_90", ...; see moegen_arch_problem */
  moegen_compile_mode compile;
  const char *command_line; /* written at the top of every generated file */
  const char *nvcc;         /* nvcc path for MOEGEN_COMPILE_NVCC; NULL = "nvcc" */
} moegen_gen_options;

/* The longest module name, in characters. */
#define MOEGEN_MAX_NAME 63

/* Why `name` cannot name a module, or NULL if it can. A module name must
 * be a C identifier of at most MOEGEN_MAX_NAME characters that does not
 * start with '_' (NAME_EXPERTS would be reserved), is not a C or C++
 * keyword, and is neither "moegen" nor "moegen_..." in any letter case (its
 * symbols NAME_image, NAME_module_create, NAME_EXPERTS, ... would fall
 * among the runtime's moegen_* and MOEGEN_* names). The reason is a static
 * string such as "not a C identifier". */
const char *moegen_name_problem(const char *name);

/* Checks `arch` for a compile mode before anything is rendered: it must be
 * sm_XY or sm_XYZ from sm_50 to sm_199 with an optional a (from sm_90) or f
 * (from sm_100) suffix, and for MOEGEN_COMPILE_NVRTC and MOEGEN_COMPILE_JIT,
 * when NVRTC can be loaded, one this NVRTC compiles for (nvcc reports its
 * own). Returns 0, or EX_USAGE with what is accepted in why (size bytes;
 * the message does not repeat arch). */
int moegen_arch_problem(const char *arch, moegen_compile_mode mode, char *why, size_t size);

/* The rendered module: sources and the launch plan. */
typedef struct moegen_sources {
  char *cu;                 /* NAME.cu: self-contained kernel source */
  char *h;                  /* NAME.h: the module's C API */
  char *c;                  /* the image definition of NAME.c (moegen_generate adds the data),
                             * printed from `image` */
  moegen_image image;       /* abi_version, units and every plan; the strings and cubins are
                             * the consumer's (NULL here): the AOT text above and the JIT's
                             * heap image are both this struct */
  char *config_lua;         /* the config as a Lua table */
  char *command_line;       /* opt->command_line, made safe to put inside a C comment */
} moegen_sources;

/* Renders the templates for a validated config. Deterministic: the same
 * config, options and moegen version give byte-identical text. */
int moegen_render(const moegen_config *cfg, const moegen_gen_options *opt,
                  moegen_sources *out, moegen_error *err);

void moegen_sources_free(moegen_sources *s);

/* NVRTC options moegen uses for an arch (NULL-terminated, static). */
const char *const *moegen_nvrtc_options(const char *arch);

/* Renders, compiles (per opt->compile) and writes DIR/NAME.{cu,h,c,json}.
 * Checks opt->name and opt->arch (moegen_name_problem, moegen_arch_problem:
 * EX_USAGE) and the config before anything is created. out_dir and its
 * missing parents are created (EX_CANTCREAT if that fails or out_dir is
 * not a directory). Files are written to temporaries and renamed, so an
 * error leaves no partial output, and the directories this call created
 * are removed again (a failed nvcc compile keeps its source there, and so
 * the directory). `progress` (may be NULL) receives one line per step. */
int moegen_generate(const moegen_config *cfg, const moegen_gen_options *opt,
                    const char *out_dir, void (*progress)(const char *line),
                    moegen_error *err);

/* In-process JIT: renders cfg for `arch` (NULL = the current device's) and
 * returns a module whose kernels NVRTC compiles at first use (through the
 * on-disk cache). The module owns its image. */
moegen_status moegen_jit(const moegen_config *cfg, const char *arch, moegen_module **out,
                         moegen_error *err);

/* Fills the JIT disk cache for what moegen_jit(cfg, arch) will compile,
 * without a GPU or a driver (NVRTC only): renders cfg for `arch` (required:
 * no device is asked; "sm_90a" for an H100 / H200, as moegen_jit picks
 * there) and compiles every kernel through the cache (in parallel, as the
 * JIT does), so that a later
 * moegen_jit of the same config and arch, with the same moegen and NVRTC
 * versions and cache directory, loads the cubins instead of compiling (e.g.
 * in a container build). *compiled (may be NULL): the kernels compiled now
 * (the others were cached). On failure err says why: INVALID_ARGUMENT for
 * a NULL or unknown arch, an invalid config, a disabled or missing cache
 * directory, or one that cannot store the entries; NO_NVRTC, COMPILE as
 * the JIT; OUT_OF_MEMORY. */
moegen_status moegen_jit_warm(const moegen_config *cfg, const char *arch, int *compiled,
                              moegen_error *err);

#ifdef __cplusplus
}
#endif
#endif
