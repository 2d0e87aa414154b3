/* runtime/shared.h -- internal: the runtime's interface to the generator.
 *
 * The generator (gen/: moegen_generate, moegen_jit, moegen_jit_warm) uses
 * the runtime's compile, cache and module machinery through this header
 * only; the runtime's own headers (module.h, cache.h, nvrtc.h,
 * sha256.h) include it and keep what only the runtime needs. Everything
 * here needs no GPU unless it says so. */
#ifndef MOEGEN_RUNTIME_SHARED_H
#define MOEGEN_RUNTIME_SHARED_H

#include <stddef.h>

#include "moegen/runtime.h"

/* The head of one compile of a module's source: "#define MOEGEN_UNIT u",
 * then "#define MOEGEN_KERNEL k" if kernel >= 0 (that kernel alone: its
 * row in moegen/abi.def, see prelude.cuh's MOEGEN_WANT), then a #line reset
 * (so compiler messages keep the line numbers of NAME.cu). */
enum { MOEGEN_COMPILE_HEAD_MAX = 96 };
void moegen_compile_head(char buf[MOEGEN_COMPILE_HEAD_MAX], moegen_unit u, int kernel);

/* The text that compiles all of unit u (the AOT paths): the head without a
 * kernel, then the module source. malloc'd, NUL-terminated; *size excludes
 * the NUL. NULL if out of memory. */
char *moegen_unit_source(const char *source, size_t source_size, moegen_unit u, size_t *size);

/* Where a cubin from the JIT cache came from. */
typedef enum moegen_cache_outcome {
  MOEGEN_CACHE_HIT,     /* loaded from the cache (also an entry another process or thread
                         * compiled while this call waited for it) */
  MOEGEN_CACHE_STORED,  /* compiled by this call and stored in the cache */
  MOEGEN_CACHE_UNSTORED /* compiled by this call, not stored: the cache is disabled or
                         * unusable, or the entry could not be written (the log says why) */
} moegen_cache_outcome;

/* A JIT image's source as its compiles see it, hashed once for all of
 * them (every cache key covers the digest). */
typedef struct moegen_jit_source {
  const char *name;          /* image name ("ds3"), for progress lines and messages */
  const char *arch;          /* "sm_90a" */
  const char *text;          /* the module's .cu */
  size_t size;
  unsigned char sha256[32];  /* of text */
} moegen_jit_source;

/* Fills s (hashes text; the strings must outlive s). */
void moegen_jit_source_init(moegen_jit_source *s, const char *name, const char *arch,
                            const char *text, size_t size);

/* One kernel of a JIT image to compile: its own NVRTC program (the head
 * with MOEGEN_KERNEL), through the disk cache. */
typedef struct moegen_kernel_job {
  int kernel;                   /* in: its row in moegen/abi.def */
  moegen_unit unit;             /* in: its unit */
  const char *kernel_name;      /* in: "moegen_gemm1_fwd", for messages */
  unsigned char *cubin;         /* out, malloc'd (on MOEGEN_OK) */
  size_t cubin_size;            /* out */
  char *log;                    /* out, malloc'd or NULL: moegen_cache_compile's log */
  moegen_cache_outcome outcome; /* out (on MOEGEN_OK) */
  moegen_status st;             /* out */
} moegen_kernel_job;

/* Compiles jobs[0..n) concurrently: a thread each, up to the CPUs this
 * thread may run on ($MOEGEN_JIT_THREADS overrides), taking the jobs in
 * order (put the longest first). Each kernel compiles alone, so a unit takes
 * as long as its slowest kernel, not the sum (the SASS is the same as in a
 * whole unit's compile, kernel for kernel). One progress line per unit with
 * a cold compile, "moegen: compiling NAME (UNIT unit) for ARCH with NVRTC
 * (...)"; NVRTC messages name "NAME (UNIT unit: KERNEL).cu". Returns
 * MOEGEN_OK, or the status of the first failed job in job order (every job
 * has its st, log and, if OK, cubin). */
moegen_status moegen_kernel_jobs_run(const moegen_jit_source *src, moegen_kernel_job *jobs,
                                     size_t n);

/* The JIT cache directory in use (into buf), or "" when disabled. */
void moegen_cache_dir(char *buf, size_t size);

/* Compiles CUDA source to a cubin for `arch` ("sm_90a": passes -arch=sm_90a
 * plus moegen's fixed options). Needs no GPU. On success *cubin is malloc'd.
 * *log (malloc'd, may be NULL) receives the compile log in every case,
 * including ptxas -v output when `verbose` is set. Returns MOEGEN_ERR_NO_NVRTC
 * if libnvrtc.so.13 cannot be loaded (reason in *log), MOEGEN_ERR_COMPILE on
 * a compile error. Thread-safe. `MOEGEN_LIBNVRTC` overrides the library path. */
moegen_status moegen_nvrtc_compile(const char *source, size_t source_size, const char *file_name,
                                   const char *arch, int verbose, unsigned char **cubin,
                                   size_t *cubin_size, char **log);

/* NVRTC version (e.g. 13, 0), or MOEGEN_ERR_NO_NVRTC. Loads NVRTC (once
 * per process); needs no GPU. */
moegen_status moegen_nvrtc_version(int *major, int *minor);

/* Why NVRTC cannot be loaded (the text moegen_nvrtc_compile puts in its log
 * for MOEGEN_ERR_NO_NVRTC) into why, or "" when it loads. */
void moegen_nvrtc_load_error(char *why, size_t size);

/* The GPU architectures the loaded NVRTC compiles for, as
 * nvrtcGetSupportedArchs gives them (SM numbers, ascending: 75 for sm_75;
 * the 'a' and 'f' variants are not listed). The first min(*count, max) go
 * into archs; *count is NVRTC's full count (0 on error). MOEGEN_ERR_NO_NVRTC
 * if NVRTC cannot be loaded (moegen_nvrtc_load_error says why) or fails,
 * MOEGEN_ERR_OUT_OF_MEMORY. Needs no GPU. */
moegen_status moegen_nvrtc_supported_archs(int *archs, int max, int *count);

/* The GPU architectures moegen_nvrtc_compile can compile for with the NVRTC
 * it loads: those of its options table ("sm_90a", ...) whose number
 * moegen_nvrtc_supported_archs lists, space-separated into buf ("sm_75 sm_80
 * sm_86 ..."; cut at a name boundary if buf is short). Needs no GPU.
 * MOEGEN_ERR_NO_NVRTC, with the reason in buf, if NVRTC cannot be loaded or
 * does not answer. Thread-safe. */
moegen_status moegen_nvrtc_archs(char *buf, size_t size);

/* Hex SHA-256 digest (65 bytes with the NUL) of one buffer. */
void moegen_sha256_hex(const void *data, size_t n, char out[65]);

/* Creates a module that owns `image`: moegen_module_destroy calls
 * free_image(image). Ownership passes in every case, also on error (then
 * free_image may already have run). Otherwise as moegen_module_create. */
moegen_status moegen_module_create_owned(moegen_image *image, void (*free_image)(moegen_image *),
                                         moegen_module **out);

/* "sm_XY" of the current context's device into arch ('a' for 9.0: wgmma
 * needs sm_90a); needs the driver. NO_DRIVER / NO_DEVICE (no current
 * context) with the reason in why otherwise. */
moegen_status moegen_current_arch(char *arch, size_t size, char *why, size_t why_size);

#endif
