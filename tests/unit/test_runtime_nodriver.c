/* tests/unit/test_runtime_nodriver.c -- the runtime on a machine without a
 * usable driver: clear statuses and messages, no crash.
 *
 *   test_runtime_nodriver missing  MOEGEN_LIBCUDA and MOEGEN_LIBNVRTC point
 *                                  at nonexistent files
 *   test_runtime_nodriver default  the real loader path (asserts NO_DRIVER
 *                                  only if libcuda.so.1 is absent)
 *
 * Each mode runs as its own process: the driver result is cached per process.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "module.h"
#include "nvrtc.h"
#include "runtime_check.h"

#define FAKE_LIBCUDA "/nonexistent/libcuda.so.1"
#define FAKE_LIBNVRTC "/nonexistent/libnvrtc.so.13"

/* An AOT-looking image; the cubin is never read without a driver. */
static moegen_image test_image(void) {
  static const unsigned char cubin[] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char *const cubins[MOEGEN_UNIT_COUNT] = {[MOEGEN_UNIT_ROUTER] = cubin};
  static const size_t sizes[MOEGEN_UNIT_COUNT] = {[MOEGEN_UNIT_ROUTER] = sizeof cubin};
  moegen_image img = {.abi_version = MOEGEN_RT_ABI_VERSION,
                      .name = "nodriver",
                      .arch = "sm_90a",
                      .config_lua = "{}",
                      .units = 1u << MOEGEN_UNIT_ROUTER,
                      .cubins = cubins,
                      .cubin_sizes = sizes,
                      .source = "",
                      .source_path = "<test>"};
  img.router.experts = 8;
  img.router.topk = 2;
  img.router.threads = 128;
  img.router.tokens_per_block = 4;
  return img;
}

/* Every status has distinct text starting with its own name. */
static void status_strings(void) {
  static const char *names[] = {"MOEGEN_OK",           "MOEGEN_ERR_INVALID_ARGUMENT",
                                "MOEGEN_ERR_NO_DRIVER", "MOEGEN_ERR_NO_DEVICE",
                                "MOEGEN_ERR_NO_NVRTC",  "MOEGEN_ERR_COMPILE",
                                "MOEGEN_ERR_ARCH_MISMATCH", "MOEGEN_ERR_CUDA",
                                "MOEGEN_ERR_OUT_OF_MEMORY", "MOEGEN_ERR_ABI_MISMATCH",
                                "MOEGEN_ERR_NOT_SUPPORTED"};
  for (int s = 0; s <= MOEGEN_ERR_NOT_SUPPORTED; s++) {
    const char *text = moegen_status_string((moegen_status)s);
    size_t n = strlen(names[s]);
    CHECK(strncmp(text, names[s], n) == 0 && text[n] == ':', "status %d: %s", s, text);
  }
  CHECK(moegen_status_string((moegen_status)999) != NULL, "unknown status");
}

/* create, load and an op all report the missing driver, naming `library`. */
static void module_without_driver(moegen_status want, const char *library) {
  moegen_image img = test_image();
  moegen_module *m = NULL;
  moegen_status st = moegen_module_create(&img, &m);
  const char *err = moegen_module_last_error(m);
  CHECK(st == want, "create: %s", moegen_status_string(st));
  CHECK(m != NULL && strstr(err, library), "last error '%s' should name %s", err, library);
  CHECK(moegen_module_image(m) == &img, "image");
  CHECK(moegen_module_load(m) == want, "load");
  moegen_router_fwd_args args = {.num_tokens = 16, .logits = (void *)&img};
  CHECK(moegen_router_fwd(m, &args, NULL) == want, "router_fwd");
  moegen_router_fwd_shape shape;
  CHECK(moegen_router_fwd_shape_of(&img, 16, &shape) == MOEGEN_OK && shape.probs[1] == 8,
        "shape functions need no driver");
  printf("no driver: %s\n", moegen_module_last_error(m));
  moegen_module_destroy(m);
}

static int freed_images;
static void free_heap_image(moegen_image *img) {
  freed_images++;
  free(img);
}

/* An owned image is freed by destroy, also when creation failed. */
static void owned_image(moegen_status want) {
  moegen_image *img = malloc(sizeof *img);
  *img = test_image();
  moegen_module *m = NULL;
  CHECK(moegen_module_create_owned(img, free_heap_image, &m) == want, "create_owned");
  CHECK(freed_images == 0, "freed too early");
  moegen_module_destroy(m);
  CHECK(freed_images == 1, "owned image not freed");
}

/* ABI mismatch is reported before the driver is looked at. */
static void abi_mismatch(void) {
  moegen_image img = test_image();
  img.abi_version = MOEGEN_RT_ABI_VERSION + 1;
  moegen_module *m = NULL;
  CHECK(moegen_module_create(&img, &m) == MOEGEN_ERR_ABI_MISMATCH, "abi");
  CHECK(strstr(moegen_module_last_error(m), "ABI version"), "abi message: %s",
        moegen_module_last_error(m));
  CHECK(moegen_module_load(m) == MOEGEN_ERR_ABI_MISMATCH, "abi load");
  moegen_module_destroy(m);
  CHECK(moegen_module_create(NULL, &m) == MOEGEN_ERR_INVALID_ARGUMENT && m == NULL, "NULL image");
  CHECK(moegen_module_create(&img, NULL) == MOEGEN_ERR_INVALID_ARGUMENT, "NULL out");
  CHECK(strcmp(moegen_module_last_error(NULL), "") == 0, "NULL module error");
}

