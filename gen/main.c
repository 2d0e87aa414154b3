/* gen/main.c -- the moegen command line: config sources -> moegen_generate.
 *
 * Every option is a row of options[], which both the parser and --help
 * read; the config keys in --help come from the config field table
 * (moegen_config_key_name/_type/_help), so the help cannot go stale. Errors
 * are printed as "moegen: MESSAGE" and the exit status is the sysexits code.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "moegen/moegen.h"
#include "moegen_revision.h" /* MOEGEN_GIT_REVISION, written by the build */
#include "shared.h"

#ifndef MOEGEN_DEFAULT_ARCH /* set by the build; this is its default */
#define MOEGEN_DEFAULT_ARCH "sm_90a"
#endif
#ifndef MOEGEN_NVCC_PATH /* nvcc found by the build; "" = nvcc from PATH */
#define MOEGEN_NVCC_PATH ""
#endif

typedef enum opt_id {
  OPT_PRESET, OPT_HF_CONFIG, OPT_SET, OPT_NAME, OPT_OUT, OPT_ARCH, OPT_COMPILE,
  OPT_LIST_PRESETS, OPT_PRINT_CONFIG, OPT_HELP, OPT_VERSION, OPT_COUNT
} opt_id;

typedef struct option_desc {
  const char *flag;
  const char *arg;  /* value name, or NULL for a flag without a value */
  const char *help;
} option_desc;

static const option_desc options[OPT_COUNT] = {
    [OPT_PRESET] = {"--preset", "NAME", "start from a built-in model preset (see --list-presets)"},
    [OPT_HF_CONFIG] = {"--hf-config", "FILE",
                       "apply a Hugging Face config.json of a family listed below"},
    [OPT_SET] = {"--set", "KEY=VALUE", "set one config key (repeatable; booleans are true/false)"},
    [OPT_NAME] = {"--name", "NAME",
                  "module name: prefixes the output files and C symbols; a C identifier of at "
                  "most 63 characters, not a keyword, not starting with _ or moegen_"},
    [OPT_OUT] = {"--out", "DIR", "output directory (created if missing)"},
    [OPT_ARCH] = {"--arch", "ARCH",
                  "GPU architecture: sm_XY or sm_XYZ (sm_50 to sm_199), optionally with a (from "
                  "sm_90) or f (from sm_100); for nvrtc and jit, one NVRTC supports (default " MOEGEN_DEFAULT_ARCH ")"},
    [OPT_COMPILE] = {"--compile", "MODE",
                     "nvcc: nvcc -cubin now; nvrtc (default): NVRTC in-process now; jit: embed "
                     "the source, NVRTC compiles it at first use (cached)"},
    [OPT_LIST_PRESETS] = {"--list-presets", NULL, "print the preset names, one per line"},
    [OPT_PRINT_CONFIG] = {"--print-config", NULL,
                          "print the validated config as a Lua table (a CONFIG.lua) and exit"},
    [OPT_HELP] = {"--help", NULL, "print this help (also -h)"},
    [OPT_VERSION] = {"--version", NULL,
                     "print the version, the git revision moegen was built from, and the "
                     "version and GPU architectures of the NVRTC found now"},
};

/* One --set: its KEY=VALUE text and the argv position it came from. */
typedef struct set_arg {
  const char *text;
  int pos;
} set_arg;

/* The parsed command line. Texts point into argv. */
typedef struct cli {
  const char *config_lua;
  const char *value[OPT_COUNT]; /* single-valued options */
  bool flag[OPT_COUNT];         /* flags without a value */
  set_arg *sets;                /* the --set options, in order */
  int n_sets;
} cli;

/* ---------------------------------------------------------------- messages */

/* Fills err with code and the formatted message; returns code. */
static int fail(moegen_error *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return err->code = code;
}

