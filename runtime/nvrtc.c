/* runtime/nvrtc.c -- NVRTC (libnvrtc.so.13) loaded at run time.
 *
 * The library is opened once per process. Generated kernels are
 * self-contained (no toolkit headers), so no include path is passed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvrtc.h"

typedef int nvrtcResult;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };
typedef struct nvrtc_program_st *nvrtcProgram;

typedef struct nvrtc_api {
  nvrtcResult (*nvrtcVersion)(int *major, int *minor);
  const char *(*nvrtcGetErrorString)(nvrtcResult r);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *p, const char *src, const char *name,
                                    int num_headers, const char *const *headers,
                                    const char *const *include_names);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram p, int num_options, const char *const *options);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram p, size_t *size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram p, char *log);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram p, size_t *size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram p, char *cubin);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *p);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int *count);
  nvrtcResult (*nvrtcGetSupportedArchs)(int *archs);
} nvrtc_api;

typedef struct symbol {
  const char *name;
  size_t offset;
} symbol;

#define SYMBOL(name) {#name, offsetof(nvrtc_api, name)}

static const symbol symbols[] = {
    SYMBOL(nvrtcVersion),        SYMBOL(nvrtcGetErrorString),    SYMBOL(nvrtcCreateProgram),
    SYMBOL(nvrtcCompileProgram), SYMBOL(nvrtcGetProgramLogSize), SYMBOL(nvrtcGetProgramLog),
    SYMBOL(nvrtcGetCUBINSize),   SYMBOL(nvrtcGetCUBIN),          SYMBOL(nvrtcDestroyProgram),
    SYMBOL(nvrtcGetNumSupportedArchs), SYMBOL(nvrtcGetSupportedArchs),
};

/* Options per arch NVRTC 13 accepts (nvrtcGetSupportedArchs plus the 'a'
 * and 'f' variants). No --use_fast_math: router numerics must match the
 * CPU reference. */
#define BASE_OPTIONS "-std=c++17", "-default-device", "-DMOEGEN_NVRTC=1"
#define ARCH(a) {a, {"-arch=" a, BASE_OPTIONS, NULL}}

static const struct arch_options {
  const char *arch;
  const char *options[5];
} arch_table[] = {
    ARCH("sm_75"),   ARCH("sm_80"),   ARCH("sm_86"),   ARCH("sm_87"),   ARCH("sm_88"),
    ARCH("sm_89"),   ARCH("sm_90"),   ARCH("sm_90a"),  ARCH("sm_100"),  ARCH("sm_100a"),
    ARCH("sm_100f"), ARCH("sm_103"),  ARCH("sm_103a"), ARCH("sm_103f"), ARCH("sm_110"),
    ARCH("sm_110a"), ARCH("sm_110f"), ARCH("sm_120"),  ARCH("sm_120a"), ARCH("sm_120f"),
    ARCH("sm_121"),  ARCH("sm_121a"), ARCH("sm_121f"),
};

enum { MAX_OPTIONS = 8 };

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static nvrtc_api g_api;
static int g_loaded;
static char g_why[512];

/* dlopen's the first candidate that loads: $MOEGEN_LIBNVRTC alone if set,
 * else the loader path, $CUDA_HOME/lib64, /usr/local/cuda/lib64. */
static void *open_library(void) {
  const char *env = getenv("MOEGEN_LIBNVRTC");
  if (env && *env) {
    void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!lib) snprintf(g_why, sizeof g_why, "cannot load NVRTC %s: %s", env, dlerror());
    return lib;
  }
  char home_path[512] = "";
  const char *home = getenv("CUDA_HOME");
  if (home && *home) snprintf(home_path, sizeof home_path, "%s/lib64/libnvrtc.so.13", home);
  const char *candidates[] = {"libnvrtc.so.13", home_path, "/usr/local/cuda/lib64/libnvrtc.so.13"};
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    if (!candidates[i][0]) continue;
    void *lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
  }
  snprintf(g_why, sizeof g_why,
           "cannot load libnvrtc.so.13 (tried the loader path, $CUDA_HOME/lib64 and "
           "/usr/local/cuda/lib64): %s; install CUDA 13 NVRTC or set MOEGEN_LIBNVRTC",
           dlerror());
  return NULL;
}