/* The driver table itself: same result every call, reason given. */
static void driver_result(moegen_status want, const char *library) {
  const moegen_driver *d = (const moegen_driver *)1;
  char why[512];
  for (int i = 0; i < 2; i++) {
    CHECK(moegen_driver_get(&d, why, sizeof why) == want && d == NULL, "driver_get");
    CHECK(strstr(why, library) != NULL, "why: %s", why);
  }
  char text[128];
  moegen_driver_describe(2, text, sizeof text);
  CHECK(strstr(text, "2") != NULL, "describe without driver: %s", text);
}

/* The GEMM shape functions need no driver; the row-tiled ops' workspace is
 * the sm_90a kernels' tile ticket, none on the portable path. */
static void gemm_shapes(void) {
  moegen_image img = test_image();
  img.units |= 1u << MOEGEN_UNIT_GEMM; /* a module has a kernel iff its unit does and threads > 0 */
  img.gemm.experts = 8;
  img.gemm.gemm1 = (moegen_gemm_kernel_plan){.n = 512, .k = 256, .threads = 256};
  img.gemm.gemm2 = (moegen_gemm_kernel_plan){.n = 256, .k = 256, .threads = 256};
  for (int portable = 0; portable <= 1; portable++) {
    img.gemm.portable = portable;
    const size_t want = portable ? 0 : MOEGEN_GEMM_WORKSPACE_BYTES;
    moegen_gemm_fwd_shape fs;
    moegen_gemm_bwd_shape bs;
    CHECK(moegen_gemm_fwd_shape_of(&img, MOEGEN_GEMM1, 100, &fs) == MOEGEN_OK &&
              fs.y[0] == 100 && fs.y[1] == 512 && fs.workspace_bytes == want,
          "gemm_fwd shape (portable %d): workspace %zu", portable, fs.workspace_bytes);
    CHECK(moegen_gemm_bwd_shape_of(&img, MOEGEN_GEMM2, 100, &bs) == MOEGEN_OK &&
              bs.dx[1] == 256 && bs.workspace_bytes == want,
          "gemm_bwd shape (portable %d): workspace %zu", portable, bs.workspace_bytes);
  }
  moegen_gemm_fwd_shape fs;
  CHECK(moegen_gemm_fwd_shape_of(&img, (moegen_gemm_id)3, 100, &fs) == MOEGEN_ERR_INVALID_ARGUMENT,
        "gemm_fwd shape: which = 3");
  img.gemm.gemm1.threads = 0;
  CHECK(moegen_gemm_fwd_shape_of(&img, MOEGEN_GEMM1, 100, &fs) == MOEGEN_ERR_NOT_SUPPORTED,
        "gemm_fwd shape without GEMM kernels (threads = 0)");
  img.gemm.gemm1.threads = 256;
  img.units &= ~(1u << MOEGEN_UNIT_GEMM);
  CHECK(moegen_gemm_fwd_shape_of(&img, MOEGEN_GEMM1, 100, &fs) == MOEGEN_ERR_NOT_SUPPORTED,
        "gemm_fwd shape without GEMM kernels (no gemm unit)");
}

/* A JIT compile without NVRTC: MOEGEN_ERR_NO_NVRTC naming the library (also
 * in the load error and from the supported-arch list). */
static void no_nvrtc_compile(void) {
  unsigned char *cubin;
  size_t size;
  char *log;
  int hit, major, minor, archs[4], count = -1;
  char why[512];
  CHECK(moegen_nvrtc_version(&major, &minor) == MOEGEN_ERR_NO_NVRTC, "nvrtc version");
  CHECK(moegen_nvrtc_supported_archs(archs, 4, &count) == MOEGEN_ERR_NO_NVRTC && count == 0,
        "supported archs without NVRTC: count %d", count);
  moegen_nvrtc_load_error(why, sizeof why);
  CHECK(strstr(why, FAKE_LIBNVRTC) != NULL, "load error: \"%s\"", why);
  moegen_status st = moegen_cache_compile("", 0, "x", "sm_90a", &cubin, &size, &log, &hit);
  CHECK(st == MOEGEN_ERR_NO_NVRTC && log && strstr(log, FAKE_LIBNVRTC), "cache_compile: %s %s",
        moegen_status_string(st), log ? log : "");
  free(log);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "missing";
  status_strings();
  abi_mismatch();
  gemm_shapes();
  if (strcmp(mode, "missing") == 0) {
    setenv("MOEGEN_LIBCUDA", FAKE_LIBCUDA, 1);
    setenv("MOEGEN_LIBNVRTC", FAKE_LIBNVRTC, 1);
    driver_result(MOEGEN_ERR_NO_DRIVER, FAKE_LIBCUDA);
    module_without_driver(MOEGEN_ERR_NO_DRIVER, FAKE_LIBCUDA);
    owned_image(MOEGEN_ERR_NO_DRIVER);
    no_nvrtc_compile();
  } else {
    unsetenv("MOEGEN_LIBCUDA");
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      printf("test_runtime_nodriver: libcuda.so.1 exists here; NO_DRIVER assertion skipped\n");
      dlclose(lib);
    } else {
      driver_result(MOEGEN_ERR_NO_DRIVER, "libcuda.so.1");
      module_without_driver(MOEGEN_ERR_NO_DRIVER, "libcuda.so.1");
      owned_image(MOEGEN_ERR_NO_DRIVER);
    }
  }
  return check_result("test_runtime_nodriver");
}