/* Prints err as "moegen: MSG" (plus a hint for usage errors); returns its code. */
static int report(const moegen_error *err) {
  fprintf(stderr, "moegen: %s\n", err->msg);
  if (err->code == EX_USAGE) fprintf(stderr, "moegen: see moegen --help\n");
  return err->code;
}

static void progress(const char *line) { fprintf(stderr, "moegen: %s\n", line); }

/* Prints "  LEFT  TEXT" with TEXT word-wrapped at column 79 under column 24. */
static void print_item(FILE *f, const char *left, const char *text) {
  int col = fprintf(f, "  %-21s", left);
  while (*text) {
    size_t word = strcspn(text, " ");
    if (col > 23 && col + 1 + (int)word > 79) col = fprintf(f, "\n%23s", "") - 1;
    col += fprintf(f, " %.*s", (int)word, text);
    text += word;
    text += strspn(text, " ");
  }
  fputc('\n', f);
}

/* Prints the model_type values moegen_config_load_hf loads (or refuses) as
 * one help item, followed by note. */
static void print_model_types(FILE *f, bool refused, const char *left, const char *note) {
  char list[1024];
  size_t len = moegen_hf_model_types(list, sizeof list, refused);
  if (len < sizeof list) snprintf(list + len, sizeof list - len, "%s", note);
  print_item(f, left, list);
}

static void print_help(FILE *f) {
  fputs("usage: moegen [CONFIG.lua] [--preset NAME] [--hf-config FILE]\n"
        "              [--set KEY=VALUE]... --name NAME --out DIR [--arch ARCH]\n"
        "              [--compile nvcc|nvrtc|jit]\n"
        "       moegen --list-presets | --print-config [config options]\n"
        "       moegen --help | --version\n"
        "\n"
        "Generates the CUDA kernels and C host glue of one MoE layer configuration.\n"
        "\n"
        "options (--opt VALUE or --opt=VALUE):\n"
        "  CONFIG.lua            a Lua file returning a table of config keys; it runs in\n"
        "                        an empty sandbox (only math) under memory and\n"
        "                        instruction caps\n",
        f);
  for (int i = 0; i < OPT_COUNT; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", options[i].flag, options[i].arg ? " " : "",
             options[i].arg ? options[i].arg : "");
    print_item(f, left, options[i].help);
  }
  fputs("\nconfig sources, applied in this order onto the defaults: --preset, then\n"
        "--hf-config, then CONFIG.lua, then each --set in command-line order. Each\n"
        "source overrides only the keys it names (a --hf-config file also sets the\n"
        "routing facts of its model family). The result is then validated; errors\n"
        "say FILE:LINE: key: reason.\n"
        "\nHugging Face config.json families (--hf-config: a file's family is its\n"
        "model_type or, without one, its architectures entry; a file naming neither is\n"
        "an error, no family is guessed; so is a key twice in one JSON object):\n",
        f);
  print_model_types(f, false, "loaded", "");
  print_model_types(f, true, "refused", " (moegen cannot compute their routing; the error says why)");
  fputs("\nconfig keys (CONFIG.lua table keys and --set keys):\n", f);
  for (int k = 0; k < MOEGEN_F_COUNT; k++) {
    char text[256];
    snprintf(text, sizeof text, "%s: %s", moegen_config_key_type((moegen_field)k),
             moegen_config_key_help((moegen_field)k));
    print_item(f, moegen_config_key_name((moegen_field)k), text);
  }
  moegen_config defaults;
  moegen_config_defaults(&defaults);
  char text[2048];
  moegen_config_to_lua(&defaults, text, sizeof text);
  fputs("\nthe defaults (experts, hidden and ffn must be set; --print-config output\n"
        "is a valid CONFIG.lua):\n",
        f);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) fprintf(f, "  %s\n", line);
  fputs("\noutput files (each written to a temporary and renamed into place):\n"
        "  DIR/NAME.cu    the self-contained kernel source\n"
        "  DIR/NAME.h     the module's C API: NAME_module_create(), then the ops of\n"
        "                 moegen/runtime.h\n"
        "  DIR/NAME.c     the config, the kernel source and (nvcc, nvrtc) the cubin as\n"
        "                 data; compile it and link libmoegen_rt\n"
        "  DIR/NAME.json  what was generated from what: version, command, config, arch,\n"
        "                 kernels, sha256 of the source and cubin\n"
        "\nexit status (sysexits.h):\n"
        "  0   success\n"
        "  64  EX_USAGE: bad command line (unknown option, missing or repeated value,\n"
        "      unknown preset, --set without '=' or with an unknown key, bad --name,\n"
        "      --arch or --compile)\n"
        "  65  EX_DATAERR: malformed input (Lua or JSON error, a duplicate JSON key, a\n"
        "      value of the wrong type, an unknown key in CONFIG.lua, an unsupported or\n"
        "      missing model_type)\n"
        "  66  EX_NOINPUT: a config file cannot be read\n"
        "  69  EX_UNAVAILABLE: nvcc or NVRTC is not available\n"
        "  70  EX_SOFTWARE: the kernel compile failed, or an internal error\n"
        "  71  EX_OSERR: out of memory (NVRTC's too) or a failed system call\n"
        "  73  EX_CANTCREAT: an output directory or file cannot be created (--out\n"
        "      names a file, a directory without write permission, ...)\n"
        "  74  EX_IOERR: writing an output file or stdout failed\n"
        "  78  EX_CONFIG: a well-formed but invalid config (e.g. topk > experts), or a\n"
        "      config.json whose routing moegen cannot compute (e.g. phimoe's)\n"
        "\nA failure leaves no output: no file, and no directory that moegen created.\n",
        f);
}

