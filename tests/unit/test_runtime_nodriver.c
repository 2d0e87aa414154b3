/* tests/unit/test_runtime_nodriver.c -- the runtime on a machine without a
 * usable driver: clear statuses and messages, no crash.
 *
 *   test_runtime_nodriver missing  MOEGEN_LIBCUDA and MOEGEN_LIBNVRTC point
 *                                  at nonexistent files
 *   test_runtime_nodriver default  the real loader path (asserts NO_DRIVER
 *                                  only if libcuda.so.1 is absent)
 *
 * Both also call every op at T = 0 (0 rows) with NULL data pointers on a
 * driverless module holding every kernel: what needs no GPU work returns
 * MOEGEN_OK, what must still write reaches the driver (the create failure:
 * its argument checks passed), a missing output that is written at T = 0
 * is INVALID_ARGUMENT. (The writes themselves: the GPU tests.)
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

/* An image that holds every kernel (plans just big enough for the checks;
 * no cubin is read without a driver). */
static moegen_image full_image(void) {
  moegen_image img = test_image();
  img.units = (1u << MOEGEN_UNIT_COUNT) - 1;
  img.router_bwd = (moegen_router_bwd_plan){.experts = 8, .topk = 2, .threads = 128,
                                            .tokens_per_block = 4};
  img.aux = (moegen_aux_plan){.experts = 8, .topk = 2, .threads = 128, .tokens_per_block = 4,
                              .loss_threads = 256, .loss_unroll = 4, .loss_max_blocks = 64};
  const moegen_gemm_kernel_plan g1 = {.n = 512, .k = 256, .bm = 128, .bn = 128, .bk = 64,
                                      .threads = 256};
  const moegen_gemm_kernel_plan g2 = {.n = 256, .k = 256, .bm = 128, .bn = 128, .bk = 64,
                                      .threads = 256};
  img.gemm = (moegen_gemm_plan){.experts = 8, .portable = 1, .gemm1 = g1, .gemm2 = g2,
                                .gemm1_glu = g1, .gemm1_dgrad = g1, .gemm2_dgrad = g2,
                                .gemm1_wgrad = g1, .gemm2_wgrad = g2};
  img.permute = (moegen_permute_plan){.experts = 8, .topk = 2, .hidden = 256, .tile_tokens = 128,
                                      .copy_threads = 256, .copy_group = 8,
                                      .gather_threads = 256, .gather_group = 8, .zero_chunk = 16,
                                      .max_chunks = 64};
  return img;
}

/* Checks one op's status at T = 0; on INVALID_ARGUMENT also that the last
 * error names `says`. */
#define EMPTY(call, want, says)                                                             \
  do {                                                                                      \
    moegen_status st_ = (call);                                                             \
    CHECK(st_ == (want), "%s: %s (%s)", #call, moegen_status_string(st_),                   \
          moegen_module_last_error(m));                                                     \
    if ((want) == MOEGEN_ERR_INVALID_ARGUMENT)                                              \
      CHECK(strstr(moegen_module_last_error(m), says), "%s: '%s' should say '%s'", #call,   \
            moegen_module_last_error(m), says);                                             \
  } while (0)

/* Every op at T = 0 with NULL data pointers (see the top of this file);
 * `driver`: the create failure of a driverless module. */
