/* runtime/module.c -- modules: loaded cubins, their kernels, per-device setup.
 *
 * A unit is loaded once, on the first use of one of its kernels, with
 * cuLibraryLoadData: an AOT image has a cubin per unit; a JIT image's unit
 * is compiled a kernel a cubin (all of the unit's kernels at once, in
 * parallel: moegen_kernel_jobs_run) and loaded a library per kernel. A CUlibrary is
 * context-independent, and the CUkernel of cuLibraryGetKernel is launchable
 * (as a CUfunction) in any context. What is per device -- the arch check, the
 * SM count, the kernel's dynamic shared memory limit -- is done once per
 * device under the module's lock and then published with a release store, so
 * moegen_module_kernel's fast path is one cuCtxGetDevice and an acquire load.
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module.h"
#include "shared.h"

enum { MAX_DEVICES = 64 };

#define KERNEL_DESC(ID, name, UNIT, plan, threads, smem, sig) \
  [MOEGEN_KERNEL_##ID] = {"moegen_" #name, MOEGEN_UNIT_##UNIT, MOEGEN_SIG_##sig},
const moegen_kernel_desc moegen_kernels[MOEGEN_KERNEL_COUNT] = {MOEGEN_KERNELS(KERNEL_DESC)};

struct moegen_module {
  const moegen_image *image;
  moegen_image *owned;                 /* image to free at destroy, or NULL */
  void (*free_image)(moegen_image *);
  const moegen_driver *drv;            /* NULL iff unusable != MOEGEN_OK */
  moegen_status unusable;              /* why the module cannot load (from create) */

  pthread_mutex_t lock;                /* serializes loading and per-device setup */
  moegen_jit_source jit_source;        /* JIT: the source and its hash (at the first compile) */
  unsigned compiled;                   /* JIT: bit u: unit u's kernels are compiled */
  unsigned char *jit_cubin[MOEGEN_KERNEL_COUNT]; /* JIT: NVRTC output, a cubin per kernel */
  size_t jit_cubin_size[MOEGEN_KERNEL_COUNT];
  CUlibrary unit_lib[MOEGEN_UNIT_COUNT];  /* AOT: a library per unit; written once, under lock */
  CUlibrary kernel_lib[MOEGEN_KERNEL_COUNT]; /* JIT: a library per kernel; likewise */
  unsigned loaded;                     /* bit u: unit u's libraries are loaded (under lock) */
  CUkernel kernels[MOEGEN_KERNEL_COUNT]; /* written once each, under lock */
  int sm_count[MAX_DEVICES];           /* written once per device, under lock */
  /* 1 + the dynamic smem bytes set for kernel k on device d; 0 = not set up.
   * The release store publishes kernels[k], sm_count[d] and lib. */
  atomic_uint ready[MOEGEN_KERNEL_COUNT][MAX_DEVICES];
  int occupancy[MOEGEN_KERNEL_COUNT][MAX_DEVICES]; /* resident blocks per SM, under lock */

  pthread_mutex_t error_lock;          /* guards error */
  char *error;                         /* last error of any thread, or NULL */
};

/* ---------------------------------------------------------------- errors */

