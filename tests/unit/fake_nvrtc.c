/* tests/unit/fake_nvrtc.c -- a stand-in libnvrtc.so.13 for the CLI tests
 * (loaded through MOEGEN_LIBNVRTC). It exports what runtime/nvrtc.c loads,
 * reports version 13.0, supports sm_75, sm_80 and sm_90, and never builds a
 * cubin: with FAKE_NVRTC=oom nvrtcCreateProgram runs out of memory; else
 * nvrtcCompileProgram fails with a one-line log. */
#include <stdlib.h>
#include <string.h>

enum { SUCCESS = 0, OUT_OF_MEMORY = 1, COMPILATION = 6 };

static const char compile_log[] = "fake NVRTC: this library compiles nothing\n";
static const int archs[] = {75, 80, 90};
static int program; /* the one program handle */

int nvrtcVersion(int *major, int *minor) {
  *major = 13;
  *minor = 0;
  return SUCCESS;
}

const char *nvrtcGetErrorString(int r) {
  return r == OUT_OF_MEMORY ? "NVRTC_ERROR_OUT_OF_MEMORY"
         : r == COMPILATION ? "NVRTC_ERROR_COMPILATION"
                            : "NVRTC_SUCCESS";
}

int nvrtcGetNumSupportedArchs(int *n) {
  *n = (int)(sizeof archs / sizeof archs[0]);
  return SUCCESS;
}

int nvrtcGetSupportedArchs(int *out) {
  memcpy(out, archs, sizeof archs);
  return SUCCESS;
}

int nvrtcCreateProgram(void **p, const char *src, const char *name, int n, const char *const *h,
                       const char *const *names) {
  const char *mode = getenv("FAKE_NVRTC");
  (void)src, (void)name, (void)n, (void)h, (void)names;
  if (mode && strcmp(mode, "oom") == 0) return OUT_OF_MEMORY;
  *p = &program;
  return SUCCESS;
}

int nvrtcCompileProgram(void *p, int n, const char *const *options) {
  (void)p, (void)n, (void)options;
  return COMPILATION;
}

int nvrtcGetProgramLogSize(void *p, size_t *size) {
  (void)p;
  *size = sizeof compile_log;
  return SUCCESS;
}

int nvrtcGetProgramLog(void *p, char *log) {
  (void)p;
  memcpy(log, compile_log, sizeof compile_log);
  return SUCCESS;
}

int nvrtcGetCUBINSize(void *p, size_t *size) {
  (void)p;
  *size = 0;
  return COMPILATION;
}

int nvrtcGetCUBIN(void *p, char *cubin) {
  (void)p, (void)cubin;
  return COMPILATION;
}

int nvrtcDestroyProgram(void **p) {
  *p = NULL;
  return SUCCESS;
}