/* ---------------------------------------------------------------- parsing */

/* Option whose flag is the `len` bytes at s, or -1. */
static int find_option(const char *s, size_t len) {
  for (int i = 0; i < OPT_COUNT; i++)
    if (strlen(options[i].flag) == len && strncmp(options[i].flag, s, len) == 0) return i;
  return -1;
}

/* Stores the value of option id found at argv[pos]. */
static int take_value(cli *o, opt_id id, const char *value, int pos, moegen_error *err) {
  if (id == OPT_SET) {
    o->sets[o->n_sets++] = (set_arg){value, pos};
    return 0;
  }
  if (o->value[id]) return fail(err, EX_USAGE, "%s given twice", options[id].flag);
  o->value[id] = value;
  return 0;
}

/* Parses the option at argv[*i] (and its value); advances *i past it. */
static int parse_option(cli *o, int argc, char **argv, int *i, moegen_error *err) {
  const char *arg = strcmp(argv[*i], "-h") == 0 ? "--help" : argv[*i];
  const char *eq = strchr(arg, '=');
  int id = find_option(arg, eq ? (size_t)(eq - arg) : strlen(arg));
  if (id < 0) return fail(err, EX_USAGE, "unknown option %s", argv[*i]);
  if (!options[id].arg) {
    if (eq) return fail(err, EX_USAGE, "%s takes no value", options[id].flag);
    o->flag[id] = true;
    return 0;
  }
  if (eq) return take_value(o, (opt_id)id, eq + 1, *i, err);
  if (*i + 1 >= argc) return fail(err, EX_USAGE, "%s needs a value", options[id].flag);
  ++*i;
  return take_value(o, (opt_id)id, argv[*i], *i, err);
}

static int parse_args(cli *o, int argc, char **argv, moegen_error *err) {
  memset(o, 0, sizeof *o);
  o->sets = malloc(sizeof *o->sets * (size_t)argc);
  if (!o->sets) return fail(err, EX_OSERR, "out of memory");
  for (int i = 1; i < argc; i++) {
    int rc = 0;
    if (argv[i][0] == '-' && argv[i][1])
      rc = parse_option(o, argc, argv, &i, err);
    else if (o->config_lua)
      rc = fail(err, EX_USAGE, "more than one CONFIG.lua (%s)", argv[i]);
    else
      o->config_lua = argv[i];
    if (rc) return rc;
  }
  return 0;
}