/* malloc'd vprintf result, or NULL if out of memory. */
static char *vformat(const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  char *s = n < 0 ? NULL : malloc((size_t)n + 1);
  if (s) vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

moegen_status moegen_module_fail(moegen_module *m, moegen_status s, const char *fmt, ...) {
  if (!m) return s;
  va_list ap;
  va_start(ap, fmt);
  char *text = vformat(fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&m->error_lock);
  free(m->error);
  m->error = text;
  pthread_mutex_unlock(&m->error_lock);
  return s;
}

moegen_status moegen_module_cuda_fail(moegen_module *m, CUresult r, const char *what) {
  char text[256];
  moegen_driver_describe(r, text, sizeof text);
  return moegen_module_fail(m, MOEGEN_ERR_CUDA, "%s: %s", what, text);
}

static pthread_once_t g_copy_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_copy_key; /* per-thread copy of a last error */

static void make_copy_key(void) { pthread_key_create(&g_copy_key, free); }

/* Copies text into the calling thread's buffer (freed at thread exit). */
static const char *thread_copy(const char *text) {
  pthread_once(&g_copy_once, make_copy_key);
  char *buf = realloc(pthread_getspecific(g_copy_key), strlen(text) + 1);
  if (!buf) return "moegen: out of memory copying the last error";
  pthread_setspecific(g_copy_key, buf);
  return strcpy(buf, text);
}

/* The module's last error -- of any thread -- copied for the calling thread:
 * valid until this thread's next moegen_module_last_error call. */
const char *moegen_module_last_error(const moegen_module *m) {
  if (!m) return "";
  moegen_module *mm = (moegen_module *)m; /* the locks are not part of the value */
  pthread_mutex_lock(&mm->error_lock);
  const char *copy = thread_copy(mm->error ? mm->error : "");
  pthread_mutex_unlock(&mm->error_lock);
  return copy;
}

/* ---------------------------------------------------------------- lifetime */

/* Creates a module; takes `owned` (freed with free_image) whatever happens. */
static moegen_status create(const moegen_image *image, moegen_image *owned,
                            void (*free_image)(moegen_image *), moegen_module **out) {
  moegen_module *m = image ? calloc(1, sizeof *m) : NULL;
  if (!m) {
    if (owned) free_image(owned);
    return image ? MOEGEN_ERR_OUT_OF_MEMORY : MOEGEN_ERR_INVALID_ARGUMENT;
  }
  m->image = image;
  m->owned = owned;
  m->free_image = free_image;
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_init(&m->error_lock, NULL);
  *out = m;
  if (image->abi_version != MOEGEN_RT_ABI_VERSION) {
    m->unusable = moegen_module_fail(m, MOEGEN_ERR_ABI_MISMATCH,
                                     "image %s has runtime ABI version %d, this runtime takes %d: "
                                     "regenerate it with the matching moegen",
                                     image->name ? image->name : "?", image->abi_version,
                                     MOEGEN_RT_ABI_VERSION);
    return m->unusable;
  }
  char why[512];
  m->unusable = moegen_driver_get(&m->drv, why, sizeof why);
  if (m->unusable != MOEGEN_OK) return moegen_module_fail(m, m->unusable, "%s", why);
  return MOEGEN_OK;
}

moegen_status moegen_module_create(const moegen_image *image, moegen_module **out) {
  if (!out) return MOEGEN_ERR_INVALID_ARGUMENT;
  *out = NULL;
  return create(image, NULL, NULL, out);
}

moegen_status moegen_module_create_owned(moegen_image *image, void (*free_image)(moegen_image *),
                                         moegen_module **out) {
  if (!out || !free_image) {
    if (image && free_image) free_image(image);
    return MOEGEN_ERR_INVALID_ARGUMENT;
  }
  *out = NULL;
  return create(image, image, free_image, out);
}

void moegen_module_destroy(moegen_module *m) {
  if (!m) return;
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++)
    if (m->unit_lib[u]) m->drv->cuLibraryUnload(m->unit_lib[u]);
  for (int k = 0; k < MOEGEN_KERNEL_COUNT; k++) {
    if (m->kernel_lib[k]) m->drv->cuLibraryUnload(m->kernel_lib[k]);
    free(m->jit_cubin[k]);
  }
  if (m->owned) m->free_image(m->owned);
  free(m->error);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->error_lock);
  free(m);
}

const moegen_image *moegen_module_image(const moegen_module *m) { return m ? m->image : NULL; }

const moegen_driver *moegen_module_driver(const moegen_module *m) { return m ? m->drv : NULL; }

moegen_status moegen_module_memset32(moegen_module *m, void *p, unsigned value, size_t n,
                                     CUstream stream, const char *what) {
  if (!m->drv) return m->unusable; /* the reason is already the last error */
  CUresult r = m->drv->cuMemsetD32Async((CUdeviceptr)(uintptr_t)p, value, n, stream);
  return r ? moegen_module_cuda_fail(m, r, what) : MOEGEN_OK;
}

/* ---------------------------------------------------------------- arch */

/* Parses "sm_XY" / "sm_XYa" / "sm_XYf" (X may be two digits); 0 on success. */
static int parse_arch(const char *arch, int *major, int *minor, char *suffix) {
  if (!arch || strncmp(arch, "sm_", 3) != 0) return -1;
  const char *p = arch + 3;
  int n = 0, digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++) n = n * 10 + (*p - '0');
  *suffix = *p == 'a' || *p == 'f' ? *p++ : 0;
  if (digits < 2 || *p) return -1;
  *major = n / 10;
  *minor = n % 10;
  return 0;
}