static void empty_batch(moegen_status driver) {
  moegen_image img = full_image();
  moegen_module *m = NULL;
  moegen_module_create(&img, &m);
  CHECK(m != NULL, "create");
  if (!m) return;
  void *buf = (void *)(uintptr_t)0x100000; /* a device pointer that is never dereferenced */
  const moegen_status OK = MOEGEN_OK, BAD = MOEGEN_ERR_INVALID_ARGUMENT;

  EMPTY(moegen_router_fwd(m, &(moegen_router_fwd_args){0}, NULL), OK, "");
  EMPTY(moegen_router_fwd(m, &(moegen_router_fwd_args){.expert_counts = buf}, NULL), driver, "");
  EMPTY(moegen_router_bwd(m, &(moegen_router_bwd_args){0}, NULL), OK, "");
  EMPTY(moegen_aux_scores_fwd(m, &(moegen_aux_scores_fwd_args){0}, NULL), OK, "");
  EMPTY(moegen_aux_scores_bwd(m, &(moegen_aux_scores_bwd_args){0}, NULL), OK, "");
  moegen_aux_loss_shape ls;
  CHECK(moegen_aux_loss_shape_of(&img, 0, 8, &ls) == OK, "aux loss shape");
  moegen_aux_loss_fwd_args lf = {.cols = 8, .total_num_tokens = 1, .num_experts = 8, .topk = 2,
                                 .aux_loss = buf, .workspace = buf,
                                 .workspace_bytes = ls.workspace_bytes};
  EMPTY(moegen_aux_loss_fwd(m, &lf, NULL), driver, "");
  lf.aux_loss = NULL;
  EMPTY(moegen_aux_loss_fwd(m, &lf, NULL), BAD, "aux_loss is NULL");
  EMPTY(moegen_aux_loss_bwd(m, &(moegen_aux_loss_bwd_args){.cols = 8}, NULL), OK, "");

  for (moegen_gemm_id g = MOEGEN_GEMM1; g <= MOEGEN_GEMM2; g++) {
    EMPTY(moegen_gemm_fwd(m, &(moegen_gemm_fwd_args){.which = g}, NULL), OK, "");
    EMPTY(moegen_gemm_dgrad(m, &(moegen_gemm_dgrad_args){.which = g}, NULL), OK, "");
    EMPTY(moegen_gemm_wgrad(m, &(moegen_gemm_wgrad_args){.which = g, .accumulate = 1}, NULL), OK,
          "");
    EMPTY(moegen_gemm_wgrad(m, &(moegen_gemm_wgrad_args){.which = g, .dw = buf, .db = buf}, NULL),
          driver, "");
    EMPTY(moegen_gemm_wgrad(m, &(moegen_gemm_wgrad_args){.which = g}, NULL), BAD, "dw is NULL");
  }
  EMPTY(moegen_gemm_fwd(m, &(moegen_gemm_fwd_args){.which = 2, .max_rows = 1, .x = buf, .w = buf,
                                                   .y = buf}, NULL),
        BAD, "neither given");
  EMPTY(moegen_gemm1_fwd_glu(m, &(moegen_gemm_glu_args){0}, NULL), OK, "");
  EMPTY(moegen_gemm2_dgrad_glu(m, &(moegen_gemm_dglu_args){0}, NULL), OK, "");

  moegen_permute_shape ps;
  CHECK(moegen_permute_shape_of(&img, 0, 1, 0, &ps) == OK, "permute shape");
  moegen_permute_args pf = {.dtype = MOEGEN_DTYPE_BF16, .align = 1, .offsets = buf, .counts = buf,
                            .workspace = buf, .workspace_bytes = ps.workspace_bytes};
  EMPTY(moegen_permute_fwd(m, &pf, NULL), driver, "");
  pf.align = 16; /* R = E * 15 pad rows, zeroed */
  pf.rows = pf.permuted_probs = buf;
  EMPTY(moegen_permute_fwd(m, &pf, NULL), driver, "");
  pf.offsets = NULL;
  EMPTY(moegen_permute_fwd(m, &pf, NULL), BAD, "offsets and counts are required");
  EMPTY(moegen_unpermute_fwd(m, &(moegen_unpermute_args){.dtype = MOEGEN_DTYPE_BF16}, NULL), OK, "");
  EMPTY(moegen_permute_bwd(m, &(moegen_permute_bwd_args){.dtype = MOEGEN_DTYPE_BF16}, NULL), OK, "");
  moegen_unpermute_bwd_args ub = {.dtype = MOEGEN_DTYPE_BF16};
  EMPTY(moegen_unpermute_bwd(m, &ub, NULL), OK, "");
  ub.num_rows = 8 * 15;
  ub.offsets = ub.counts = buf;
  ub.grad_rows = buf;
  EMPTY(moegen_unpermute_bwd(m, &ub, NULL), driver, "");
  ub.grad_rows = NULL;
  EMPTY(moegen_unpermute_bwd(m, &ub, NULL), BAD, "grad_rows are required");
  EMPTY(moegen_sort_chunks(m, &(moegen_sort_chunks_args){.dtype = MOEGEN_DTYPE_BF16, .num_chunks = 3},
                           NULL),
        OK, "");

  EMPTY(moegen_layer_fwd(m, &(moegen_layer_fwd_args){.max_tokens = 16}, NULL), OK, "");
  EMPTY(moegen_layer_bwd(m, &(moegen_layer_bwd_args){.max_tokens = 16, .accumulate = 1}, NULL), OK,
        "");
  EMPTY(moegen_layer_bwd(m, &(moegen_layer_bwd_args){.max_tokens = 16, .dw1 = buf, .dw2 = buf},
                         NULL),
        driver, "");
  EMPTY(moegen_layer_bwd(m, &(moegen_layer_bwd_args){.max_tokens = 16}, NULL), BAD,
        "dw1 and dw2 are written");
  moegen_module_destroy(m);
}

/* A JIT compile without NVRTC: MOEGEN_ERR_NO_NVRTC naming the library (also
 * in the load error and from the supported-arch list). */
static void no_nvrtc_compile(void) {
  unsigned char *cubin;
  size_t size;
  char *log;
  moegen_cache_outcome outcome;
  int major, minor, archs[4], count = -1;
  char why[512];
  CHECK(moegen_nvrtc_version(&major, &minor) == MOEGEN_ERR_NO_NVRTC, "nvrtc version");
  CHECK(moegen_nvrtc_supported_archs(archs, 4, &count) == MOEGEN_ERR_NO_NVRTC && count == 0,
        "supported archs without NVRTC: count %d", count);
  moegen_nvrtc_load_error(why, sizeof why);
  CHECK(strstr(why, FAKE_LIBNVRTC) != NULL, "load error: \"%s\"", why);
  moegen_status st = moegen_cache_compile(&(moegen_cache_source){.body = "", .body_size = 0}, "x", "sm_90a", NULL, &cubin, &size, &log, &outcome);
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
    empty_batch(MOEGEN_ERR_NO_DRIVER);
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
      empty_batch(MOEGEN_ERR_NO_DRIVER);
    }
  }
  return check_result("test_runtime_nodriver");
}