/* Opens NVRTC and resolves every symbol (runs once). */
static void load_nvrtc(void) {
  void *lib = open_library();
  if (!lib) return;
  for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
    void *fn = dlsym(lib, symbols[i].name);
    if (!fn) {
      snprintf(g_why, sizeof g_why, "NVRTC library lacks %s: not a CUDA 13 NVRTC",
               symbols[i].name);
      dlclose(lib);
      return;
    }
    memcpy((char *)&g_api + symbols[i].offset, &fn, sizeof fn);
  }
  g_loaded = 1;
}

const char *const *moegen_nvrtc_options_for(const char *arch) {
  for (size_t i = 0; arch && i < sizeof arch_table / sizeof arch_table[0]; i++)
    if (strcmp(arch_table[i].arch, arch) == 0) return arch_table[i].options;
  return NULL;
}

moegen_status moegen_nvrtc_version(int *major, int *minor) {
  pthread_once(&g_once, load_nvrtc);
  if (!g_loaded || g_api.nvrtcVersion(major, minor) != NVRTC_SUCCESS) return MOEGEN_ERR_NO_NVRTC;
  return MOEGEN_OK;
}

void moegen_nvrtc_load_error(char *why, size_t size) {
  pthread_once(&g_once, load_nvrtc);
  if (size) snprintf(why, size, "%s", g_loaded ? "" : g_why);
}

moegen_status moegen_nvrtc_supported_archs(int *archs, int max, int *count) {
  *count = 0;
  pthread_once(&g_once, load_nvrtc);
  int n = 0;
  if (!g_loaded || g_api.nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n < 0)
    return MOEGEN_ERR_NO_NVRTC;
  int *all = malloc(sizeof *all * (size_t)(n ? n : 1));
  if (!all) return MOEGEN_ERR_OUT_OF_MEMORY;
  moegen_status st = MOEGEN_ERR_NO_NVRTC;
  if (g_api.nvrtcGetSupportedArchs(all) == NVRTC_SUCCESS) {
    memcpy(archs, all, sizeof *all * (size_t)(n < max ? n : max));
    *count = n;
    st = MOEGEN_OK;
  }
  free(all);
  return st;
}

moegen_status moegen_nvrtc_archs(char *buf, size_t size) {
  int numbers[128], n = 0;
  moegen_status st = moegen_nvrtc_supported_archs(numbers, 128, &n);
  if (st != MOEGEN_OK) {
    moegen_nvrtc_load_error(buf, size);
    if (size && !buf[0]) snprintf(buf, size, "nvrtcGetSupportedArchs failed");
    return MOEGEN_ERR_NO_NVRTC;
  }
  if (n > 128) n = 128;
  size_t len = 0;
  if (size > 0) buf[0] = 0;
  for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
    int number = atoi(arch_table[i].arch + 3), listed = 0;
    for (int j = 0; j < n; j++) listed |= numbers[j] == number;
    if (!listed) continue;
    int w = snprintf(buf + len, len < size ? size - len : 0, "%s%s", len ? " " : "",
                     arch_table[i].arch);
    if (w < 0 || len + (size_t)w >= size) { /* keep only whole names */
      if (len < size) buf[len] = 0;
      break;
    }
    len += (size_t)w;
  }
  return MOEGEN_OK;
}

/* Fills opts with the arch's options (+ ptxas -v when verbose); returns the count or -1. */
static int build_options(const char *arch, int verbose, const char *opts[MAX_OPTIONS]) {
  const char *const *base = moegen_nvrtc_options_for(arch);
  if (!base) return -1;
  int n = 0;
  while (base[n]) {
    opts[n] = base[n];
    n++;
  }
  if (verbose) opts[n++] = "--ptxas-options=-v";
  return n;
}