/* ---------------------------------------------------------------- the config */

/* Applies the sources in order onto the defaults, then validates. */
static int build_config(const cli *o, moegen_config *cfg, moegen_error *err) {
  int rc = 0;
  moegen_config_defaults(cfg);
  if (o->value[OPT_PRESET]) rc = moegen_config_preset(cfg, o->value[OPT_PRESET], err);
  if (!rc && o->value[OPT_HF_CONFIG]) rc = moegen_config_load_hf(cfg, o->value[OPT_HF_CONFIG], err);
  if (!rc && o->config_lua) rc = moegen_config_load_lua(cfg, o->config_lua, err);
  for (int i = 0; !rc && i < o->n_sets; i++)
    rc = moegen_config_set(cfg, o->sets[i].text, o->sets[i].pos, err);
  return rc ? rc : moegen_config_validate(cfg, err);
}

static int print_config(const moegen_config *cfg, moegen_error *err) {
  size_t n = moegen_config_to_lua(cfg, NULL, 0);
  char *text = malloc(n + 1);
  if (!text) return fail(err, EX_OSERR, "out of memory");
  moegen_config_to_lua(cfg, text, n + 1);
  fputs(text, stdout);
  free(text);
  return fflush(stdout) == 0 ? 0 : fail(err, EX_IOERR, "cannot write to stdout");
}

/* ---------------------------------------------------------------- generation */

static int compile_mode(const char *s, moegen_compile_mode *mode) {
  static const char *const names[] = {"nvcc", "nvrtc", "jit"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) {
      *mode = (moegen_compile_mode)i;
      return 0;
    }
  return -1;
}

/* Whether an argument can be shown without shell quotes. */
static bool plain_arg(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *s))
      return false;
  return true;
}

/* The command as a shell would take it: "moegen" (argv[0]'s base name, so
 * the generated files do not depend on where moegen lives) and the
 * arguments, single-quoted where needed; control characters become '?'
 * (the line goes into comments of the generated files). */
static char *command_line(int argc, char **argv) {
  size_t n = 1;
  for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 3;
  char *s = malloc(n), *p = s;
  if (!s) return NULL;
  const char *slash = strrchr(argv[0], '/');
  p += sprintf(p, "%s", slash ? slash + 1 : argv[0]);
  for (int i = 1; i < argc; i++) {
    bool quote = !plain_arg(argv[i]);
    *p++ = ' ';
    if (quote) *p++ = '\'';
    for (const char *a = argv[i]; *a; a++) {
      if (*a == '\'')
        p += sprintf(p, "'\\''");
      else
        *p++ = (unsigned char)*a < 0x20 || *a == 0x7f ? '?' : *a;
    }
    if (quote) *p++ = '\'';
  }
  *p = 0;
  return s;
}

/* Checks --name/--out/--arch/--compile into opt. */
static int gen_options(const cli *o, moegen_gen_options *opt, moegen_error *err) {
  const char *arch = o->value[OPT_ARCH] ? o->value[OPT_ARCH] : MOEGEN_DEFAULT_ARCH;
  const char *mode = o->value[OPT_COMPILE] ? o->value[OPT_COMPILE] : "nvrtc";
  if (!o->value[OPT_NAME]) return fail(err, EX_USAGE, "missing --name NAME");
  if (!o->value[OPT_OUT]) return fail(err, EX_USAGE, "missing --out DIR");
  const char *name = o->value[OPT_NAME], *why = moegen_name_problem(name);
  if (why)
    return fail(err, EX_USAGE, "--name \"%.40s%s\": %s", name, strlen(name) > 40 ? "..." : "", why);
  if (compile_mode(mode, &opt->compile) != 0)
    return fail(err, EX_USAGE, "--compile \"%s\": expected nvcc, nvrtc or jit", mode);
  char reason[700];
  if (moegen_arch_problem(arch, opt->compile, reason, sizeof reason))
    return fail(err, EX_USAGE, "--arch \"%.40s\": %s", arch, reason);
  opt->name = name;
  opt->arch = arch;
  opt->nvcc = MOEGEN_NVCC_PATH[0] ? MOEGEN_NVCC_PATH : NULL;
  return 0;
}

