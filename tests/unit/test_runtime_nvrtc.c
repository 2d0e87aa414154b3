/* tests/unit/test_runtime_nvrtc.c -- runtime/nvrtc.c: NVRTC compiles a tiny
 * self-contained kernel for sm_90a and sm_80 (no GPU needed). Exit 77 only
 * when libnvrtc.so.13 cannot be loaded. */
#include <stdlib.h>
#include <string.h>

#include "nvrtc.h"
#include "runtime_check.h"

static const char tiny_kernel[] =
    "extern \"C\" __global__ void moegen_router_fwd(float *out, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) out[i] = 2.0f * (float)i;\n"
    "}\n";

static const char broken_kernel[] = "extern \"C\" __global__ void k() { undeclared_name = 1; }\n";

/* Compiles tiny_kernel for arch and checks the result is an ELF cubin. */
static void compile_tiny(const char *arch, int verbose) {
  unsigned char *cubin;
  size_t size;
  char *log;
  double t0 = now_seconds();
  moegen_status st = moegen_nvrtc_compile(tiny_kernel, strlen(tiny_kernel), "tiny.cu", arch,
                                          verbose, &cubin, &size, &log);
  double dt = now_seconds() - t0;
  CHECK(st == MOEGEN_OK, "%s: %s\n%s", arch, moegen_status_string(st), log ? log : "");
  CHECK(size > 4 && memcmp(cubin, "\177ELF", 4) == 0, "%s: output is not an ELF cubin", arch);
  if (verbose) CHECK(log && strstr(log, "moegen_router_fwd"), "%s: no ptxas -v info in log", arch);
  printf("nvrtc: tiny kernel for %s%s: %zu bytes in %.1f ms\n", arch, verbose ? " (-v)" : "", size,
         dt * 1e3);
  free(cubin);
  free(log);
}

/* A compile error gives MOEGEN_ERR_COMPILE and a log naming the problem. */
static void compile_broken(void) {
  unsigned char *cubin;
  size_t size;
  char *log;
  moegen_status st = moegen_nvrtc_compile(broken_kernel, strlen(broken_kernel), "broken.cu",
                                          "sm_90a", 0, &cubin, &size, &log);
  CHECK(st == MOEGEN_ERR_COMPILE, "broken source: %s", moegen_status_string(st));
  CHECK(cubin == NULL && size == 0, "broken source produced a cubin");
  CHECK(log && strstr(log, "undeclared_name") && strstr(log, "broken.cu"), "log: %s",
        log ? log : "(none)");
  free(log);
}

/* The option set: the arch, C++17, device default, no fast math. */
static void check_options(void) {
  const char *const *opts = moegen_nvrtc_options_for("sm_90a");
  CHECK(opts && strcmp(opts[0], "-arch=sm_90a") == 0, "sm_90a options");
  int std = 0, dev = 0, def = 0;
  for (int i = 0; opts && opts[i]; i++) {
    std += strcmp(opts[i], "-std=c++17") == 0;
    dev += strcmp(opts[i], "-default-device") == 0;
    def += strcmp(opts[i], "-DMOEGEN_NVRTC=1") == 0;
    CHECK(!strstr(opts[i], "fast_math"), "fast math must stay off: %s", opts[i]);
    CHECK(!strstr(opts[i], "-I"), "no include paths: %s", opts[i]);
  }
  CHECK(std == 1 && dev == 1 && def == 1, "missing base options");
  CHECK(moegen_nvrtc_options_for("sm_80") != NULL, "sm_80 options");
  CHECK(moegen_nvrtc_options_for("sm_91") == NULL, "sm_91 is not an arch");
  CHECK(moegen_nvrtc_options_for(NULL) == NULL, "NULL arch");
  unsigned char *cubin;
  size_t size;
  char *log;
  moegen_status st = moegen_nvrtc_compile(tiny_kernel, strlen(tiny_kernel), "tiny.cu", "sm_91", 0,
                                          &cubin, &size, &log);
  CHECK(st == MOEGEN_ERR_INVALID_ARGUMENT && log && strstr(log, "sm_91"), "unknown arch: %s",
        moegen_status_string(st));
  free(log);
}

/* nvrtcGetSupportedArchs through moegen: ascending SM numbers that include
 * sm_80 and sm_90 (NVRTC 13), the count whatever max is, no load error. */
static void supported_archs(void) {
  int archs[64], count = 0, few[2] = {0, 0}, few_count = 0;
  char why[512];
  CHECK(moegen_nvrtc_supported_archs(archs, 64, &count) == MOEGEN_OK, "supported archs");
  CHECK(count > 2 && count <= 64, "%d supported archs", count);
  int has80 = 0, has90 = 0;
  for (int i = 0; i < count && i < 64; i++) {
    CHECK(i == 0 || archs[i] > archs[i - 1], "archs not ascending at %d: %d", i, archs[i]);
    has80 |= archs[i] == 80;
    has90 |= archs[i] == 90;
  }
  CHECK(has80 && has90, "sm_80 and sm_90 missing from the supported archs");
  CHECK(moegen_nvrtc_supported_archs(few, 1, &few_count) == MOEGEN_OK && few_count == count &&
            few[0] == archs[0] && few[1] == 0,
        "max 1: count %d, first %d, second written %d", few_count, few[0], few[1]);
  moegen_nvrtc_load_error(why, sizeof why);
  CHECK(why[0] == 0, "load error with NVRTC loaded: %s", why);
}

int main(void) {
  int major = 0, minor = 0;
  if (moegen_nvrtc_version(&major, &minor) != MOEGEN_OK) {
    printf("test_runtime_nvrtc: skipped, libnvrtc.so.13 cannot be loaded\n");
    return 77;
  }
  printf("nvrtc: version %d.%d\n", major, minor);
  CHECK(major == 13, "NVRTC %d.%d, expected 13.x", major, minor);
  check_options();
  supported_archs();
  compile_tiny("sm_90a", 0);
  compile_tiny("sm_80", 0);
  compile_tiny("sm_90a", 1);
  compile_broken();
  return check_result("test_runtime_nvrtc");
}