/* The program's log, malloc'd (NULL if empty or unavailable). */
static char *program_log(nvrtcProgram p) {
  size_t size = 0;
  if (g_api.nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size <= 1) return NULL;
  char *log = malloc(size);
  if (log && g_api.nvrtcGetProgramLog(p, log) != NVRTC_SUCCESS) {
    free(log);
    return NULL;
  }
  return log;
}

/* malloc'd printf-formatted message, for *log (NULL if out of memory). */
static char *message(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n < 0 ? NULL : malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Copies the compiled cubin out of the program into a malloc'd buffer. */
static moegen_status take_cubin(nvrtcProgram p, unsigned char **cubin, size_t *cubin_size) {
  size_t size = 0;
  nvrtcResult r = g_api.nvrtcGetCUBINSize(p, &size);
  if (r != NVRTC_SUCCESS || size == 0) return MOEGEN_ERR_COMPILE;
  unsigned char *buf = malloc(size);
  if (!buf) return MOEGEN_ERR_OUT_OF_MEMORY;
  if (g_api.nvrtcGetCUBIN(p, (char *)buf) != NVRTC_SUCCESS) {
    free(buf);
    return MOEGEN_ERR_COMPILE;
  }
  *cubin = buf;
  *cubin_size = size;
  return MOEGEN_OK;
}

/* Creates, compiles and harvests one program; source must be NUL-terminated. */
static moegen_status compile_program(const char *source, const char *file_name, int nopts,
                                     const char **opts, unsigned char **cubin,
                                     size_t *cubin_size, char **log) {
  nvrtcProgram p = NULL;
  nvrtcResult r = g_api.nvrtcCreateProgram(&p, source, file_name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    *log = message("nvrtcCreateProgram(%s): %s", file_name, g_api.nvrtcGetErrorString(r));
    return r == NVRTC_ERROR_OUT_OF_MEMORY ? MOEGEN_ERR_OUT_OF_MEMORY : MOEGEN_ERR_COMPILE;
  }
  r = g_api.nvrtcCompileProgram(p, nopts, opts);
  *log = program_log(p);
  moegen_status st = MOEGEN_ERR_COMPILE;
  if (r == NVRTC_SUCCESS) st = take_cubin(p, cubin, cubin_size);
  if (st == MOEGEN_ERR_COMPILE && !*log)
    *log = message("nvrtcCompileProgram(%s): %s", file_name, g_api.nvrtcGetErrorString(r));
  g_api.nvrtcDestroyProgram(&p);
  return st;
}

moegen_status moegen_nvrtc_compile(const char *source, size_t source_size, const char *file_name,
                                   const char *arch, int verbose, unsigned char **cubin,
                                   size_t *cubin_size, char **log) {
  *cubin = NULL;
  *cubin_size = 0;
  *log = NULL;
  const char *opts[MAX_OPTIONS];
  int nopts = build_options(arch, verbose, opts);
  if (nopts < 0) {
    *log = message("unknown GPU architecture '%s' (NVRTC 13 takes sm_75 ... sm_121f)",
                   arch ? arch : "(null)");
    return MOEGEN_ERR_INVALID_ARGUMENT;
  }
  pthread_once(&g_once, load_nvrtc);
  if (!g_loaded) {
    *log = message("%s", g_why);
    return MOEGEN_ERR_NO_NVRTC;
  }
  char *src = malloc(source_size + 1); /* NVRTC wants a NUL-terminated string */
  if (!src) return MOEGEN_ERR_OUT_OF_MEMORY;
  memcpy(src, source, source_size);
  src[source_size] = 0;
  moegen_status st = compile_program(src, file_name ? file_name : "moegen.cu", nopts, opts, cubin,
                                     cubin_size, log);
  free(src);
  return st;
}
