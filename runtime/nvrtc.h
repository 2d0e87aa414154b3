/* runtime/nvrtc.h -- internal: NVRTC, loaded at run time (libnvrtc.so.13). */
#ifndef MOEGEN_RUNTIME_NVRTC_H
#define MOEGEN_RUNTIME_NVRTC_H

#include <stddef.h>

#include "moegen/runtime.h"
#include "shared.h"

/* The options moegen passes for `arch` (NULL-terminated, static strings). */
const char *const *moegen_nvrtc_options_for(const char *arch);

#endif
