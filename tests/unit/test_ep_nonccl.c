/* tests/unit/test_ep_nonccl.c -- expert parallelism's NCCL loading, on a
 * driverless module (MOEGEN_LIBCUDA nonexistent; the NCCL check comes
 * first, so the messages are the same with a driver). The EP shape
 * function needs neither driver nor NCCL.
 *
 *   test_ep_nonccl missing  $MOEGEN_LIBNCCL at a nonexistent file (set by
 *                           CTest): moegen_ep_available and both EP ops
 *                           return MOEGEN_ERR_NOT_SUPPORTED naming it
 *   test_ep_nonccl default  the real libnccl.so.2 lookup: NOT_SUPPORTED
 *                           naming libnccl.so.2 if dlopen cannot find it,
 *                           else every entry point resolves (available is
 *                           OK) and a NULL communicator is refused */
#include <dlfcn.h>
#include <string.h>

#include "runtime_check.h"

#define FAKE_LIBNCCL "/nonexistent/libnccl.so.2"

static moegen_image test_image(void) {
  static const unsigned char cubin[] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char *const cubins[MOEGEN_UNIT_COUNT] = {[MOEGEN_UNIT_PERMUTE] = cubin};
  static const size_t sizes[MOEGEN_UNIT_COUNT] = {[MOEGEN_UNIT_PERMUTE] = sizeof cubin};
  moegen_image img = {.abi_version = MOEGEN_RT_ABI_VERSION,
                      .name = "nonccl",
                      .arch = "sm_90a",
                      .config_lua = "{}",
                      .units = 1u << MOEGEN_UNIT_PERMUTE,
                      .cubins = cubins,
                      .cubin_sizes = sizes,
                      .source = "",
                      .source_path = "<test>"};
  img.permute.experts = 24;
  img.permute.topk = 3;
  img.permute.hidden = 64;
  img.permute.max_chunks = 2048;
  return img;
}

static void shapes(const moegen_image *img) {
  moegen_ep_shape s;
  CHECK(moegen_ep_shape_of(img, 8, 100, MOEGEN_EP_EXACT, &s) == MOEGEN_OK, "shape R=8");
  CHECK(s.local_experts == 3 && s.recv_rows[0] == 8 * 100 * 3 && s.recv_rows[1] == 64 &&
            s.recv_offsets[0] == 8 && s.recv_offsets[1] == 4 && s.local_offsets[0] == 4 &&
            s.host_sizes[0] == 25 && s.state_bytes >= 2 * 8 * 100 * 3 * 64,
        "shape values (El %d, N %lld)", s.local_experts, (long long)s.recv_rows[0]);
  CHECK(moegen_ep_shape_of(img, 5, 100, MOEGEN_EP_EXACT, &s) == MOEGEN_ERR_INVALID_ARGUMENT,
        "24 experts over 5 ranks accepted");
  CHECK(moegen_ep_shape_of(img, 0, 100, MOEGEN_EP_EXACT, &s) == MOEGEN_ERR_INVALID_ARGUMENT,
        "0 ranks accepted");
  CHECK(moegen_ep_shape_of(img, 2, -1, MOEGEN_EP_EXACT, &s) == MOEGEN_ERR_INVALID_ARGUMENT,
        "max_tokens < 0 accepted");
}

int main(int argc, char **argv) {
  const int missing = argc > 1 && !strcmp(argv[1], "missing");
  void *lib = missing ? NULL : dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  const char *library = missing ? FAKE_LIBNCCL : "libnccl.so.2";
  moegen_image img = test_image();
  shapes(&img);
  char why[512] = "";
  moegen_module *m = NULL;
  moegen_module_create(&img, &m); /* no driver: the module still reports errors */
  CHECK(m != NULL, "module");
  moegen_ep_args a = {.rank = 0, .ranks = 1, .mode = MOEGEN_EP_EXACT, .max_tokens = 4,
                      .dtype = MOEGEN_DTYPE_BF16};
  if (lib) { /* NCCL present: loaded, then the arguments are checked */
    CHECK(moegen_ep_available(why, sizeof why) == MOEGEN_OK, "available: %s", why);
    CHECK(moegen_ep_dispatch(m, &a, NULL) == MOEGEN_ERR_INVALID_ARGUMENT &&
              strstr(moegen_module_last_error(m), "comm"),
          "NULL comm: '%s'", moegen_module_last_error(m));
    printf("NCCL present: %s\n", moegen_module_last_error(m));
    moegen_module_destroy(m);
    return check_result("test_ep_nonccl default");
  }
  CHECK(moegen_ep_available(why, sizeof why) == MOEGEN_ERR_NOT_SUPPORTED, "available");
  CHECK(strstr(why, library) && strstr(why, "NCCL"), "why: '%s'", why);
  CHECK(moegen_ep_dispatch(m, &a, NULL) == MOEGEN_ERR_NOT_SUPPORTED, "dispatch");
  CHECK(strstr(moegen_module_last_error(m), "ep_dispatch") &&
            strstr(moegen_module_last_error(m), library),
        "dispatch error: '%s'", moegen_module_last_error(m));
  CHECK(moegen_ep_combine(m, &a, NULL) == MOEGEN_ERR_NOT_SUPPORTED, "combine");
  CHECK(strstr(moegen_module_last_error(m), "ep_combine") &&
            strstr(moegen_module_last_error(m), library),
        "combine error: '%s'", moegen_module_last_error(m));
  printf("no NCCL: %s\n", moegen_module_last_error(m));
  moegen_module_destroy(m);
  return check_result("test_ep_nonccl");
}
