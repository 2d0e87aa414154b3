/* runtime/status.c -- what each moegen_status means and what to do about it. */
#include "moegen/runtime.h"

/* Static text for a status: its name, what happened, what to do. Never NULL. */
const char *moegen_status_string(moegen_status s) {
  switch (s) {
  case MOEGEN_OK:
    return "MOEGEN_OK: success";
  case MOEGEN_ERR_INVALID_ARGUMENT:
    return "MOEGEN_ERR_INVALID_ARGUMENT: a NULL pointer, size or dtype the call cannot take; "
           "check the arguments against the op's header comment";
  case MOEGEN_ERR_NO_DRIVER:
    return "MOEGEN_ERR_NO_DRIVER: libcuda.so.1 is missing or too old (needs CUDA 12.0+); "
           "install the NVIDIA driver or set MOEGEN_LIBCUDA to its path";
  case MOEGEN_ERR_NO_DEVICE:
    return "MOEGEN_ERR_NO_DEVICE: no usable GPU, or no CUDA context current on this thread; "
           "check nvidia-smi and call cudaSetDevice/cuCtxSetCurrent first";
  case MOEGEN_ERR_NO_NVRTC:
    return "MOEGEN_ERR_NO_NVRTC: a JIT image needs libnvrtc.so.13, which cannot be loaded; "
           "install the CUDA 13 NVRTC or set MOEGEN_LIBNVRTC, or use an AOT image";
  case MOEGEN_ERR_COMPILE:
    return "MOEGEN_ERR_COMPILE: NVRTC rejected the generated source; "
           "the module's last error holds the log and the source path";
  case MOEGEN_ERR_ARCH_MISMATCH:
    return "MOEGEN_ERR_ARCH_MISMATCH: the image was built for another GPU architecture; "
           "regenerate it for the device's arch (named in the last error)";
  case MOEGEN_ERR_CUDA:
    return "MOEGEN_ERR_CUDA: a CUDA driver call failed; "
           "the module's last error names the call and the CUDA error";
  case MOEGEN_ERR_OUT_OF_MEMORY:
    return "MOEGEN_ERR_OUT_OF_MEMORY: a host allocation failed";
  case MOEGEN_ERR_ABI_MISMATCH:
    return "MOEGEN_ERR_ABI_MISMATCH: the image was made by an incompatible moegen; "
           "regenerate it with the moegen that matches this runtime";
  case MOEGEN_ERR_NOT_SUPPORTED:
    return "MOEGEN_ERR_NOT_SUPPORTED: the op or setting is not part of this module's "
           "configuration; regenerate with it enabled";
  }
  return "MOEGEN_ERR_?: unknown status code (runtime and caller disagree on the header)";
}