static int generate(moegen_gen_options *opt, const char *out_dir, int argc, char **argv,
                    const moegen_config *cfg, moegen_error *err) {
  char *cmd = command_line(argc, argv);
  if (!cmd) return fail(err, EX_OSERR, "out of memory");
  opt->command_line = cmd;
  int rc = moegen_generate(cfg, opt, out_dir, progress, err);
  free(cmd);
  return rc;
}

/* ---------------------------------------------------------------- --version */

/* "moegen VERSION", "revision: R" (MOEGEN_GIT_REVISION: a commit hash, with
 * "-dirty" when tracked files differed from it, or "unknown"), then
 * "NVRTC MAJOR.MINOR: sm_75 sm_80 ..." (nvrtcGetSupportedArchs) or
 * "NVRTC not found: WHY". Loads NVRTC but needs no GPU or driver. */
static int print_version(moegen_error *err) {
  enum { MAX_ARCHS = 64 };
  printf("moegen %s\nrevision: %s\n", MOEGEN_VERSION, MOEGEN_GIT_REVISION);
  int major = 0, minor = 0, archs[MAX_ARCHS], n = 0;
  if (moegen_nvrtc_version(&major, &minor) != MOEGEN_OK) {
    char why[512];
    moegen_nvrtc_load_error(why, sizeof why);
    printf("NVRTC not found: %s\n", why[0] ? why : "nvrtcVersion failed");
  } else {
    moegen_status st = moegen_nvrtc_supported_archs(archs, MAX_ARCHS, &n);
    if (st == MOEGEN_ERR_OUT_OF_MEMORY) return fail(err, EX_OSERR, "out of memory");
    printf("NVRTC %d.%d:", major, minor);
    if (st != MOEGEN_OK) printf(" nvrtcGetSupportedArchs failed");
    for (int i = 0; i < n && i < MAX_ARCHS; i++) printf(" sm_%d", archs[i]);
    printf("%s\n", n > MAX_ARCHS ? " ..." : "");
  }
  return fflush(stdout) == 0 ? 0 : fail(err, EX_IOERR, "cannot write to stdout");
}

/* ---------------------------------------------------------------- main */

static int run(const cli *o, int argc, char **argv, moegen_error *err) {
  if (o->flag[OPT_HELP]) {
    print_help(stdout);
    return 0;
  }
  if (o->flag[OPT_VERSION]) return print_version(err);
  if (o->flag[OPT_LIST_PRESETS]) {
    for (const char *const *p = moegen_preset_names(); *p; p++) printf("%s\n", *p);
    return 0;
  }
  moegen_gen_options opt = {0};
  int rc = o->flag[OPT_PRINT_CONFIG] ? 0 : gen_options(o, &opt, err);
  moegen_config cfg;
  if (!rc) rc = build_config(o, &cfg, err);
  if (rc) return rc;
  if (o->flag[OPT_PRINT_CONFIG]) return print_config(&cfg, err);
  return generate(&opt, o->value[OPT_OUT], argc, argv, &cfg, err);
}

int main(int argc, char **argv) {
  cli o;
  moegen_error err = {0};
  int rc = parse_args(&o, argc, argv, &err);
  if (!rc) rc = run(&o, argc, argv, &err);
  free(o.sets);
  return rc ? report(&err) : 0;
}