/* SASS runs on the same major with an equal or newer minor; 'a' (arch-
 * specific features such as wgmma) needs the exact compute capability. */
static int arch_runs_on(int major, int minor, char suffix, int dev_major, int dev_minor) {
  if (suffix == 'a') return dev_major == major && dev_minor == minor;
  return dev_major == major && dev_minor >= minor;
}

/* Fails unless device d can run the image's cubin. */
static moegen_status check_arch(moegen_module *m, CUdevice d, int dev_major, int dev_minor) {
  const moegen_image *img = m->image;
  int major, minor;
  char suffix;
  if (parse_arch(img->arch, &major, &minor, &suffix) != 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "image %s: arch '%s' is not of the form sm_XY[a|f]", img->name,
                              img->arch ? img->arch : "(null)");
  if (arch_runs_on(major, minor, suffix, dev_major, dev_minor)) return MOEGEN_OK;
  return moegen_module_fail(m, MOEGEN_ERR_ARCH_MISMATCH,
                            "image %s is built for %s but device %d has compute capability "
                            "%d.%d: regenerate it for sm_%d%d%s",
                            img->name, img->arch, d, dev_major, dev_minor, dev_major, dev_minor,
                            dev_major == 9 ? "a" : "");
}

moegen_status moegen_current_arch(char *arch, size_t size, char *why, size_t why_size) {
  const moegen_driver *d;
  moegen_status st = moegen_driver_get(&d, why, why_size);
  CUdevice dev;
  int major = 0, minor = 0;
  if (st == MOEGEN_OK && d->cuCtxGetDevice(&dev) != 0) {
    snprintf(why, why_size, "no current CUDA context on this thread: pass an arch or set a device");
    return MOEGEN_ERR_NO_DEVICE;
  }
  if (st != MOEGEN_OK) return st;
  CUresult r = d->cuDeviceGetAttribute(&major, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (!r) r = d->cuDeviceGetAttribute(&minor, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (r) {
    moegen_driver_describe(r, why, why_size);
    return MOEGEN_ERR_CUDA;
  }
  snprintf(arch, size, "sm_%d%d%s", major, minor, major == 9 ? "a" : "");
  return MOEGEN_OK;
}

/* ---------------------------------------------------------------- loading */

/* The current context's device, or NO_DEVICE when no context is current. */
static moegen_status current_device(moegen_module *m, CUdevice *d) {
  CUresult r = m->drv->cuCtxGetDevice(d);
  if (r == MOEGEN_CUDA_ERROR_INVALID_CONTEXT)
    return moegen_module_fail(m, MOEGEN_ERR_NO_DEVICE,
                              "no current CUDA context on this thread: call "
                              "cudaSetDevice/cuCtxSetCurrent first");
  if (r) return moegen_module_cuda_fail(m, r, "cuCtxGetDevice");
  if (*d < 0 || *d >= MAX_DEVICES)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                              "device ordinal %d: moegen supports devices 0..%d", *d,
                              MAX_DEVICES - 1);
  return MOEGEN_OK;
}

/* Arch check and SM count of device d (once per device; lock held). */
static moegen_status setup_device(moegen_module *m, CUdevice d) {
  if (m->sm_count[d]) return MOEGEN_OK;
  int major = 0, minor = 0, sms = 0;
  CUresult (*attribute)(int *, int, CUdevice) = m->drv->cuDeviceGetAttribute;
  CUresult r = attribute(&major, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  if (!r) r = attribute(&minor, MOEGEN_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  if (!r) r = attribute(&sms, MOEGEN_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  if (r) return moegen_module_cuda_fail(m, r, "cuDeviceGetAttribute");
  moegen_status st = check_arch(m, d, major, minor);
  if (st == MOEGEN_OK) m->sm_count[d] = sms;
  return st;
}

/* The error for a unit the module does not hold. */
static moegen_status no_unit(moegen_module *m, moegen_unit u) {
  return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                            "module %s (%s) has no %s kernels: its config or arch does not call "
                            "for them", m->image->name, m->image->arch, moegen_unit_name(u));
}

/* Records the first failed job's error (NVRTC's log, or what was missing). */
static moegen_status compile_failed(moegen_module *m, const moegen_kernel_job *j) {
  const moegen_image *img = m->image;
  moegen_status st = j->st;
  if (st == MOEGEN_ERR_OUT_OF_MEMORY)
    return moegen_module_fail(m, st, "out of memory compiling %s (%s unit) of module %s",
                              j->kernel_name, moegen_unit_name(j->unit), img->name);
  if (st == MOEGEN_ERR_NO_NVRTC)
    return moegen_module_fail(m, st, "module %s is a JIT image and needs NVRTC: %s", img->name,
                              j->log ? j->log : "");
  return moegen_module_fail(m, st, "NVRTC could not compile %s (%s unit) of module %s for %s "
                            "(source: %s, MOEGEN_UNIT=%d, MOEGEN_KERNEL=%d):\n%s",
                            j->kernel_name, moegen_unit_name(j->unit), img->name, img->arch,
                            img->source_path ? img->source_path : "?", (int)j->unit, j->kernel,
                            j->log ? j->log : "");
}

/* Compiles the kernels of the JIT units in `want` (a bit per unit) that are
 * not compiled yet into m->jit_cubin, all at once (moegen_kernel_jobs_run;
 * lock held). The GEMM training kernels, the slowest, go first. */
static moegen_status compile_units(moegen_module *m, unsigned want) {
  const moegen_image *img = m->image;
  want &= img->units & ~m->compiled;
  if (img->cubins || !want) return MOEGEN_OK; /* AOT, or done */
  if (!m->jit_source.text)
    moegen_jit_source_init(&m->jit_source, img->name, img->arch, img->source, img->source_size);
  moegen_kernel_job jobs[MOEGEN_KERNEL_COUNT];
  size_t n = 0;
  for (int id = MOEGEN_KERNEL_COUNT - 1; id >= 0; id--)
    if (want >> moegen_kernels[id].unit & 1u && !m->jit_cubin[id] &&
        moegen_has_kernel(img, (moegen_kernel_id)id))
      jobs[n++] = (moegen_kernel_job){.kernel = id, .unit = moegen_kernels[id].unit,
                                      .kernel_name = moegen_kernels[id].name};
  moegen_status st = moegen_kernel_jobs_run(&m->jit_source, jobs, n);
  const moegen_kernel_job *failed = NULL;
  for (size_t i = 0; i < n; i++) {
    if (jobs[i].st == MOEGEN_OK) {
      m->jit_cubin[jobs[i].kernel] = jobs[i].cubin;
      m->jit_cubin_size[jobs[i].kernel] = jobs[i].cubin_size;
    } else if (!failed) {
      failed = &jobs[i];
    }
  }
  if (failed) compile_failed(m, failed);
  for (size_t i = 0; i < n; i++) free(jobs[i].log);
  if (st == MOEGEN_OK) m->compiled |= want;
  return st;
}

/* Loads one cubin as a context-independent library into *lib. */
static moegen_status load_cubin(moegen_module *m, const void *cubin, moegen_unit u,
                                const char *kernel, CUlibrary *lib) {
  CUresult r = m->drv->cuLibraryLoadData(lib, cubin, NULL, NULL, 0, NULL, NULL, 0);
  if (!r) return MOEGEN_OK;
  const moegen_image *img = m->image;
  char text[256];
  moegen_driver_describe(r, text, sizeof text);
  return moegen_module_fail(m, MOEGEN_ERR_CUDA,
                            "cuLibraryLoadData(module %s, %s unit%s%s, %s, %s cubin, source: %s): %s",
                            img->name, moegen_unit_name(u), kernel ? ": " : "", kernel ? kernel : "",
                            img->arch, img->cubins ? "AOT" : "JIT",
                            img->source_path ? img->source_path : "?", text);
}

/* Loads unit u: the AOT image's cubin, or each of its kernels' JIT cubins
 * (compiling them first, once; lock held). */
static moegen_status load_unit(moegen_module *m, moegen_unit u) {
  if (m->loaded >> u & 1u) return MOEGEN_OK;
  const moegen_image *img = m->image;
  if (!(img->units >> u & 1u) || (img->cubins && !img->cubins[u])) return no_unit(m, u);
  moegen_status st = img->cubins ? load_cubin(m, img->cubins[u], u, NULL, &m->unit_lib[u])
                                 : compile_units(m, 1u << u);
  for (int id = 0; st == MOEGEN_OK && !img->cubins && id < MOEGEN_KERNEL_COUNT; id++)
    if (moegen_kernels[id].unit == u && m->jit_cubin[id] && !m->kernel_lib[id])
      st = load_cubin(m, m->jit_cubin[id], u, moegen_kernels[id].name, &m->kernel_lib[id]);
  if (st == MOEGEN_OK) m->loaded |= 1u << u;
  return st;
}

/* Resolves kernel id in the library (once; lock held). */
static moegen_status resolve_kernel(moegen_module *m, moegen_kernel_id id) {
  if (m->kernels[id]) return MOEGEN_OK;
  CUlibrary lib = m->image->cubins ? m->unit_lib[moegen_kernels[id].unit] : m->kernel_lib[id];
  CUresult r = m->drv->cuLibraryGetKernel(&m->kernels[id], lib, moegen_kernels[id].name);
  if (!r) return MOEGEN_OK;
  char text[256];
  moegen_driver_describe(r, text, sizeof text);
  return moegen_module_fail(m, MOEGEN_ERR_CUDA,
                            "cuLibraryGetKernel(%s) in module %s (source: %s): %s",
                            moegen_kernels[id].name, m->image->name,
                            m->image->source_path ? m->image->source_path : "?", text);
}

/* Raises kernel id's dynamic shared memory limit on device d (lock held). */
static moegen_status set_smem(moegen_module *m, moegen_kernel_id id, CUdevice d, unsigned smem) {
  if (smem == 0) return MOEGEN_OK;
  CUresult r = m->drv->cuKernelSetAttribute(MOEGEN_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            (int)smem, m->kernels[id], d);
  if (!r) return MOEGEN_OK;
  int limit = 0;
  m->drv->cuDeviceGetAttribute(&limit, MOEGEN_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                               d);
  char text[256];
  moegen_driver_describe(r, text, sizeof text);
  return moegen_module_fail(m, MOEGEN_ERR_CUDA,
                            "cuKernelSetAttribute(%s, max dynamic smem = %u bytes) on device %d "
                            "(opt-in limit %d bytes): %s",
                            moegen_kernels[id].name, smem, d, limit, text);
}

/* Resident blocks of kernel id per SM on the current device (lock held),
 * for persistent grids. */
static moegen_status measure_occupancy(moegen_module *m, moegen_kernel_id id, CUdevice d,
                                       unsigned threads, unsigned smem) {
  CUfunction f;
  int blocks = 0;
  CUresult r = m->drv->cuKernelGetFunction(&f, m->kernels[id]);
  if (!r) r = m->drv->cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, (int)threads, smem);
  if (r) return moegen_module_cuda_fail(m, r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  m->occupancy[id][d] = blocks > 0 ? blocks : 1;
  return MOEGEN_OK;
}

/* Slow path: everything kernel id needs on device d, then publish. */
static moegen_status prepare(moegen_module *m, moegen_kernel_id id, CUdevice d, unsigned threads,
                             unsigned smem) {
  pthread_mutex_lock(&m->lock);
  moegen_status st = setup_device(m, d);
  if (st == MOEGEN_OK) st = load_unit(m, moegen_kernels[id].unit);
  if (st == MOEGEN_OK) st = resolve_kernel(m, id);
  unsigned done = atomic_load_explicit(&m->ready[id][d], memory_order_relaxed);
  if (st == MOEGEN_OK && done < smem + 1) st = set_smem(m, id, d, smem);
  if (st == MOEGEN_OK && done < smem + 1) st = measure_occupancy(m, id, d, threads, smem);
  if (st == MOEGEN_OK && done < smem + 1)
    atomic_store_explicit(&m->ready[id][d], smem + 1, memory_order_release);
  pthread_mutex_unlock(&m->lock);
  return st;
}

moegen_status moegen_module_kernel(moegen_module *m, moegen_kernel_id id, unsigned threads,
                                   unsigned smem_bytes, CUfunction *fn, moegen_device_info *dev) {
  if (!m || !fn || !dev || (unsigned)id >= MOEGEN_KERNEL_COUNT) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (!m->drv) return m->unusable; /* the reason is already the last error */
  if (smem_bytes > (unsigned)INT_MAX)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: smem_bytes %u is too large",
                              moegen_kernels[id].name, smem_bytes);
  CUdevice d;
  moegen_status st = current_device(m, &d);
  if (st != MOEGEN_OK) return st;
  if (atomic_load_explicit(&m->ready[id][d], memory_order_acquire) < smem_bytes + 1) {
    st = prepare(m, id, d, threads, smem_bytes);
    if (st != MOEGEN_OK) return st;
  }
  *fn = (CUfunction)m->kernels[id];
  dev->device = d;
  dev->sm_count = m->sm_count[d];
  dev->blocks_per_sm = m->occupancy[id][d];
  return MOEGEN_OK;
}

moegen_status moegen_module_launch(moegen_module *m, moegen_kernel_id id, moegen_signature_id sig,
                                   CUfunction fn, const moegen_launch_dims *d, void **params,
                                   CUstream stream, const char *what) {
  if ((unsigned)id >= MOEGEN_KERNEL_COUNT || moegen_kernels[id].signature != sig)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: internal error: kernel %d launched with the arguments of "
                              "signature %d (moegen/abi.def)", what, (int)id, (int)sig);
  CUresult r = m->drv->cuLaunchKernel(fn, d->grid, 1, 1, d->threads, 1, 1, d->smem_bytes, stream,
                                      params, NULL);
  if (!r) return MOEGEN_OK;
  char text[256];
  moegen_driver_describe(r, text, sizeof text);
  return moegen_module_fail(m, MOEGEN_ERR_CUDA, "%s: cuLaunchKernel(%s, grid %u, block %u, smem %u): %s",
                            what, moegen_kernels[id].name, d->grid, d->threads, d->smem_bytes, text);
}

/* The plan kernel id was rendered with, if it is a GEMM kernel plan. */
#define GEMM_PLAN_CASE(ID, name, UNIT, plan, threads, smem, sig) \
  case MOEGEN_KERNEL_##ID:                                           \
    return _Generic(img->plan, moegen_gemm_kernel_plan                \
                    : (const moegen_gemm_kernel_plan *)(const void *)&img->plan, default : NULL);
const moegen_gemm_kernel_plan *moegen_gemm_plan_of(const moegen_image *img, moegen_kernel_id id) {
  switch (id) {
    MOEGEN_KERNELS(GEMM_PLAN_CASE)
  default: return NULL;
  }
}

#define SMEM_OF_smem_bytes(plan) (unsigned)(plan).smem_bytes
#define SMEM_OF_none(plan) 0u
#define SHAPE_CASE(ID, name, UNIT, plan, threads_field, smem_field, sig) \
  case MOEGEN_KERNEL_##ID:                                                 \
    *threads = (unsigned)img->plan.threads_field;                          \
    *smem = SMEM_OF_##smem_field(img->plan);                               \
    break;
void moegen_kernel_shape(const moegen_image *img, moegen_kernel_id id, unsigned *threads,
                         unsigned *smem) {
  *threads = *smem = 0;
  if ((unsigned)id >= MOEGEN_KERNEL_COUNT || !(img->units >> moegen_kernels[id].unit & 1u)) return;
  switch (id) {
    MOEGEN_KERNELS(SHAPE_CASE)
  default: break;
  }
  if (*threads == 0) *smem = 0;
}

int moegen_has_kernel(const moegen_image *img, moegen_kernel_id id) {
  unsigned threads, smem;
  moegen_kernel_shape(img, id, &threads, &smem);
  return threads > 0;
}

/* Compiles (concurrently) and prepares every kernel of the units in `want`. */
static moegen_status load_units(moegen_module *m, unsigned want) {
  if (!m->drv) return m->unusable;
  pthread_mutex_lock(&m->lock);
  moegen_status st = compile_units(m, want);
  pthread_mutex_unlock(&m->lock);
  for (int id = 0; st == MOEGEN_OK && id < MOEGEN_KERNEL_COUNT; id++) {
    unsigned threads, smem;
    if (!(want >> moegen_kernels[id].unit & 1u)) continue;
    moegen_kernel_shape(m->image, (moegen_kernel_id)id, &threads, &smem);
    if (threads == 0) continue;
    CUfunction fn;
    moegen_device_info dev;
    st = moegen_module_kernel(m, (moegen_kernel_id)id, threads, smem, &fn, &dev);
  }
  return st;
}

moegen_status moegen_module_load(moegen_module *m) {
  if (!m) return MOEGEN_ERR_INVALID_ARGUMENT;
  return load_units(m, (1u << MOEGEN_UNIT_COUNT) - 1);
}

moegen_status moegen_module_load_unit(moegen_module *m, moegen_unit u) {
  if (!m || (unsigned)u >= MOEGEN_UNIT_COUNT) return MOEGEN_ERR_INVALID_ARGUMENT;
  if (m->drv && !(m->image->units >> u & 1u))
    return no_unit(m, u);
  return load_units(m, 1u << u);
}
